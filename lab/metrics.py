"""engine.metrics computed from a run's records alone, so a replayed run has metrics too.

The latency formulas live once, in engine/metrics.py: here each request's timeline is
rebuilt from the records into the attributes those formulas read from a Request.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine import StepRecord
from engine.clock import step_spans
from engine.metrics import COUNTER_KEYS, GAUGE_KEYS, Slo, aggregate_metrics, request_metrics
from engine.request import FinishReason, id_order


@dataclass
class _Timeline:
    """The attributes engine.metrics.request_metrics reads from a Request, rebuilt from the
    records, so the latency formulas live once, in the engine, for live runs and replays alike."""

    request_id: str
    arrival_step: int
    num_prompt_tokens: int
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None
    arrival_ms: float | None = None
    length_scale: float = 1.0
    first_scheduled_step: int | None = None
    first_scheduled_ms: float | None = None
    finish_step: int | None = None
    finish_ms: float | None = None

    def __post_init__(self) -> None:
        self.output_token_ids: list[int] = []
        self.token_steps: list[int] = []
        self.token_ms: list[float] = []

    def ran(self, step: int, start_ms: float, end_ms: float, tokens: list[int]) -> None:
        """The request was in step's batch, which ran from start_ms to end_ms and maybe sampled its
        next tokens (more than one where it verified drafts)."""
        if self.first_scheduled_step is None:
            self.first_scheduled_step, self.first_scheduled_ms = step, start_ms
        for token in tokens:
            self.output_token_ids.append(token)
            self.token_steps.append(step)
            self.token_ms.append(end_ms)


def _timelines(records: list[StepRecord]) -> list[_Timeline]:
    for i, rec in enumerate(records):
        if rec.step != i:
            raise ValueError(f"metrics need the whole run from step 0; record {i} is step {rec.step}")
    seen: dict[str, _Timeline] = {}
    for rec, (start, end) in zip(records, step_spans(records), strict=True):
        for rid, view in rec.requests.items():
            t = seen.setdefault(rid, _Timeline(rid, view.arrival_step, view.num_prompt_tokens))
            t.num_preemptions, t.length_scale = view.num_preemptions, view.length_scale
            t.finish_reason = FinishReason(view.finish_reason) if view.finish_reason else None
        for e in rec.events:
            if e.kind == "arrived":
                arrived_at = rec.requests[e.request_id].arrival_ms  # an arrival by time, before the step
                seen[e.request_id].arrival_ms = start if arrived_at is None else arrived_at
            elif e.kind in ("finished", "rejected"):
                seen[e.request_id].finish_step = rec.step
                seen[e.request_id].finish_ms = end if e.kind == "finished" else start
        for chunk in rec.batch:
            # (a record saved before speculative decoding holds only new_token_id)
            tokens = chunk.new_token_ids or ([] if chunk.new_token_id is None else [chunk.new_token_id])
            seen[chunk.request_id].ran(rec.step, start, end, tokens)
    return sorted(seen.values(), key=lambda t: id_order(t.request_id))


def run_metrics(records: list[StepRecord], slo: Slo | None = None) -> dict:
    """engine.metrics() computed from the records alone, so a replayed run has metrics too.

    Same keys and values as the engine's (a request that had not arrived by the last
    record is absent), plus what only the step history shows: peak KV usage and
    throughput per step. kv_cache_usage_perc is the records' rounded value."""
    priced = any(r.modeled is not None for r in records)
    per_request = [request_metrics(t, priced) for t in _timelines(records)]  # a _Timeline reads as a Request
    clock_ms = step_spans(records)[-1][1] if records else 0.0

    def final(name: str) -> float:  # a gauge or counter after the last step (all 0 before the first)
        return getattr(records[-1].stats, name) if records else 0

    counters = {k: final(k) for k in COUNTER_KEYS}
    gauges = {k: final(k) for k in GAUGE_KEYS}
    modeled = [(r.modeled.total_ms, r.modeled.mfu, r.modeled.mbu) for r in records if r.modeled is not None]
    aggregate = aggregate_metrics(per_request, len(records), clock_ms, gauges, counters, modeled or None, slo)
    aggregate["throughput_tokens_per_step"] = aggregate["generation_tokens"] / len(records) if records else 0.0
    aggregate["peak_kv_cache_usage_perc"] = max((r.stats.kv_cache_usage_perc for r in records), default=0.0)
    return {"aggregate": aggregate, "requests": per_request}
