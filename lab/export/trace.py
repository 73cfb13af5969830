"""The run in Chrome's Trace Event Format: one track per request, for ui.perfetto.dev or chrome://tracing."""

from __future__ import annotations

import json

from engine import EngineConfig, StepRecord
from engine.clock import step_spans
from engine.records import ScheduledChunk

# With no wall times in the records (all zero), each step is drawn as this many µs, so the
# timeline's "1 ms" reads as "1 step".
STEP_US = 1000.0
# Phases that run over several steps are drawn as one slice; each prefill chunk keeps its own.
_MERGED = ("waiting", "stalled", "decode", "preempted", "swapped")
_PID = 1


# StepRecord.phases -> the trace's slice name; a finished request has no slice.
_SLICE_NAMES = {"prefill": "prefill", "prefill_chunk": "prefill chunk", "decode": "decode",
                "recompute_prefill": "recompute", "waiting": "waiting", "stalled": "stalled", "preempted": "preempted",
                "swapped": "swapped"}


def _slice(rid: str, phase: str | None, chunks: dict[str, ScheduledChunk]) -> tuple[str, dict] | None:
    """The slice the request's phase in this step belongs to, with the args shown when it is clicked."""
    name = _SLICE_NAMES.get(phase)
    if name is None:
        return None
    chunk = chunks.get(rid)
    return name, ({"tokens": f"{chunk.start}-{chunk.start + chunk.num_tokens - 1}"} if chunk else {})


def chrome_trace(records: list[StepRecord], config: EngineConfig | None = None, clock: str = "auto") -> dict:
    """The run in Trace Event Format (open the JSON in ui.perfetto.dev or chrome://tracing).

    One track (tid) per request with a complete ('X') slice per phase: waiting, prefill
    (each chunk its own slice), decode, recompute, preempted (waiting to be recomputed),
    swapped, stalled (running but given no tokens); an instant ('i') per preemption and
    rejection; counters ('C') for KV pages and the batch; a 'steps' track with one slice per step.

    clock: 'ms' places each step at its engine time (the cumulative step wall times, as
    the ms metrics use); 'steps' gives every step STEP_US µs; 'auto' uses ms when the
    records carry wall times."""
    if clock not in ("auto", "ms", "steps"):
        raise ValueError(f"clock must be 'auto', 'ms' or 'steps'; got {clock!r}")
    use_ms = clock == "ms" or (clock == "auto" and any(r.timings.total_ms > 0 for r in records))
    spans = ([(a * 1000, b * 1000) for a, b in step_spans(records)] if use_ms
             else [(r.step * STEP_US, (r.step + 1) * STEP_US) for r in records])

    tids: dict[str, int] = {}
    events: list[dict] = []
    open_slices: dict[str, dict] = {}  # request id -> its current slice, still growing
    for rec, (start, end) in zip(records, spans, strict=True):
        events += _step_events(rec, start, end)
        for rid in rec.requests:
            tids.setdefault(rid, len(tids) + 1)
        events += [{"name": e.kind, "cat": "decision", "ph": "i", "s": "t", "ts": start, "pid": _PID,
                    "tid": tids[e.request_id], "args": {"reason": e.reason, **e.data}}
                   for e in rec.events if e.kind in ("preempted", "rejected")]
        chunks, phases = {c.request_id: c for c in rec.batch}, rec.phases()
        for rid in rec.requests:
            new = _extend(open_slices, rid, _slice(rid, phases.get(rid), chunks), rec.step, start, end, tids[rid])
            events += [new] if new else []

    meta = [{"name": "process_name", "ph": "M", "pid": _PID, "args": {"name": "Scheduler Loop Lab run"}},
            {"name": "thread_name", "ph": "M", "pid": _PID, "tid": 0, "args": {"name": "steps"}},
            {"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": 0, "args": {"sort_index": 0}}]
    for rid, tid in tids.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": rid}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": tid, "args": {"sort_index": tid}})
    other = {"clock": "engine ms" if use_ms else f"steps ({STEP_US:g} us each)"}
    if config is not None:
        other["config"] = config.to_dict()
    return {"traceEvents": meta + events, "displayTimeUnit": "ms", "otherData": other}


def _step_events(rec: StepRecord, start: float, end: float) -> list[dict]:
    """The step's own slice, and the counters for KV pages and the batch."""
    b = rec.budget
    return [{"name": f"step {rec.step}", "cat": "step", "ph": "X", "ts": start, "dur": end - start, "pid": _PID,
             "tid": 0, "args": {"tokens": b.tokens_used, "seqs": b.seqs_used, "ms": rec.timings.total_ms}},
            {"name": "KV pages", "ph": "C", "ts": start, "pid": _PID,
             "args": {"used": b.gpu_blocks_used, "cached": b.gpu_blocks_cached}},
            {"name": "batch", "ph": "C", "ts": start, "pid": _PID,
             "args": {"seqs": b.seqs_used, "tokens": b.tokens_used}}]


def _extend(open_slices: dict[str, dict], rid: str, phase: tuple[str, dict] | None, step: int, start: float,
            end: float, tid: int) -> dict | None:
    """Grow the request's open slice if this step continues it; otherwise close it and return the
    new slice this step opens (None if the request has no phase in it)."""
    current = open_slices.get(rid)
    if current and phase and phase[0] == current["name"] and phase[0] in _MERGED:
        current["dur"] = end - current["ts"]
        current["args"]["last_step"] = step
        return None
    open_slices.pop(rid, None)
    if phase is None:
        return None
    name, args = phase
    open_slices[rid] = {"name": name, "cat": "phase", "ph": "X", "ts": start, "dur": end - start, "pid": _PID,
                        "tid": tid, "args": {"first_step": step, "last_step": step, **args}}
    return open_slices[rid]


def chrome_trace_json(records: list[StepRecord], config: EngineConfig | None = None, clock: str = "auto") -> str:
    """chrome_trace as the text of a .json file."""
    return json.dumps(chrome_trace(records, config, clock))
