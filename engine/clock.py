"""Engine time: the clock every latency is measured on, defined once for the engine and the lab.

With a deployment, a step takes its modeled cost on it (engine/pricing.py), and an
idle engine jumps ahead to the next arrival; without one, a step takes the wall
time this machine spent on it. lab/metrics.py rebuilds the same clock from records.
"""

from __future__ import annotations

from engine.hardware import StepCost
from engine.records import StepRecord, StepTimings


def step_ms(timings: StepTimings, cost: StepCost | None) -> float:
    """How far one step moves the clock."""
    return timings.total_ms if cost is None else cost.total_ms


def step_spans(records: list[StepRecord]) -> list[tuple[float, float]]:
    """Each step's (start, end) on the engine clock in ms: a priced step carries its own end (the clock
    may have jumped over idle time before it); an unpriced one follows the last, summed in the engine's
    own order so the values equal its clock_ms exactly."""
    spans, clock = [], 0.0
    for rec in records:
        if rec.modeled is not None:
            spans.append((rec.modeled.clock_ms - rec.modeled.total_ms, rec.modeled.clock_ms))
            continue
        start = clock
        clock += step_ms(rec.timings, None)
        spans.append((start, clock))
    return spans
