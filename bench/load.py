"""How long a real trace takes to serve headless: the Azure conversation trace at a rate, on the
embedded default model, priced on a deployment (the first workload big enough to stress the engine).

    python -m bench.load            # 60 s of azure-conv at 4 req/s (240 requests)
    python -m bench.load --quick    # 5 s of it
"""

from __future__ import annotations

import time

from bench.common import median, parse, parser, print_table, write_results
from engine import DEFAULT_MODEL, Engine, EngineConfig, load_model
from engine.workload import submit
from engine.workload.load import TraceSpec

DEPLOYMENT = "llama-3.1-8b@h100-sxm"


def serve(spec: TraceSpec) -> dict:
    config = EngineConfig(model=DEFAULT_MODEL, deployment=DEPLOYMENT, slo_ttft_ms=500, slo_tpot_ms=50)
    engine = Engine(config, loaded=load_model(config.model, config.device, config.dtype))
    items = spec.items()
    submit(engine, items)
    t0 = time.perf_counter()
    records = engine.run()
    wall = time.perf_counter() - t0
    agg = engine.metrics()["aggregate"]
    return {"requests": len(items), "steps": len(records), "wall_s": wall, "modeled_s": engine.clock_ms / 1000,
            "ms_per_step": 1000 * wall / len(records), "goodput": agg["goodput"],
            "request_throughput": agg["request_throughput"]}


def main(argv: list[str] | None = None) -> dict:
    args = parse(parser(__doc__.split("\n\n")[0]), argv)
    spec = TraceSpec("azure-conv", rate=4.0, duration_s=5.0 if args.quick else 60.0)
    runs = [serve(spec) for _ in range(args.repeats)]
    run = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]  # the median run
    print_table(f"{spec.label}, priced on {DEPLOYMENT}", ["requests", "steps", "wall s", "ms/step", "modeled s"],
                [[run["requests"], run["steps"], run["wall_s"], run["ms_per_step"], run["modeled_s"]]])
    data = {"quick": args.quick, "repeats": args.repeats, "trace": spec.label, "median_run": run,
            "wall_s_runs": [r["wall_s"] for r in runs], "wall_s_median": median([r["wall_s"] for r in runs])}
    write_results(args.out, "load", data)
    return data


if __name__ == "__main__":
    main()
