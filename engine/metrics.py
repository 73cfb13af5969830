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


def _summary(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), "p50": float(np.percentile(arr, 50)),
            "p95": float(np.percentile(arr, 95)), "max": float(arr.max())}


def engine_metrics(engine: Engine) -> dict:
    per_request = [request_metrics(r) for r in engine.requests.values()]
    served = [m for m in per_request if m["finish_reason"] != "rejected"]

    def collect(key: str) -> list[float]:
        values = []
        for m in served:
            v = m.get(key)
            if v is not None:
                values.extend(v if isinstance(v, list) else [v])
        return values

    generated = sum(m["num_generation_tokens"] for m in served)
    c = engine.counters
    aggregate = {
        "num_steps": engine.step_index,
        "engine_time_ms": engine.clock_ms,
        "num_requests_finished": sum(r.is_finished for r in engine.requests.values()),
        "num_requests_rejected": len(per_request) - len(served),
        "num_requests_running": len(engine.scheduler.running),
        "num_requests_waiting": len(engine.scheduler.waiting),
        "num_requests_swapped": len(engine.scheduler.swapped),
        "generation_tokens": generated,
        "throughput_tokens_per_s": generated / (engine.clock_ms / 1000) if engine.clock_ms else 0.0,
        "kv_cache_usage_perc": engine.blocks.usage(),
        "prefix_cache_hit_rate": c["prefix_cache_hits"] / c["prefix_cache_queries"]
        if c["prefix_cache_queries"] else 0.0,
        **c,
    }
    for key in ("ttft_steps", "ttft_ms", "itl_steps", "itl_ms", "e2e_steps", "e2e_ms", "queue_time_steps"):
        aggregate[key] = _summary(collect(key))
    return {"aggregate": aggregate, "requests": per_request}
