"""Plotly objects built without Plotly's property checks, for the figures redrawn on every click.

Plotly checks every property as it is set: its name, its type, its range, and it spells out a
shorthand (`font_size=13` becomes `font: {size: 13}`). For a step's figures the checking made
building them take 140 ms instead of 22 (bench/RESULTS.md §8), and the lab pays it on every Step
click of every student. So the chart modules write each property in the spelled-out form Plotly would
store, and build through these constructors, which skip the checks. The checks still stand
guard: tests/lab/test_charts_fast.py builds every figure of many runs both ways (CHECKED on
and off) and requires the same JSON, so a misspelt or shorthand property fails there.
"""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go

CHECKED = False  # True builds with Plotly's checks, as the test does for its reference figures


def _unchecked(cls: type) -> Callable[..., go.Figure | go.BaseTraceType | go.Frame]:
    def build(*args, **props):
        return cls(*args, _validate=CHECKED, **props)

    build.__name__ = build.__qualname__ = cls.__name__
    build.__doc__ = f"go.{cls.__name__}(...), built without checking its properties unless CHECKED."
    return build


Figure = _unchecked(go.Figure)
Frame = _unchecked(go.Frame)
Bar = _unchecked(go.Bar)
Box = _unchecked(go.Box)
Heatmap = _unchecked(go.Heatmap)
Scatter = _unchecked(go.Scatter)


class _Handed(go.Figure):
    """A figure whose to_dict() returns its own data, not a deep copy (see handed)."""

    def to_dict(self) -> dict:
        doc = {"data": self._data, "layout": self._layout}
        if self._frame_objs:
            doc["frames"] = [frame._props for frame in self._frame_objs]
        return doc


def handed(fig: go.Figure) -> go.Figure:
    """The figure as st.plotly_chart should read it. Streamlit takes fig.to_dict(), which deep-copies
    every trace, and only serialises the copy: for a lesson's timeline that copy was most of the time
    the figure took to send. This one shares the figure's data (and its attributes: nothing is copied),
    so it is only to be read."""
    shared = object.__new__(_Handed)
    shared.__dict__ = fig.__dict__
    return shared
