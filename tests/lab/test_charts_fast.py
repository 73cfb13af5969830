"""The figures built without Plotly's checks (lab/charts/fast.py) are the figures Plotly's checks
would have built: every figure a step shows (lab/charts/registry.py), over runs that reach every
mark (preemption by swap and by recompute, shared and cached pages, contiguous waste, every
lesson), and the Fleet page's two (a disaggregated fleet, KV copies on the link), equals its
checked twin as JSON, and so does its presenter-mode version. A shorthand property
(`font_size=`) or a misspelt one fails here. Each is also handed to Streamlit as the lab hands it
(fast.handed, no deep copy) and must serialise to what the figure's own copy would."""

from __future__ import annotations

import json

import plotly.io as pio
import pytest

from lab.charts import fast, style
from lab.charts.fleet import replicas_figure, timeline_figure
from lab.charts.registry import FIGURES, Frame
from lab.fleet.views import journeys, on_link
from lab.lessons import load_lessons
from lab.run import Run
from tests.lab.test_charts import _sample, contiguous_run, prefix_run, swap_run  # noqa: F401 (fixtures)
from tests.lab.test_fleet_lab import fleet_run


def _json(build) -> dict:
    fig = build()
    assert fig._validate is fast.CHECKED  # built through lab/charts/fast.py, not a go.Figure of its own
    sent = pio.to_json(fast.handed(fig).to_dict(), validate=False)  # what st.plotly_chart serialises (ui/draw.py)
    assert sent == pio.to_json(fig.to_dict(), validate=False), "the figure handed to Streamlit is not the figure"
    return json.loads(pio.to_json(fig, validate=False))


def assert_same_as_checked(build, what: str, monkeypatch, presenter: bool = True) -> None:
    """build() unchecked, then checked, and the two as JSON; also each in presenter mode if asked."""
    for projector in (False, True) if presenter else (False,):
        made = (lambda: style.for_projector(build())) if projector else build
        unchecked = _json(made)
        monkeypatch.setattr(fast, "CHECKED", True)
        checked = _json(made)
        monkeypatch.setattr(fast, "CHECKED", False)
        assert unchecked == checked, f"{what}{' (presenter)' if projector else ''}: differs from Plotly's checked build"


def _some(records, most: int = 5) -> list:
    """At most `most` of the steps where something moved, spread over the run: each step's figures
    are built four times here (checked or not, presenter or not), at tens of ms each."""
    moved = _sample(records)
    return moved[:: max(1, len(moved) // most)][:most] + [records[-1]]


def assert_step_figures(records, monkeypatch, steps=None, presenter: bool = True) -> int:
    drawn = 0
    for record in steps if steps is not None else _some(records):
        frame = Frame(records[: record.step + 1], len(records))
        last = record is records[-1]
        for figure in FIGURES:
            # the replay animates the whole history: one look, at the end, covers it
            if figure.applies(frame) and (figure.exported or last):
                assert_same_as_checked(lambda figure=figure, frame=frame: figure.build(frame),
                                       f"{figure.key} at step {record.step}", monkeypatch, presenter)
                drawn += 1
    return drawn


@pytest.mark.parametrize("run", ["swap_run", "prefix_run", "contiguous_run"])
def test_every_figure_of_a_step_equals_its_checked_build(run, request, monkeypatch):
    _, records = request.getfixturevalue(run)
    assert assert_step_figures(records, monkeypatch) > 20


def test_every_lessons_figures_equal_their_checked_build(loaded, monkeypatch):
    for lesson in load_lessons():
        run = Run(lesson.engine_config(), lesson.workload.items(), load=lambda *_: loaded)
        run.step(40)
        records = run.records
        # a middle step and the last (the runs above cover presenter mode and every mark besides)
        picks = sorted({len(records) // 2, len(records) - 1})
        assert_step_figures(records, monkeypatch, [records[i] for i in picks], presenter=False)


def test_a_disaggregated_fleets_figures_equal_their_checked_build(lab_model, monkeypatch):
    run = fleet_run(lab_model, replicas=3, num_prefill_replicas=1)
    run.step(300)
    copies = 0
    for index in range(0, len(run.records), 9):
        run.seek(index)
        record = run.record
        trips = journeys(run.records[: index + 1])
        crossing = on_link(trips.values(), record.clock_ms)
        copies += len(crossing)
        assert_same_as_checked(lambda r=record, c=crossing: replicas_figure(r, c), f"replicas at event {index}",
                               monkeypatch)
        assert_same_as_checked(lambda t=trips, r=record: timeline_figure(t, r.clock_ms), f"timeline at event {index}",
                               monkeypatch)
    assert copies > 0  # the strips' arrows for KV on the link were among the figures compared


def test_the_checks_still_catch_a_shorthand(monkeypatch):
    """The guard itself: a shorthand the checks would spell out makes the two builds differ."""
    with pytest.raises(AssertionError, match="differs"):
        assert_same_as_checked(lambda: fast.Figure(layout=dict(legend=dict(font_size=13))), "shorthand", monkeypatch)
