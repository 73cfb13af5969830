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


def request_metrics(req: Request, priced: bool = False) -> dict:
    """TTFT counts from arrival to the step that produced the first token, inclusive.

    On a priced deployment a request scaled to fit the small model (length_scale s) writes 1/s real
    tokens in each step that samples one of its tokens (engine/pricing.py prices those steps as 1/s
    real steps), so its gaps between real tokens, ITL and TPOT in ms, are s times the steps' gaps."""
    out: dict = {"request_id": req.request_id, "num_prompt_tokens": req.num_prompt_tokens,
                 "num_generation_tokens": len(req.output_token_ids), "num_preemptions": req.num_preemptions,
                 "finish_reason": req.finish_reason.value if req.finish_reason else None}
    started = req.first_scheduled_step is not None
    per_token = req.length_scale if priced else 1.0  # ms between real tokens per ms between its steps' tokens
    out["queue_time_steps"] = req.first_scheduled_step - req.arrival_step if started else None
    out["queue_time_ms"] = req.first_scheduled_ms - req.arrival_ms if started else None
    if req.token_steps:
        out["ttft_steps"] = req.token_steps[0] - req.arrival_step + 1
        out["ttft_ms"] = req.token_ms[0] - req.arrival_ms
        out["itl_steps"] = np.diff(req.token_steps).tolist()
        out["itl_ms"] = (np.diff(req.token_ms) * per_token).tolist()
    if req.finish_step is not None and req.token_steps:
        out["e2e_steps"] = req.finish_step - req.arrival_step + 1
        out["e2e_ms"] = req.finish_ms - req.arrival_ms
        # Time per output token after the first, as vLLM's serving benchmark defines it.
        n = len(req.token_ms)
        out["tpot_ms"] = (req.token_ms[-1] - req.token_ms[0]) / (n - 1) * per_token if n > 1 else None
    return out


# The engine's running counters (StepStats carries them in every record); prefix-cache lookups by
# preempted requests are kept apart from new requests', as vLLM's PrefixCacheStats does.
COUNTER_KEYS = ("num_preemptions", "num_recomputed_tokens", "num_swapped_blocks", "prefix_cache_queries",
                "prefix_cache_hits", "preempted_prefix_cache_queries", "preempted_prefix_cache_hits",
                "num_draft_tokens", "num_accepted_tokens", "num_discarded_tokens")
# The engine's queue and pool gauges after a step (StepStats carries them too).
GAUGE_KEYS = ("num_requests_finished", "num_requests_running", "num_requests_waiting", "num_requests_swapped",
              "kv_cache_usage_perc")
LATENCY_KEYS = ("ttft_steps", "ttft_ms", "itl_steps", "itl_ms", "tpot_ms", "e2e_steps", "e2e_ms",
                "queue_time_steps", "queue_time_ms")


SUMMARY_STATS = ("mean", "p50", "p90", "p95", "p99", "max")  # how a latency's distribution is summarised


def summarize(values: list[float]) -> dict:
    if not values:
        return dict.fromkeys(SUMMARY_STATS)
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), **{f"p{q}": float(np.percentile(arr, q)) for q in (50, 90, 95, 99)},
            "max": float(arr.max())}


@dataclass(frozen=True)
class Slo:
    """Service-level objectives: a first token within ttft_ms, then each further token within tpot_ms
    on average (None: no target). The run meets them when at least `percentile` % of its finished
    requests meet both, the usual "p90 TTFT under 500 ms" form."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    percentile: float = 90.0

    @classmethod
    def of(cls, config) -> Slo | None:
        """The EngineConfig's SLO knobs, or None when it sets no target."""
        if config.slo_ttft_ms is None and config.slo_tpot_ms is None:
            return None
        return cls(config.slo_ttft_ms, config.slo_tpot_ms, config.slo_percentile)

    def missed(self, m: dict) -> list[str]:
        """Which targets a finished request missed: [] when it met every one."""
        return [name for name, target in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms))
                if target is not None and m.get(f"{name}_ms") is not None and m[f"{name}_ms"] > target]


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
                      counters: dict, modeled_steps: list[tuple[float, float, float]] | None = None,
                      slo: Slo | None = None) -> dict:
    """The run-level view of per-request metrics, the gauges after the last step and the counters.
    modeled_steps: (ms, MFU, MBU) of each step priced on a deployment; None on the wall clock.
    slo: the targets each finished request is judged by (its "slo" verdict), and the run.

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
        # vLLM's spec-decode acceptance rate: accepted drafts over drafts verified (None: nothing drafted).
        "spec_acceptance_rate": counters["num_accepted_tokens"] / counters["num_draft_tokens"]
        if counters["num_draft_tokens"] else None,
        **counters,
    }
    busy = sum(ms for ms, _, _ in modeled_steps or ())
    # Over the run, time-weighted: the FLOPs (bytes) of every step over what the GPU could have done.
    aggregate["mfu"] = sum(ms * mfu for ms, mfu, _ in modeled_steps) / busy if busy else None
    aggregate["mbu"] = sum(ms * mbu for ms, _, mbu in modeled_steps) / busy if busy else None
    for key in LATENCY_KEYS:
        aggregate[key] = summarize(metric_values(per_request, key))
    aggregate |= _slo_aggregate(per_request, engine_time_ms, slo)
    return aggregate


def _slo_aggregate(per_request: list[dict], engine_time_ms: float, slo: Slo | None) -> dict:
    """Request throughput, and against the SLO: each finished request's verdict, attainment and goodput
    (finished requests per second that met every target), as the serving benchmarks report them.

    A refused request counts against attainment as a miss (its client was served by no one), so turning
    requests away cannot raise attainment by itself; on_time_served is the share of those served that
    met every target, the number admission control is meant to raise."""
    finished = [m for m in per_request if m["finish_reason"] not in (None, "rejected")]
    refused = len(per_request) - len(finished) - sum(m["finish_reason"] is None for m in per_request)
    seconds = engine_time_ms / 1000
    out = {"request_throughput": len(finished) / seconds if seconds else 0.0}
    if slo is None:
        return out | {"slo_attainment": None, "on_time_served": None, "goodput": None, "slo_met": None}
    for m in finished:
        m["slo_missed"] = slo.missed(m)
    good = sum(not m["slo_missed"] for m in finished)
    attainment = good / (len(finished) + refused) if finished or refused else None
    return out | {"slo_attainment": attainment, "on_time_served": good / len(finished) if finished else None,
                  "goodput": good / seconds if seconds else 0.0,
                  "slo_met": None if attainment is None else attainment >= slo.percentile / 100}


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
    *_latency("itl_steps", "ITL", "steps"), *_latency("itl_ms", "ITL", "ms"), *_latency("tpot_ms", "TPOT", "ms"),
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
    Metric("spec_acceptance_rate", None, "draft acceptance rate", "fraction", "higher"),
    # A fuller pool is neither good nor bad by itself: it is the price of admitting more.
    Metric("peak_kv_cache_usage_perc", None, "peak KV usage", "fraction", None),
    Metric("num_requests_rejected", None, "rejected", "requests", "lower"),
    Metric("request_throughput", None, "request throughput", "requests/s", "higher"),
    Metric("goodput", None, "goodput", "requests/s", "higher"),
    Metric("slo_attainment", None, "SLO attainment", "fraction", "higher"),
    Metric("on_time_served", None, "on time, of served", "fraction", "higher"),
    Metric("mfu", None, "MFU (modeled)", "fraction", "higher"),
    Metric("mbu", None, "MBU (modeled)", "fraction", "higher"),
]}




def serving_metrics(aggregate: dict) -> dict:
    """The aggregate flattened under the names vLLM's serving benchmark gives them (request_throughput,
    goodput, mean_ttft_ms, ttft_ms_p90, tpot_ms_p99, ...), for files other tools read."""
    out = {key: aggregate[key] for key in ("request_throughput", "goodput", "slo_attainment", "num_steps",
                                           "generation_tokens", "num_preemptions", "mfu", "mbu")}
    out["output_throughput"] = aggregate["throughput_tokens_per_s"]
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_time_ms"):
        summary = aggregate[key]
        out[f"mean_{key}"], out[f"median_{key}"] = summary["mean"], summary["p50"]
        out |= {f"{key}_{stat}": summary[stat] for stat in ("p90", "p95", "p99")}
    return out
