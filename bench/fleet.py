"""The fleet's speed: a Mooncake trace routed over 4 real replicas, headless, against the trace's own
duration (the modeled seconds it spans); and the cost of one routing decision at 16 replicas,
against one replica step of the same model.

    python -m bench.fleet            # ~1 min: 60 s of mooncake-conv over 4 replicas, 16-replica routing
    python -m bench.fleet --quick    # seconds: 5 s of trace, the tiny random Llama
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import median, parse, parser, print_table, random_llama, timed, write_results
from engine import DEFAULT_MODEL, EngineConfig, load_model
from engine.fleet.config import FleetConfig
from engine.fleet.fleet import ROUTER_CLASSES, Fleet
from engine.fleet.router import Arrival
from engine.fleet.workload import mooncake_requests
from engine.kv.prefix_cache import page_hashes

DEPLOYMENT = "llama-3.1-8b@h100-sxm"


def serve(model: str, loaded, duration_s: float, replicas: int, router: str) -> dict:
    """The trace's first duration_s seconds over the fleet, to the end: wall time against the trace's span."""
    config = EngineConfig(model=model, deployment=DEPLOYMENT, enable_prefix_caching=True)
    fleet = Fleet(config, FleetConfig(num_replicas=replicas, router=router), loaded)
    requests = mooncake_requests("mooncake-conv", loaded.vocab_size, duration_s=duration_s)
    for req in requests:
        req.submit(fleet)
    timing, _ = timed(fleet.run)
    steps = sum(e.step_index for e in fleet.replicas)
    return {"router": router, "replicas": replicas, "requests": len(requests), "trace_s": duration_s,
            "replica_steps": steps, "wall_s": timing.wall, "cpu_s": timing.cpu,
            "trace_s_per_wall_s": duration_s / timing.wall, "ms_per_replica_step": 1000 * timing.wall / steps}


def route_cost(model: str, loaded, replicas: int, decisions: int) -> list[dict]:
    """Each router's decision at `replicas` replicas whose caches hold real pages, in µs, and as a
    fraction of one replica step (a decode of one request) on the same machine."""
    config = EngineConfig(model=model, deployment=DEPLOYMENT, enable_prefix_caching=True, num_gpu_blocks=512)
    warm = Fleet(config, FleetConfig(num_replicas=replicas, router="round_robin"), loaded)
    requests = mooncake_requests("mooncake-conv", loaded.vocab_size, duration_s=120)[:2 * replicas]
    for req in requests:
        req.submit(warm)
    warm.run()  # every replica now caches the pages of two requests
    engine = warm.replicas[0]
    engine.add_request(list(requests[0].token_ids[:64]), arrival_ms=engine.clock_ms)
    step, _ = timed(engine.step)
    probe = requests[-1]
    arrival = Arrival("probe", probe.token_ids, tuple(page_hashes(list(probe.token_ids), config.block_size)), 0.0)
    rows = []
    for name, cls in ROUTER_CLASSES.items():
        router = cls(FleetConfig(num_replicas=replicas, router=name), config.block_size, [512] * replicas)
        times = []
        for _ in range(decisions):
            start = time.perf_counter()
            router.route(arrival, warm.replicas)
            times.append(time.perf_counter() - start)
        us = 1e6 * median(times)
        rows.append({"router": name, "replicas": replicas, "us_per_decision": us,
                     "fraction_of_a_step": us / (1e6 * step.wall)})
    return rows


def main(argv: list[str] | None = None) -> dict:
    args = parse(parser(__doc__.split("\n\n")[0]), argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = random_llama("tiny", Path(tmp)) if args.quick else DEFAULT_MODEL
        loaded = load_model(model)
        duration = 5.0 if args.quick else 60.0
        runs = [serve(model, loaded, duration, 4, "dynamo") for _ in range(args.repeats)]
        run = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
        routing = route_cost(model, loaded, 16, 50 if args.quick else 500)
    print_table(f"mooncake-conv, first {duration:g} s, over 4 replicas (router dynamo), modeled on {DEPLOYMENT}",
                ["requests", "replica steps", "wall s", "trace s / wall s", "ms / replica step"],
                [[run["requests"], run["replica_steps"], run["wall_s"], run["trace_s_per_wall_s"],
                  run["ms_per_replica_step"]]])
    print_table("One routing decision at 16 replicas", ["router", "us / decision", "of one replica step"],
                [[r["router"], r["us_per_decision"], f"{100 * r['fraction_of_a_step']:.2f}%"] for r in routing])
    data = {"quick": args.quick, "repeats": args.repeats, "serve": run, "serve_runs": runs, "routing": routing}
    write_results(args.out, "fleet", data)
    return data


if __name__ == "__main__":
    main()
