"""How much of a long history a view sends to the browser: bounded, whatever the run's length.

A run of a real trace lasts thousands of steps. Drawn whole, a per-step, per-request view
grows with steps x requests (8 MB of timeline at 3,000 steps), and every rerun sends it
again. So the detailed views show the steps around the one on screen, and the series
over the whole history keep each stretch's peak; the full history is in the exports.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.records import StepRecord

RECENT_STEPS = 200  # per-step, per-request detail (timeline cells, the event log): the last this many steps
MAX_POINTS = 1_000  # a series over the whole history: at most this many points, each the peak of its stretch
MAX_ROWS = 100  # a table or list of requests: the most recent this many


def recent(records: Sequence[StepRecord]) -> list[StepRecord]:
    """The last RECENT_STEPS records: the window the detailed views draw."""
    return list(records[-RECENT_STEPS:])


def peaks(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """At most MAX_POINTS points: each stretch of the series becomes its highest value, at the stretch's
    last x, so a spike (a preemption storm, a full pool) is never averaged away."""
    if len(xs) <= MAX_POINTS:
        return list(xs), list(ys)
    size = -(-len(xs) // MAX_POINTS)  # ceil
    starts = range(0, len(xs), size)
    return [xs[min(i + size, len(xs)) - 1] for i in starts], [max(ys[i:i + size]) for i in starts]


def note(total: int, shown: int, what: str) -> str:
    """A caption saying what a bounded view leaves out, or '' when it shows everything."""
    return "" if shown >= total else f"Showing the last {shown:,} of {total:,} {what}; the exports hold them all."
