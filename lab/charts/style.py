"""Layout shared by every figure: readable on a laptop and on a projector, calm between steps."""

from __future__ import annotations

import html

import plotly.graph_objects as go

# A small template of our own: assigning a built-in one ("plotly_white") deep-copies it on every
# figure, which costs more than drawing the figure.
AXIS = dict(gridcolor="#EBEBEB", zerolinecolor="#D6D6D6", linecolor="#D6D6D6", automargin=True)
TEMPLATE = go.layout.Template(layout=dict(paper_bgcolor="#FFFFFF", plot_bgcolor="#FFFFFF", xaxis=AXIS, yaxis=AXIS,
                                          colorway=["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9"]))
FONT = dict(family="Source Sans Pro, Segoe UI, Helvetica, Arial, sans-serif", size=13, color="#262730")
# Short eased transitions: a change between two steps slides instead of jumping.
TRANSITION = dict(duration=300, easing="cubic-in-out")


def layout(fig: go.Figure, name: str, height: int, **extra) -> go.Figure:
    """Apply the house style. uirevision=name keeps zoom and legend choices across steps."""
    base = dict(
        template=TEMPLATE, font=FONT, height=height, margin=dict(l=8, r=8, t=36, b=8),
        uirevision=name, transition=TRANSITION, hoverlabel=dict(font_size=13, align="left"),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1, font_size=12))
    fig.update_layout(**{**base, **extra})
    return fig


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
    return go.Scatter(x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                      marker=dict(symbol=symbol, size=12, color=color, line=dict(width=1.5, color=line or color)))
