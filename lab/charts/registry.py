"""Every figure the lab draws for a step, in one table: the lab page, the HTML export and the
step benchmark all read it, so the three cannot drift apart.

Each row names a figure (its chart key on the page), the heading it is shown under, and how
it is built from a Frame: the records up to the step on screen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from engine.records import StepRecord
from lab.charts import blocks, budget, padding, queues, replay, roofline, timeline


@dataclass(frozen=True)
class Frame:
    """What a step's figures are drawn from: the records up to the step on screen, how many
    steps the run has (the axes' extent), and the modeled-ms axis the timelines share."""

    records: list[StepRecord]
    num_steps: int
    ms_until: float | None = None

    @property
    def record(self) -> StepRecord:
        return self.records[-1]

    @property
    def previous(self) -> StepRecord | None:
        return self.records[-2] if len(self.records) > 1 else None


@dataclass(frozen=True)
class Figure:
    key: str  # the chart's name: its key on the page, its row in the benchmark
    title: str  # the heading over it; {deployment} is the step's deployment
    build: Callable[[Frame], go.Figure]
    applies: Callable[[Frame], bool] = lambda frame: True  # the roofline needs a priced step
    exported: bool = True  # the replay animates the history: the page's, not a step's

    def heading(self, frame: Frame) -> str:
        modeled = frame.record.modeled
        return self.title.format(deployment=modeled.deployment if modeled else "")


FIGURES = (
    Figure("queues", "Queues after this step", lambda f: queues.figure(f.records)),
    Figure("budget", "This step's forward pass", lambda f: budget.figure(f.record)),
    Figure("roofline", "This step on {deployment} (modeled, not measured)", lambda f: roofline.figure(f.records),
           applies=lambda f: f.record.modeled is not None),
    Figure("padding", "CUDA-graph padding on {deployment} (modeled)", lambda f: padding.figure(f.record),
           applies=lambda f: padding.applies(f.record)),
    Figure("blocks", "KV block map", lambda f: blocks.figure(f.record, f.previous)),
    Figure("timeline", "Requests over time", lambda f: timeline.requests_figure(f.records, f.num_steps, f.ms_until)),
    Figure("metrics", "Queues, pages and step size over time",
           lambda f: timeline.metrics_figure(f.records, f.num_steps, f.ms_until)),
    Figure("latency", "Latency per request", lambda f: timeline.latency_figure(f.records)),
    Figure("replay", "The history as an animation", lambda f: replay.figure(f.records), exported=False),
)
FIGURE = {figure.key: figure for figure in FIGURES}


def figures_at(frame: Frame, exported_only: bool = False) -> dict[str, Figure]:
    """The figures that apply to the frame's step, by key."""
    return {f.key: f for f in FIGURES if f.applies(frame) and (f.exported or not exported_only)}
