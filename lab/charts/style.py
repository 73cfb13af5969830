"""Layout shared by every figure: readable on a laptop and on a projector, calm between steps."""

from __future__ import annotations

import copy
import functools
import html
import json
import re

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.charts import fast

# A small template of our own: assigning a built-in one ("plotly_white") deep-copies it on every
# figure, which costs more than drawing the figure.
AXIS = dict(gridcolor="#EBEBEB", zerolinecolor="#D6D6D6", linecolor="#D6D6D6", automargin=True)
TEMPLATE = go.layout.Template(layout=dict(paper_bgcolor="#FFFFFF", plot_bgcolor="#FFFFFF", xaxis=AXIS, yaxis=AXIS,
                                          colorway=["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9"]))
FONT = dict(family="Source Sans Pro, Segoe UI, Helvetica, Arial, sans-serif", size=13, color="#262730")
# Legends go under the chart: above it, Plotly's toolbar (top right, on hover or a tap) covered
# them, most on a phone, where a legend wraps across the whole width.
BELOW = dict(orientation="h", yref="container", y=0, yanchor="bottom", xanchor="left", x=0, font=dict(size=12))


def house_style(name: str, height: int, **extra) -> dict:
    """The house style as layout settings. No Plotly transition: Streamlit draws a changed figure
    afresh, so one would never run (lab/charts/motion.py animates a step instead)."""
    base = dict(
        template=TEMPLATE, font=FONT, height=height, margin=dict(l=8, r=8, t=36, b=8),
        uirevision=name, hoverlabel=dict(font=dict(size=13), align="left"),
        # Down the right edge, not across the top: on a phone the toolbar sat on the right-hand
        # subplot's title (the block map's "CPU swap").
        modebar=dict(orientation="v", bgcolor="rgba(255,255,255,0.6)"),
        legend=BELOW)
    return {**base, **extra}


PROJECTOR_SCALE = 1.3  # chart text and heights on a projector, against the charts' own sizes
PROJECTOR_LEAST_PX = 18  # the smallest tick or legend text the back of a lecture hall can read


def projector(doc: dict) -> dict:
    """A figure's JSON for presenter mode, changed in place: every text grows, the sizes a chart sets
    itself (card labels, subplot titles) as well as the default; ticks and legends reach at least
    PROJECTOR_LEAST_PX; the chart grows taller to hold it. On the JSON, so the offline page
    (lab/export/player.py) sizes each of its thousands of figures without Plotly's objects."""
    layout = doc.setdefault("layout", {})
    _grow(layout.get("font"), PROJECTOR_LEAST_PX)
    _grow(layout.get("legend", {}).get("font"), PROJECTOR_LEAST_PX)
    _grow(layout.get("hoverlabel", {}).get("font"))
    for trace in doc.get("data", []):
        _grow(trace.get("textfont"))
    for note in layout.get("annotations", []):
        _grow(note.get("font"))
    for key, axis in layout.items():
        if re.fullmatch(r"[xy]axis\d*", key):
            _grow(axis.get("tickfont"), PROJECTOR_LEAST_PX)
    if layout.get("height"):
        layout["height"] = round(layout["height"] * PROJECTOR_SCALE)
    return doc


def _grow(font: dict | None, least: int = 0) -> None:
    size = (font or {}).get("size")
    if isinstance(size, int | float) and not isinstance(size, bool):
        font["size"] = max(round(size * PROJECTOR_SCALE), least)


def for_projector(fig: go.Figure) -> go.Figure:
    """The figure for presenter mode (see projector)."""
    return fast.Figure(projector(fig.to_plotly_json()))


def layout(fig: go.Figure, name: str, height: int, **extra) -> go.Figure:
    """Apply the house style to a figure built elsewhere."""
    fig.update_layout(**house_style(name, height, **extra))
    return fig


@functools.lru_cache(maxsize=32)
def _skeleton(grid: str, num_titles: int) -> tuple[dict, dict[tuple[int, int], tuple[str, str]]]:
    """make_subplots once per grid shape: the layout it builds (axis domains, title annotations) as
    plain data, and the axis names of each cell, e.g. (2, 1) -> ("xaxis2", "yaxis2")."""
    options = json.loads(grid)
    fig = make_subplots(**options, subplot_titles=[f"title {i}" for i in range(num_titles)])
    skeleton = fig.layout.to_plotly_json()
    skeleton.pop("template", None)  # the house style brings its own
    cells = {}
    for row in range(1, options["rows"] + 1):
        for col in range(1, options["cols"] + 1):
            subplot = fig.get_subplot(row, col)
            if subplot is not None:  # None: a cell another one spans
                cells[row, col] = (subplot.xaxis.plotly_name, subplot.yaxis.plotly_name)
    return skeleton, cells


class Subplots:
    """A figure assembled as plain data and built once, in fast.Figure(...).

    make_subplots builds and checks a whole layout, and every add_trace(row=, col=) or
    update_xaxes(row=, col=) after it is checked again one call at a time: together they
    cost several times what the data does. Here the grid is laid out once per shape
    (cached; subplot titles are its annotations, filled in per figure), traces are placed
    on their cell's axes by name, and axis settings are merged into plain dicts.
    """

    def __init__(self, rows: int = 1, cols: int = 1, titles: tuple[str, ...] | list[str] = (), **grid):
        if rows == cols == 1 and not titles:  # one plain plot: the default axes, nothing to lay out
            skeleton, self.cells = {}, {(1, 1): ("xaxis", "yaxis")}
        else:
            # JSON: the options (lists, specs dicts) as one hashable cache key.
            skeleton, self.cells = _skeleton(json.dumps(dict(rows=rows, cols=cols, **grid)), len(titles))
        self.layout = copy.deepcopy(skeleton)
        for annotation, title in zip(self.layout.get("annotations", []), titles, strict=True):
            annotation["text"] = title
        self.traces: list[go.BaseTraceType] = []

    def refs(self, row: int = 1, col: int = 1) -> tuple[str, str]:
        """The cell's axes as traces and shapes name them: ("x2", "y2") for "xaxis2", "yaxis2"."""
        xaxis, yaxis = self.cells[row, col]
        return xaxis.replace("axis", ""), yaxis.replace("axis", "")

    def add(self, traces: list[go.BaseTraceType], row: int = 1, col: int = 1) -> None:
        x, y = self.refs(row, col)
        for trace in traces:
            trace["xaxis"], trace["yaxis"] = x, y  # as items: trace.update() goes through Plotly's update machinery
            self.traces.append(trace)

    def axes(self, x: dict | None = None, y: dict | None = None, row: int | None = None,
             col: int | None = None) -> None:
        """Axis settings for the cell at (row, col); None for either means every row or column."""
        for (r, c), (xaxis, yaxis) in self.cells.items():
            if row in (None, r) and col in (None, c):
                self.layout.setdefault(xaxis, {}).update(x or {})
                self.layout.setdefault(yaxis, {}).update(y or {})

    def titles_at_left(self, size: int = 13) -> None:
        """Each subplot title starts at its subplot's left edge instead of centred over it."""
        for annotation, (xaxis, _) in zip(self.layout.get("annotations", []), self.cells.values(), strict=False):
            annotation.update(x=self.layout[xaxis]["domain"][0], xanchor="left", font=dict(size=size))

    def figure(self, name: str, height: int, frames: list[go.Frame] | None = None, **extra) -> go.Figure:
        """The one go.Figure, in the house style (see house_style for name, height and extra)."""
        layout = {**self.layout, **house_style(name, height, **extra)}
        return fast.Figure(data=self.traces, layout=layout, frames=frames)


def hover_text(text: str, limit: int = 80) -> str:
    """Model text made safe for a hover label: escaped, newlines shown, long text cut."""
    shown = text if len(text) <= limit else text[:limit] + "…"
    return html.escape(shown).replace("\n", "⏎")


def discrete_colorscale(colors: list[str]) -> list[list]:
    """A heatmap colour scale where z = i paints colors[i] (use zmin=-0.5, zmax=len(colors)-0.5)."""
    k = len(colors)
    scale = []
    for i, color in enumerate(colors):
        scale += [[i / k, color], [(i + 1) / k, color]]
    return scale


def legend_key(name: str, color: str, symbol: str = "square", line: str | None = None) -> go.Scatter:
    """A legend entry with nothing plotted: explains a colour or mark used inside a heatmap."""
    return fast.Scatter(x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                        marker=dict(symbol=symbol, size=12, color=color, line=dict(width=1.5, color=line or color)))
