"""NVIDIA Dynamo's own KV router as the oracle for the fleet's ``dynamo`` router.

    venv="$(tests/reference/make_dynamo_venv.sh | tail -1)"
    python tests/reference/dynamo_oracle.py --dynamo-python "$venv/bin/python"

The same requests (the Mooncake conversation trace, each hash block a page of token ids)
go through the lab's fleet and through ai-dynamo-runtime 1.6.1's router and mock engines
(tests/reference/dynamo_replay.py, in Dynamo's venv), as a Mooncake-format trace whose
hash ids name the lab's pages one for one.

1. **Idle replicas, roomy pools** (arrivals 120 s apart on the modeled clock; nothing evicted): here a replica's
   cost depends only on what its cache holds, so the fleet follows Dynamo's choices and,
   at every arrival, Dynamo's replica must be one of the lab's cheapest, at the cost
   Dynamo's selector logged, with the same cached-prefix blocks and the same best
   available overlap. Any difference fails (exit status 1).
2. **Under load** (the trace's own timing, small pools): the mock engines' timing is not
   the lab's deployment model (they are slowed to match it on average, from case 1), so
   decisions can differ. Reported side by side for
   round_robin and the KV router: agreement with Dynamo's choices, overlap regret, and
   prefix reuse.
3. **Disaggregated**: the same slice as 1 prefill + 3 decode replicas against 4 aggregated ones,
   in the lab and in Dynamo's replay: whether each effect (TTFT, ITL, TPOT) has the same sign.
4. **Conditional disaggregation, request by request**: Dynamo's replay with its isl_bounding
   bypass on reports, per request, the prefix its decode router saw cached on the chosen decode
   worker and whether the request was prefilled apart; the lab's ``dynamo_conditional`` decider,
   given those same inputs, must decide as Dynamo did, every time (exit status 1 if not). The lab's
   own run of the slice is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from engine.config import EngineConfig
from engine.fleet.config import FleetConfig
from engine.fleet.disagg import decide
from engine.fleet.dynamo import DynamoRouter
from engine.fleet.fleet import Fleet
from engine.fleet.metrics import fleet_metrics
from engine.fleet.router import cached_prefix_pages
from engine.fleet.workload import FleetRequest, mooncake_requests
from engine.metrics import serving_metrics
from engine.model_runner import load_model

HERE = Path(__file__).parent
DEPLOYMENT = "llama-3.1-8b@h100-sxm"
# Priced at full size, a Mooncake request takes up to about a minute on the deployment: two apart,
# every replica is idle when the next one arrives.
IDLE_GAP_MS = 120_000.0


def mooncake_trace(requests: list[FleetRequest], block_size: int) -> str:
    """The requests as Dynamo reads them: one hash id per page of the lab (equal pages, equal ids),
    and a fresh id for each prompt's partial last page."""
    ids: dict[tuple[int, ...], int] = {}
    lines = []
    for req in requests:
        tokens = req.token_ids
        hashes = []
        for start in range(0, len(tokens), block_size):
            prefix = tokens[:start + block_size]  # a page is named by everything up to its end
            key = prefix if len(prefix) % block_size == 0 else (*prefix, -len(lines) - 1)
            hashes.append(ids.setdefault(key, len(ids)))
        lines.append(json.dumps({"timestamp": req.arrival_ms, "input_length": len(tokens),
                                 "output_length": req.max_tokens, "hash_ids": hashes}))
    return "\n".join(lines) + "\n"


def dynamo(python: str, requests: list[FleetRequest], workers: int, router: str, config: EngineConfig,
           speedup: float = 1.0, prefill_workers: int = 0, conditional: tuple[int, float] | None = None) -> dict:
    """Dynamo's replay of the requests; its mock engines run at `speedup` times their own timing model;
    `conditional`: Dynamo's conditional disaggregation at these thresholds (effective prompt, ratio)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        trace.write_text(mooncake_trace(requests, config.block_size))
        out = subprocess.run([python, str(HERE / "dynamo_replay.py"), str(trace), "--workers", str(workers),
                              "--router", router, "--block-size", str(config.block_size),
                              "--num-gpu-blocks", str(config.num_gpu_blocks), "--max-num-seqs",
                              str(config.max_num_seqs), "--max-num-batched-tokens",
                              str(config.max_num_batched_tokens), "--speedup-ratio", str(speedup),
                              "--prefill-workers", str(prefill_workers),
                              *(("--conditional-disagg", *map(str, conditional)) if conditional else ())],
                             capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


class Following(DynamoRouter):
    """The lab's Dynamo cost model, made to send each request where Dynamo did: so both fleets' caches
    hold the same pages at every arrival, and each cost table can be checked against Dynamo's pick."""

    def __init__(self, fleet, block_size: int, pool_sizes: list[int], choices: list[int]):
        super().__init__(fleet, block_size, pool_sizes)
        self.choices = iter(choices)

    def pick(self, cands):
        return cands[next(self.choices)], "as Dynamo chose"


def run_fleet(requests: list[FleetRequest], config: EngineConfig, fleet: FleetConfig, loaded,
              follow: list[int] | None = None) -> tuple[Fleet, list[list[int]]]:
    """The fleet run to the end, and at each arrival the prefix blocks each replica's cache really held
    (whatever its router reads), for the overlap regret."""
    f = Fleet(config, fleet, loaded)
    if follow is not None:
        f.router = Following(fleet, config.block_size, fleet.pool_sizes(config.num_gpu_blocks), follow)
    overlaps = []
    route = f.router.route

    def route_and_look(arrival, replicas):
        overlaps.append([cached_prefix_pages(e, arrival.page_hashes) for e in replicas])
        return route(arrival, replicas)

    f.router.route = route_and_look
    for req in requests:
        req.submit(f)
    f.run()
    return f, overlaps


def idle_check(python: str, loaded, count: int) -> tuple[list[str], float]:
    """Case 1: every decision of Dynamo's router, re-costed by the lab at the same cache state. Also
    returns how much faster Dynamo's mock engines served the same requests, alone, than the lab's
    deployment model prices them (mean end-to-end latency): the load case slows them by as much."""
    config = EngineConfig(deployment=DEPLOYMENT, enable_prefix_caching=True, num_gpu_blocks=2048)
    requests = [replace(r, arrival_ms=IDLE_GAP_MS * i)
                for i, r in enumerate(mooncake_requests("mooncake-conv", loaded.vocab_size, duration_s=600)[:count])]
    replay = dynamo(python, requests, 4, "kv_router", config)
    ref = replay["requests"]
    fleet, _ = run_fleet(requests, config, FleetConfig(num_replicas=4, router="dynamo"), loaded,
                         follow=[r["worker"] for r in ref])
    speedup = replay["summary"]["mean_e2e_latency_ms"] / fleet_metrics(fleet)["aggregate"]["e2e_ms"]["mean"]
    failures = []
    for i, (mine, theirs) in enumerate(zip(fleet.decisions, ref, strict=True)):
        low = min(c.total for c in mine.candidates)
        chosen = mine.candidates[theirs["worker"]]
        best_overlap = max(c.inputs["cached_blocks"] for c in mine.candidates)
        problems = [p for p, bad in (
            (f"Dynamo's replica {theirs['worker']} costs {chosen.total:g} here, the cheapest {low:g}",
             chosen.total != low),
            (f"cost {chosen.total:g} here, Dynamo logged {theirs['logit']}",
             theirs["logit"] is None or abs(chosen.total - theirs["logit"]) > 1e-6),
            (f"cached blocks {chosen.inputs['cached_blocks']} here, Dynamo {theirs['selected_overlap_blocks']}",
             chosen.inputs["cached_blocks"] != theirs["selected_overlap_blocks"]),
            (f"best overlap {best_overlap} here, Dynamo {theirs['best_available_overlap_blocks']}",
             best_overlap != theirs["best_available_overlap_blocks"])) if bad]
        failures += [f"request {i}: {p}" for p in problems]
    ties = sum(sum(c.total == min(x.total for x in d.candidates) for c in d.candidates) > 1 for d in fleet.decisions)
    print(f"idle: {count} requests, 4 replicas: {count - len({f.split(':')[0] for f in failures})} decisions equal "
          f"Dynamo's (replica among the cheapest, cost, cached and best overlap); {ties} had tied costs")
    return failures, speedup


def in_order(requests: list[FleetRequest]) -> list[FleetRequest]:
    """Arrivals a microsecond apart where the trace has equal timestamps: Dynamo's report lists requests
    by completion, and only distinct arrival times put them back in the order they were routed."""
    return [replace(r, arrival_ms=r.arrival_ms + i * 1e-3) for i, r in enumerate(requests)]


def load_report(python: str, loaded, duration_s: float, speedup: float) -> None:
    """Case 2: the same trace under load, both routers, side by side; Dynamo's mock engines run at
    `speedup` so that a request alone takes as long as on the lab's deployment model."""
    config = EngineConfig(deployment=DEPLOYMENT, enable_prefix_caching=True, num_gpu_blocks=256)
    requests = in_order(mooncake_requests("mooncake-synth", loaded.vocab_size, duration_s=duration_s))
    print(f"\nunder load: mooncake-synth, first {duration_s:g} s ({len(requests)} requests), 4 replicas of "
          f"{config.num_gpu_blocks} pages; Dynamo's mock engines at {speedup:.3g}x their speed")
    print(f"{'router':<12} {'agree':>6} {'regret (lab)':>13} {'regret (Dynamo)':>16} {'reuse (lab)':>12} "
          f"{'reuse (Dynamo)':>15}")
    for mine, theirs in (("round_robin", "round_robin"), ("dynamo", "kv_router"), ("least_loaded", None),
                         ("llmd", None), ("sglang", None)):
        fleet, overlaps = run_fleet(requests, config, FleetConfig(num_replicas=4, router=mine), loaded)
        regret = [max(held) - held[d.replica] for d, held in zip(fleet.decisions, overlaps, strict=True)]
        reuse = fleet_metrics(fleet)["aggregate"]["prefix_reuse_ratio"]
        row = f"{mine:<12} {'':>6} {sum(regret) / len(regret):>13.2f} {'':>16} {reuse:>12.1%} {'':>15}"
        if theirs is not None:
            ref = dynamo(python, requests, 4, theirs, config, speedup)
            agree = sum(d.replica == r["worker"] for d, r in zip(fleet.decisions, ref["requests"], strict=True))
            theirs_regret = [r["overlap_regret_blocks"] or 0 for r in ref["requests"]]
            shown = "-" if theirs == "round_robin" else f"{sum(theirs_regret) / len(theirs_regret):.2f}"
            row = (f"{mine:<12} {agree / len(requests):>6.0%} {sum(regret) / len(regret):>13.2f} {shown:>16} "
                   f"{reuse:>12.1%} {ref['summary']['prefix_cache_reused_ratio']:>15.1%}")
        print(row)
    print("(regret: the most prefix blocks any replica's cache held, less the chosen one's, per request; Dynamo "
          "reports it for its KV router only)")


def disagg_report(python: str, loaded, duration_s: float, speedup: float) -> None:
    """Case 3: the same slice aggregated on 4 replicas and as 1 prefill + 3 decode, in the lab and in
    Dynamo's replay: the direction and size of each effect (disaggregated minus aggregated)."""
    config = EngineConfig(deployment=DEPLOYMENT, enable_prefix_caching=True, num_gpu_blocks=256)
    requests = in_order(mooncake_requests("mooncake-conv", loaded.vocab_size, duration_s=duration_s))
    keys = (("TTFT median", "median_ttft_ms", "median_ttft_ms"), ("ITL p90", "itl_ms_p90", "p90_itl_ms"),
            ("ITL p99", "itl_ms_p99", "p99_itl_ms"), ("TPOT median", "median_tpot_ms", "median_tpot_ms"))
    lab = [serving_metrics(fleet_metrics(run_fleet(requests, config, FleetConfig(
        num_replicas=4, num_prefill_replicas=p, router="dynamo"), loaded)[0])["aggregate"]) for p in (0, 1)]
    ref = [dynamo(python, requests, 4, "kv_router", config, speedup, p)["summary"] for p in (0, 1)]
    print(f"\ndisaggregated (1 prefill + 3 decode) against aggregated (4), mooncake-conv first {duration_s:g} s "
          f"({len(requests)} requests), ms:")
    print(f"{'':<12} {'lab agg':>9} {'lab 1P3D':>9} {'Dynamo agg':>11} {'Dynamo 1P3D':>12}  same direction")
    for label, mine, theirs in keys:
        a, d, ra, rd = lab[0][mine], lab[1][mine], ref[0][theirs], ref[1][theirs]
        same = "yes" if (d > a) == (rd > ra) else "no"
        print(f"{label:<12} {a:>9.1f} {d:>9.1f} {ra:>11.1f} {rd:>12.1f}  {same}")
    print("(Dynamo's mock engines price their own timing model and move KV on their own terms; the lab prices "
          "llama-3.1-8b on an H100 and moves it over ib-ndr)")


def decider_check(python: str, loaded, duration_s: float, speedup: float) -> list[str]:
    """Case 4: Dynamo's conditional-disagg decision for each request of a slice, against the lab's decider
    fed Dynamo's own inputs (the prompt, and the prefix cached on the decode worker Dynamo chose). The
    trace is in the engine's tokens, so the lab decides at scale 1."""
    config = EngineConfig(deployment=DEPLOYMENT, enable_prefix_caching=True, num_gpu_blocks=256)
    requests = in_order(mooncake_requests("mooncake-conv", loaded.vocab_size, duration_s=duration_s))
    fleet = FleetConfig(num_replicas=4, num_prefill_replicas=1, router="dynamo", disagg_decider="dynamo_conditional")
    thresholds = (fleet.conditional_disagg_eff_isl_threshold, fleet.conditional_disagg_eff_isl_ratio_threshold)
    ref = dynamo(python, requests, 4, "kv_router", config, speedup, 1, thresholds)["requests"]
    failures = []
    for i, r in enumerate(ref):
        cached = min(r["decode_overlap_tokens"] or 0, r["input_length"])
        apart, why = decide(fleet, r["input_length"], cached, 1.0)
        if apart != (r["prefill_worker"] is not None):
            failures.append(f"request {i}: Dynamo {'disaggregated' if r['prefill_worker'] is not None else 'kept'} "
                            f"it; the lab, from the same inputs: {why}")
    theirs_kept = sum(r["prefill_worker"] is None for r in ref)
    cached_seen = sum(bool(r["decode_overlap_tokens"]) for r in ref)
    lab = Fleet(config, fleet, loaded)
    for req in requests:
        req.submit(lab)
    routes = [r for r in lab.run() if r.kind == "route"]
    kept = [r for r in routes if r.prefill is None]
    print(f"\nconditional disaggregation (isl_bounding, effective prompt < {thresholds[0]} tokens and < "
          f"{thresholds[1]:.0%} of it), 1 prefill + 3 decode, mooncake-conv first {duration_s:g} s "
          f"({len(requests)} requests):")
    print(f"  Dynamo's replay: {len(ref) - theirs_kept} prefilled apart, {theirs_kept} kept on the decode worker; "
          f"its decode router saw a cached prefix for {cached_seen}")
    print(f"  the lab's decider on Dynamo's inputs: {len(ref) - len(failures)}/{len(ref)} decisions equal")
    one = sum(r.placed.startswith("its one output token") for r in kept)
    print(f"  the lab's own run (thresholds at full size): {len(routes) - len(kept)} apart, {len(kept)} kept: {one} "
          f"with a single output token (Dynamo sends those apart too), {len(kept) - one} for a prefix cached on "
          f"its decode replica")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dynamo-python", required=True, help="the python of the venv make_dynamo_venv.sh made")
    parser.add_argument("--requests", type=int, default=48, help="requests in the idle check (default 48)")
    parser.add_argument("--load-s", type=float, default=20.0, help="seconds of trace under load (default 20)")
    args = parser.parse_args()
    started = time.perf_counter()
    loaded = load_model(EngineConfig().model, "cpu", "float32")
    failures, speedup = idle_check(args.dynamo_python, loaded, args.requests)
    for line in failures[:20]:
        print("MISMATCH", line)
    load_report(args.dynamo_python, loaded, args.load_s, speedup)
    disagg_report(args.dynamo_python, loaded, args.load_s, speedup)
    decided = decider_check(args.dynamo_python, loaded, args.load_s, speedup)
    for line in decided[:20]:
        print("MISMATCH", line)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 1 if failures or decided else 0


if __name__ == "__main__":
    sys.exit(main())
