"""Facts read back out of a run's StepRecords: what each request was doing at each step.

The charts are drawn from records only; these helpers gather what several charts
share (a request's latest card, its state per step, when it produced tokens).
Nothing here decides anything: it reports what the engine recorded.
"""

from __future__ import annotations

import re

from engine.records import RequestView, StepRecord

PREFILL_KINDS = ("prefill", "prefill_chunk", "recompute_prefill")
MOVE_KINDS = ("admitted", "swapped_in", "preempted", "swapped_out", "finished", "rejected")


def id_order(request_id: str) -> tuple:
    """r2 before r10: engine ids sort by their number."""
    match = re.search(r"(\d+)$", request_id)
    return (request_id[:match.start()], int(match.group(1))) if match else (request_id, -1)


def latest_views(records: list[StepRecord]) -> dict[str, RequestView]:
    """Every request seen so far, as of the last record that showed it, in id order."""
    views: dict[str, RequestView] = {}
    for record in records:
        views.update(record.requests)
    return {rid: views[rid] for rid in sorted(views, key=id_order)}


def finished_in_order(records: list[StepRecord]) -> list[str]:
    """Requests that finished (or were rejected), in the order they did."""
    return [rid for record in records for rid in record.finished]


def moves(record: StepRecord) -> dict[str, list[str]]:
    """request id -> what happened to it this step (admitted, preempted, swapped, finished...)."""
    out: dict[str, list[str]] = {}
    for event in record.events:
        if event.kind in MOVE_KINDS and event.request_id:
            out.setdefault(event.request_id, []).append(event.kind)
    return out


def state_in(record: StepRecord, request_id: str) -> str | None:
    """What the request was doing in this step, in the timeline's vocabulary (None: not present).
    The step a request finishes in (its last token, or its rejection) reads "finished"."""
    if request_id in record.finished:
        return "finished"
    chunk = next((c for c in record.batch if c.request_id == request_id), None)
    if chunk is not None:
        return "decoding" if chunk.kind == "decode" else "prefilling"
    if "preempted" in moves(record).get(request_id, []):
        return "preempted"
    for state, queue in (("stalled", record.running), ("swapped", record.swapped), ("waiting", record.waiting)):
        if request_id in queue:
            return state
    return None


def token_steps(records: list[StepRecord]) -> dict[str, list[int]]:
    """request id -> the steps at which it produced a token."""
    out: dict[str, list[int]] = {}
    for record in records:
        for chunk in record.batch:
            if chunk.new_token_id is not None:
                out.setdefault(chunk.request_id, []).append(record.step)
    return out


def latencies(records: list[StepRecord]) -> dict[str, dict]:
    """TTFT and inter-token latencies in steps, counted as engine/metrics.py counts them
    (TTFT includes the step that produced the first token), so the two always agree."""
    views = latest_views(records)
    out = {}
    for rid, steps in token_steps(records).items():
        out[rid] = {"ttft_steps": steps[0] - views[rid].arrival_step + 1,
                    "itl_steps": [b - a for a, b in zip(steps, steps[1:], strict=False)]}
    return out
