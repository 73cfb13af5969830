"""Latency and efficiency metrics, per request and in aggregate.

Latencies are given twice: in steps (deterministic, what the lessons reason in)
and in engine milliseconds (wall time of the steps, what an SLO is written in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from engine.request import Request


def request_metrics(req: Request) -> dict:
    """TTFT counts from arrival to the step that produced the first token, inclusive."""
    out: dict = {"request_id": req.request_id, "num_prompt_tokens": req.num_prompt_tokens,
                 "num_generation_tokens": len(req.output_token_ids), "num_preemptions": req.num_preemptions,
                 "finish_reason": req.finish_reason.value if req.finish_reason else None}
    started = req.first_scheduled_step is not None
    out["queue_time_steps"] = req.first_scheduled_step - req.arrival_step if started else None
    out["queue_time_ms"] = req.first_scheduled_ms - req.arrival_ms if started else None
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
# The engine's queue and pool gauges after a step (StepStats carries them too).
GAUGE_KEYS = ("num_requests_finished", "num_requests_running", "num_requests_waiting", "num_requests_swapped",
              "kv_cache_usage_perc")
LATENCY_KEYS = ("ttft_steps", "ttft_ms", "itl_steps", "itl_ms", "e2e_steps", "e2e_ms", "queue_time_steps",
                "queue_time_ms")


SUMMARY_STATS = ("mean", "p50", "p95", "max")  # how a latency's distribution is summarised


def summarize(values: list[float]) -> dict:
    if not values:
        return dict.fromkeys(SUMMARY_STATS)
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
                      counters: dict, modeled_steps: list[tuple[float, float, float]] | None = None) -> dict:
    """The run-level view of per-request metrics, the gauges after the last step and the counters.
    modeled_steps: (ms, MFU, MBU) of each step priced on a deployment; None on the wall clock.

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
    busy = sum(ms for ms, _, _ in modeled_steps or ())
    # Over the run, time-weighted: the FLOPs (bytes) of every step over what the GPU could have done.
    aggregate["mfu"] = sum(ms * mfu for ms, mfu, _ in modeled_steps) / busy if busy else None
    aggregate["mbu"] = sum(ms * mbu for ms, _, mbu in modeled_steps) / busy if busy else None
    for key in LATENCY_KEYS:
        aggregate[key] = summarize(metric_values(per_request, key))
    return aggregate


@dataclass(frozen=True)
class Metric:
    """One number a run is judged by, as the CLI, A/B, the sweep, lessons and exports all name it."""

    key: str  # the aggregate's key
    stat: str | None  # for a distribution (a latency): which summary; None for a single number
    name: str  # what is measured, e.g. "TTFT"
    unit: str
    better: str | None  # "lower", "higher", or None where neither is better by itself

    @property
    def label(self) -> str:
        return f"{self.name} {self.stat}" if self.stat else self.name

    @property
    def id(self) -> str:
        return f"{self.key}.{self.stat}" if self.stat else self.key

    @property
    def heading(self) -> str:
        """A table column's title: the label, with the unit unless the label says it already (or it is a
        fraction, shown as a percentage)."""
        return self.label if self.unit in self.label or self.unit == "fraction" else f"{self.label} ({self.unit})"

    def value(self, aggregate: dict) -> float | None:
        value = aggregate.get(self.key)
        return value[self.stat] if self.stat and value is not None else value


def _latency(key: str, name: str, unit: str) -> list[Metric]:
    return [Metric(key, stat, name, unit, "lower") for stat in SUMMARY_STATS]


# Every metric, once. Steps are the same on every machine; ms and tokens/s are this machine's wall time.
METRICS: dict[str, Metric] = {m.id: m for m in [
    *_latency("ttft_steps", "TTFT", "steps"), *_latency("ttft_ms", "TTFT", "ms"),
    *_latency("itl_steps", "ITL", "steps"), *_latency("itl_ms", "ITL", "ms"),
    *_latency("e2e_steps", "e2e latency", "steps"), *_latency("e2e_ms", "e2e latency", "ms"),
    *_latency("queue_time_steps", "queue time", "steps"), *_latency("queue_time_ms", "queue time", "ms"),
    Metric("num_steps", None, "steps to finish", "steps", "lower"),
    Metric("generation_tokens", None, "generated tokens", "tokens", None),
    Metric("throughput_tokens_per_step", None, "throughput", "tokens/step", "higher"),
    Metric("throughput_tokens_per_s", None, "throughput", "tokens/s", "higher"),
    Metric("num_preemptions", None, "preemptions", "count", "lower"),
    Metric("num_recomputed_tokens", None, "recomputed tokens", "tokens", "lower"),
    Metric("num_swapped_blocks", None, "swapped blocks", "blocks", "lower"),
    Metric("prefix_cache_hit_rate", None, "prefix cache hit rate", "fraction", "higher"),
    # A fuller pool is neither good nor bad by itself: it is the price of admitting more.
    Metric("peak_kv_cache_usage_perc", None, "peak KV usage", "fraction", None),
    Metric("num_requests_rejected", None, "rejected", "requests", "lower"),
    Metric("mfu", None, "MFU (modeled)", "fraction", "higher"),
    Metric("mbu", None, "MBU (modeled)", "fraction", "higher"),
]}


