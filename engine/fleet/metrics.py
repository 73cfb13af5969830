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
    handoffs = fleet.disagg.handoffs if fleet.disagg else {}
    # Each request where it runs. Mid-run, a disaggregated request whose KV has not yet reached its
    # decode replica is on neither (its prefill replica's copy ended at its first token): it is
    # counted once it arrives, as a request that has not arrived yet is.
    placed = {rid: replica for rid, replica in fleet.placement.items() if rid in fleet.replicas[replica].requests}
    per_request = [{**request_metrics(fleet.replicas[replica].requests[rid], priced=True), "replica": replica,
                    **(_journey(fleet, handoffs[rid]) if rid in handoffs else {})}
                   for rid, replica in placed.items()]
    engines = fleet.replicas
    counters = {k: sum(e.counters[k] for e in engines) for k in COUNTER_KEYS}
    # A disaggregated request finishes twice (its one-token prefill, then its decode): count it where it ended.
    ended = sum(fleet.replicas[replica].requests[rid].finish_reason is not None for rid, replica in placed.items())
    gauges = {"num_requests_finished": ended,
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
    rows = [_replica_row(i, e) for i, e in enumerate(engines)]
    makespan = aggregate["engine_time_ms"] or 1.0
    for row in rows:
        row["role"] = fleet.pool_of(row["replica"]).role
        row["utilisation"] = row["busy_ms"] / makespan
    if handoffs:
        aggregate |= _disaggregated(fleet, handoffs, rows, per_request)
    return {"aggregate": aggregate, "replicas": rows, "requests": per_request}


JOURNEY = ("prefill_queue_ms", "prefill_ms", "wait_for_pages_ms", "link_queue_ms", "transfer_ms", "decode_queue_ms")


def _journey(fleet, h) -> dict:
    """Where a disaggregated request's time went before its first decode step, in modeled ms: waiting on
    the prefill replica, its prefill, waiting for the decode replica's pages, for the link, the transfer,
    and waiting on the decode replica. (Its first token, sampled by the prefill, ends its TTFT.)"""
    first = fleet.replicas[h.prefill_replica].requests[h.request_id]
    marks = (first.arrival_ms, first.first_scheduled_ms, h.prefill_done_ms, h.pages_reserved_ms, h.transfer_start_ms,
             h.transfer_end_ms, h.decode_start_ms)
    spans = {k: (b - a if a is not None and b is not None else None)
             for k, a, b in zip(JOURNEY, marks[:-1], marks[1:], strict=True)}
    return {"prefill_replica": h.prefill_replica, "kv_tokens": h.tokens, "kv_bytes": h.bytes, **spans}


def _disaggregated(fleet, handoffs: dict, rows: list[dict], per_request: list[dict]) -> dict:
    """Bytes moved, link busy time, each role's mean utilisation and each part of the journey's mean."""
    moved = [h for h in handoffs.values() if h.transfer_end_ms is not None]
    out = {"num_disaggregated": len(handoffs), "kv_bytes_moved": sum(h.bytes for h in moved),
           "link_busy_ms": sum(h.transfer_end_ms - h.transfer_start_ms for h in moved)}
    for role in ("prefill", "decode"):
        share = [r["utilisation"] for r in rows if r["role"] == role]
        out[f"{role}_utilisation"] = sum(share) / len(share)
    for key in JOURNEY:
        values = [m[key] for m in per_request if m.get(key) is not None]
        out[f"mean_{key}"] = sum(values) / len(values) if values else None
    return out
