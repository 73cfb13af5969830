"""A fleet's metrics: the serving benchmark's names over every request, whichever replica served it,
plus what only a fleet has: each replica's load and prefix hits, the fleet's prefix reuse,
and the replica of each request."""

from __future__ import annotations

from engine.metrics import COUNTER_KEYS, Slo, aggregate_metrics, request_metrics


def _replica_row(index: int, engine) -> dict:
    c = engine.counters
    return {"replica": index, "num_gpu_blocks": engine.config.num_gpu_blocks, "num_requests": len(engine.requests),
            "num_steps": engine.step_index, "busy_ms": sum(ms for ms, _, _ in engine.modeled_steps),
            "prompt_tokens": c["prefix_cache_queries"], "prefix_hit_tokens": c["prefix_cache_hits"],
            "prefix_cache_hit_rate": c["prefix_cache_hits"] / c["prefix_cache_queries"]
            if c["prefix_cache_queries"] else 0.0, "num_preemptions": c["num_preemptions"]}


def fleet_metrics(fleet) -> dict:
    """{'aggregate': the run over the whole fleet, 'replicas': one row each, 'requests': one row each}.
    The fleet's time is its makespan on the modeled clock: from 0 to the last replica's last step."""
    per_request = []
    for index, engine in enumerate(fleet.replicas):
        for req in engine.requests.values():
            per_request.append({**request_metrics(req, priced=True), "replica": index})
    per_request.sort(key=lambda m: list(fleet.placement).index(m["request_id"]))
    engines = fleet.replicas
    counters = {k: sum(e.counters[k] for e in engines) for k in COUNTER_KEYS}
    gauges = {"num_requests_finished": sum(e.scheduler.num_finished for e in engines),
              "num_requests_running": sum(len(e.scheduler.running) for e in engines),
              "num_requests_waiting": sum(len(e.scheduler.waiting) for e in engines),
              "num_requests_swapped": sum(len(e.scheduler.swapped) for e in engines),
              "kv_cache_usage_perc": sum(e.blocks.usage() for e in engines) / len(engines)}
    aggregate = aggregate_metrics(per_request, sum(e.step_index for e in engines), max(e.clock_ms for e in engines),
                                  gauges, counters, [s for e in engines for s in e.modeled_steps],
                                  Slo.of(fleet.config))
    aggregate["num_replicas"] = len(engines)
    aggregate["router"] = fleet.fleet.router
    aggregate["prefix_reuse_ratio"] = aggregate["prefix_cache_hit_rate"]  # cached prompt tokens / prompt tokens
    return {"aggregate": aggregate, "replicas": [_replica_row(i, e) for i, e in enumerate(engines)],
            "requests": per_request}
