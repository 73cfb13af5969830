"""Facts read back out of a run's StepRecords: what each request was doing at each step.

The charts are drawn from records only; these helpers gather what several charts
share (a request's latest card, its state per step, when it produced tokens).
Nothing here decides anything: it reports what the engine recorded.
"""

from __future__ import annotations

from engine.records import RequestView, StepRecord
from engine.request import id_order

PREFILL_KINDS = ("prefill", "prefill_chunk", "recompute_prefill")
MOVE_KINDS = ("admitted", "swapped_in", "preempted", "swapped_out", "finished", "rejected")


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


# The timeline folds the kinds of prefill together; every other phase keeps its name.
TIMELINE_STATES = {"prefill": "prefilling", "prefill_chunk": "prefilling", "recompute_prefill": "prefilling",
                   "decode": "decoding"}


def states_in(record: StepRecord) -> dict[str, str]:
    """Each request's phase in this step (StepRecord.phases) in the timeline's vocabulary; the step
    it finishes in reads "finished" (or "rejected", where it was refused), so the timeline shows where
    each request ended."""
    states = {rid: TIMELINE_STATES.get(phase, phase) for rid, phase in record.phases().items()}
    for rid in record.finished:
        view = record.requests.get(rid)
        states[rid] = "rejected" if view is not None and view.finish_reason == "rejected" else "finished"
    return states


def oldest_waiting(record: StepRecord) -> tuple[str, int, float | None] | None:
    """The request that has waited longest in the queue after this step: its id, the steps since it
    joined the queue (its arrival, or the step that preempted it: a victim waits from there), and the
    modeled ms since (where it arrived by time). None when nothing waits."""
    if not record.waiting:
        return None

    def since(rid: str) -> int:  # run files from before queued_step was recorded count from arrival
        view = record.requests[rid]
        return view.arrival_step if view.queued_step is None else view.queued_step

    rid = min(record.waiting, key=lambda r: (since(r), id_order(r)))
    view = record.requests[rid]
    queued_ms = view.queued_ms if view.queued_step is not None else view.arrival_ms
    ms = record.modeled.clock_ms - queued_ms if record.modeled and queued_ms is not None else None
    return rid, record.step + 1 - since(rid), ms
