"""What pricing steps on a deployment adds to a step: the engine with and without one, same run.

Both engines run the same workload on the embedded default model; the priced one also
builds each step's modeled cost (engine/hardware.py) and its record. Two numbers: the
time inside the pricing over the priced engine's step time (its share, measured in the
same steps), and the ratio of the two engines' median step times (which shared-machine
noise blurs by a few percent either way).

    python -m bench.pricing            # the chat_mix and burst presets, 3 repeats
    python -m bench.pricing --quick    # one preset, one repeat
"""

from __future__ import annotations

import time

from bench.common import median, parse, parser, print_table, write_results
from engine import DEFAULT_MODEL, Engine, EngineConfig, load_model
from engine.hardware import Deployment
from engine.workload import PRESETS, submit

DEPLOYMENT = "llama-3.1-8b@h100-sxm"


def step_times(config: EngineConfig, preset: str) -> tuple[list[float], float]:
    """Each step's ms, and the ms spent pricing them all."""
    engine = Engine(config, loaded=load_model(config.model, config.device, config.dtype))
    submit(engine, PRESETS[preset]())
    price, pricing_ms = engine._price, [0.0]

    def timed_price(*args):
        t0 = time.perf_counter()
        cost = price(*args)
        pricing_ms[0] += (time.perf_counter() - t0) * 1e3
        return cost

    engine._price = timed_price
    times = []
    while engine.has_unfinished_requests():
        t0 = time.perf_counter()
        engine.step()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, pricing_ms[0]


def pricing_us(batch_size: int, calls: int = 2000) -> float:
    """Microseconds for one Deployment.step_cost of a decode batch of that size."""
    dep = Deployment.parse(DEPLOYMENT)
    batch = [(1, 300)] * batch_size
    t0 = time.perf_counter()
    for _ in range(calls):
        dep.step_cost(batch)
    return (time.perf_counter() - t0) * 1e6 / calls


def main(argv: list[str] | None = None) -> dict:
    args = parse(parser(__doc__.split("\n\n")[0]), argv)
    presets = ["chat_mix"] if args.quick else ["chat_mix", "burst"]
    rows, results = [], []
    for preset in presets:
        plain, priced, shares = [], [], []
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits both alike
            plain.append(median(step_times(EngineConfig(model=DEFAULT_MODEL), preset)[0]))
            times, pricing_ms = step_times(EngineConfig(model=DEFAULT_MODEL, deployment=DEPLOYMENT), preset)
            priced.append(median(times))
            shares.append(pricing_ms / sum(times))
        ratio = median([p / q for p, q in zip(priced, plain, strict=True)])
        results.append({"preset": preset, "step_ms_p50_plain": median(plain), "step_ms_p50_priced": median(priced),
                        "priced_over_plain": ratio, "pricing_share_of_step": median(shares)})
        rows.append([preset, median(plain), median(priced), ratio, f"{100 * median(shares):.2f} %"])
    cost = {n: pricing_us(n) for n in (1, 16, 64)}
    print_table(f"Engine step, this machine's clock vs priced on {DEPLOYMENT}",
                ["preset", "ms/step plain", "ms/step priced", "priced / plain", "pricing's share"], rows)
    print_table("Deployment.step_cost alone", ["decode batch", "us/call"], [[n, us] for n, us in cost.items()])
    data = {"quick": args.quick, "repeats": args.repeats, "deployment": DEPLOYMENT, "runs": results,
            "step_cost_us": cost}
    write_results(args.out, "pricing", data)
    return data


if __name__ == "__main__":
    main()
