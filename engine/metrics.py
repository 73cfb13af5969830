"""Latency and efficiency metrics, per request and in aggregate.

Latencies are given twice: in steps (deterministic, what the lessons reason in)
and in engine milliseconds (wall time of the steps, what an SLO is written in).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.request import Request


def request_metrics(req: Request) -> dict:
    """TTFT counts from arrival to the step that produced the first token, inclusive."""
    out: dict = {"request_id": req.request_id, "num_prompt_tokens": req.num_prompt_tokens,
                 "num_generation_tokens": len(req.output_token_ids), "num_preemptions": req.num_preemptions,
                 "finish_reason": req.finish_reason.value if req.finish_reason else None}
    started = req.first_scheduled_step is not None
    out["queue_time_steps"] = req.first_scheduled_step - req.arrival_step if started else None
    if req.token_steps:
        out["ttft_steps"] = req.token_steps[0] - req.arrival_step + 1
        out["ttft_ms"] = req.token_ms[0] - req.arrival_ms
        out["itl_steps"] = np.diff(req.token_steps).tolist()
        out["itl_ms"] = np.diff(req.token_ms).tolist()
    if req.finish_step is not None and req.token_steps:
        out["e2e_steps"] = req.finish_step - req.arrival_step + 1
        out["e2e_ms"] = req.finish_ms - req.arrival_ms
    return out


# The engine's running counters (StepStats carries them in every record); prefix-cache lookups by
# preempted requests are kept apart from new requests', as vLLM's PrefixCacheStats does.
COUNTER_KEYS = ("num_preemptions", "num_recomputed_tokens", "num_swapped_blocks", "prefix_cache_queries",
                "prefix_cache_hits", "preempted_prefix_cache_queries", "preempted_prefix_cache_hits")
LATENCY_KEYS = ("ttft_steps", "ttft_ms", "itl_steps", "itl_ms", "e2e_steps", "e2e_ms", "queue_time_steps")


def summarize(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), "p50": float(np.percentile(arr, 50)),
            "p95": float(np.percentile(arr, 95)), "max": float(arr.max())}


def metric_values(per_request: list[dict], key: str) -> list[float]:
    """Every value of one latency over the served requests (rejected ones never ran);
    ITL lists are flattened, one value per gap between tokens."""
    values = []
    for m in per_request:
        v = m.get(key)
        if v is not None and m["finish_reason"] != "rejected":
            values.extend(v if isinstance(v, list) else [v])
    return values


def aggregate_metrics(per_request: list[dict], num_steps: int, engine_time_ms: float, gauges: dict,
                      counters: dict) -> dict:
    """The run-level view of per-request metrics, the gauges after the last step and the counters.

    One definition serves the live engine and a run rebuilt from saved records."""
    served = [m for m in per_request if m["finish_reason"] != "rejected"]
    generated = sum(m["num_generation_tokens"] for m in served)
    aggregate = {
        "num_steps": num_steps,
        "engine_time_ms": engine_time_ms,
        "num_requests_rejected": len(per_request) - len(served),
        **gauges,
        "generation_tokens": generated,
        "throughput_tokens_per_s": generated / (engine_time_ms / 1000) if engine_time_ms else 0.0,
        "prefix_cache_hit_rate": counters["prefix_cache_hits"] / counters["prefix_cache_queries"]
        if counters["prefix_cache_queries"] else 0.0,
        **counters,
    }
    for key in LATENCY_KEYS:
        aggregate[key] = summarize(metric_values(per_request, key))
    return aggregate


def engine_metrics(engine: Engine) -> dict:
    per_request = [request_metrics(r) for r in engine.requests.values()]
    gauges = {
        "num_requests_finished": engine.num_finished,
        "num_requests_running": len(engine.scheduler.running),
        "num_requests_waiting": len(engine.scheduler.waiting),
        "num_requests_swapped": len(engine.scheduler.swapped),
        "kv_cache_usage_perc": engine.blocks.usage(),
    }
    aggregate = aggregate_metrics(per_request, engine.step_index, engine.clock_ms, gauges, dict(engine.counters))
    return {"aggregate": aggregate, "requests": per_request}
