"""What a fleet run prints: each replica's load, the fleet's latencies and prefix reuse, a disaggregated
fleet's KV traffic and where its requests' time went, and the same load served both ways side by side."""

from __future__ import annotations

import dataclasses

from engine.fleet.fleet import Fleet
from engine.fleet.metrics import JOURNEY, fleet_metrics
from engine.fleet.workload import FleetRequest
from engine.metrics import serving_metrics


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report(fleet: Fleet) -> str:
    m = fleet_metrics(fleet)
    agg = m["aggregate"]
    lines = [f"{'replica':>7} {'role':>8} {'pages':>6} {'requests':>8} {'steps':>6} {'busy ms':>9} {'busy':>5} "
             f"{'prefix hits':>11}"]
    for r in m["replicas"]:
        lines.append(f"{r['replica']:>7} {r['role']:>8} {r['num_gpu_blocks']:>6} {r['num_requests']:>8} "
                     f"{r['num_steps']:>6} {r['busy_ms']:>9.1f} {100 * r['utilisation']:>4.0f}% "
                     f"{100 * r['prefix_cache_hit_rate']:>10.1f}%")
    served = serving_metrics(agg)
    lines += ["", f"router {agg['router']} over {agg['num_replicas']} replicas; ms modeled on "
              f"{fleet.config.deployment}",
              f"prefix reuse (cached prompt tokens / prompt tokens): {100 * agg['prefix_reuse_ratio']:.1f}%",
              f"request throughput {served['request_throughput']:.2f} req/s, "
              f"TTFT median {_ms(served['median_ttft_ms'])} ms, p90 {_ms(served['ttft_ms_p90'])} ms, "
              f"TPOT median {_ms(served['median_tpot_ms'])} ms"]
    if "kv_bytes_moved" in agg:
        lines += [f"disaggregated: {agg['num_disaggregated']} requests prefilled apart, "
                  f"{agg['kv_bytes_moved'] / 1e9:.2f} GB of KV over {fleet.fleet.kv_link} (per GPU, modeled), "
                  f"link busy {agg['link_busy_ms']:.1f} ms; busy: prefill {100 * agg['prefill_utilisation']:.0f}%, "
                  f"decode {100 * agg['decode_utilisation']:.0f}%",
                  "before the first decode step, on average (ms): " + ", ".join(
                      f"{key[:-3].replace('_', ' ')} {_ms(agg[f'mean_{key}'])}" for key in JOURNEY)]
    return "\n".join(lines)


ROWS = (("TTFT median", "median_ttft_ms"), ("TTFT p90", "ttft_ms_p90"), ("ITL p90", "itl_ms_p90"),
        ("ITL p99", "itl_ms_p99"), ("TPOT median", "median_tpot_ms"), ("E2E median", "median_e2e_ms"),
        ("requests/s", "request_throughput"), ("goodput", "goodput"))


def versus_aggregated(disaggregated: Fleet, requests: list[FleetRequest]) -> str:
    """The same requests on as many replicas that each prefill and decode (same router, same pools):
    which way of serving wins each metric (lower latency, higher throughput)."""
    aggregated = Fleet(disaggregated.config, dataclasses.replace(disaggregated.fleet, num_prefill_replicas=0),
                       disaggregated.loaded)
    for req in requests:
        req.submit(aggregated)
    aggregated.run()
    both = [serving_metrics(fleet_metrics(f)["aggregate"]) for f in (aggregated, disaggregated)]
    n, prefill = len(disaggregated.replicas), disaggregated.fleet.num_prefill_replicas
    split = f"{prefill}P + {n - prefill}D"
    lines = ["", f"the same load, {n} replicas either way (ms modeled; goodput needs an SLO: --slo-ttft-ms, "
             "--slo-tpot-ms):", f"{'':<12} {'aggregated':>11} {split:>11}  better"]
    for label, key in ROWS:
        a, d = (m[key] for m in both)
        if a is None or d is None:
            lines.append(f"{label:<12} {_ms(a):>11} {_ms(d):>11}")
            continue
        higher = key in ("request_throughput", "goodput")
        win = "same" if a == d else ("aggregated" if (a > d) == higher else "disaggregated")
        lines.append(f"{label:<12} {a:>11.2f} {d:>11.2f}  {win}")
    return "\n".join(lines)
