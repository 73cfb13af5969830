"""The scheduler's queues as lanes of request cards, with this step's moves marked.

Waiting, running and swapped are drawn in queue order (the head on the left);
finished shows the most recent first. A card reads "id, prompt tokens +
generated tokens"; a thick outline and a mark beside it say what happened to
the request in this step.
"""

from __future__ import annotations

import plotly.graph_objects as go

from engine.records import RequestView, StepRecord
from lab.charts import fast
from lab.charts.history import finished_in_order, latest_views, moves
from lab.charts.style import Subplots, hover_text
from lab.palette import MOVE_MARKS, request_color, text_color

LANES = ("waiting", "running", "swapped", "finished")
LANE_Y = {lane: len(LANES) - 1 - i for i, lane in enumerate(LANES)}  # waiting on top
MAX_CARDS = 8  # per lane; the rest are counted, so a burst does not shrink every card
MIN_SLOTS = 5  # card places drawn per lane at least: short queues get wide, readable cards
CARD_WIDTH = 0.9  # of a place along the lane
CARD_HEIGHT = 0.7  # of a lane
# The card notation, said under the chart: a card's colour names its request, never its state.
KEY = ("A card: the request's id, in the colour it has in every view (the colour is the request, not its "
       "state), then its prompt tokens + the tokens it has generated: **17+5**. A thick outline and a mark: "
       "what happened to it in this step.")
MOVE_LABELS = {"admitted": "admitted", "swapped_in": "swapped in", "preempted": "preempted",
               "swapped_out": "swapped out", "finished": "finished", "rejected": "rejected"}


def lanes(records: list[StepRecord]) -> dict[str, list[str]]:
    """Request ids per lane after the last record (the step on screen)."""
    record = records[-1]
    return {"waiting": record.waiting, "running": record.running, "swapped": record.swapped,
            "finished": finished_in_order(records)[::-1]}


def cards(lane_ids: dict[str, list[str]]) -> list[tuple[str, int, str]]:
    """(lane, place, request id) of every card drawn, in the order of the cards' bar trace."""
    return [(lane, j, rid) for lane, ids in lane_ids.items() for j, rid in enumerate(ids[:MAX_CARDS])]


def _card_hover(view: RequestView, moved: list[str]) -> str:
    lines = [f"<b>{view.request_id}</b> · {view.status}" + (f" ({view.finish_reason})" if view.finish_reason else ""),
             f"prompt {view.num_prompt_tokens} tokens · generated {view.num_output_tokens} of {view.max_tokens}",
             f"in KV cache: {view.num_computed_tokens} tokens on {view.num_blocks} pages",
             f"priority {view.priority} · arrived at step {view.arrival_step} · preempted {view.num_preemptions}×"]
    if moved:
        lines.append("this step: " + ", ".join(MOVE_LABELS[m] for m in moved))
    if view.output_text:
        lines.append(f"“{hover_text(view.output_text, 60)}”")
    return "<br>".join(lines)


def queue_traces(records: list[StepRecord], lane_ids: dict[str, list[str]]) -> list[go.BaseTraceType]:
    """Cards (one bar trace), lane counts and overflow notes (one text trace), one trace per move mark.
    lane_ids: lanes(records), computed once by the caller, which sizes the axes from it too."""
    views = latest_views(records)
    moved = moves(records[-1])
    show_priority = len({v.priority for v in views.values()}) > 1
    card = dict(x=[], y=[], base=[], color=[], text=[], font=[], hover=[], line=[])
    notes = dict(x=[], y=[], text=[])
    marks = {kind: dict(x=[], y=[], hover=[]) for kind in MOVE_MARKS}
    for lane, j, rid in cards(lane_ids):
        y = LANE_Y[lane]
        view, color = views[rid], request_color(rid)
        label = f"<b>{rid}</b><br>{view.num_prompt_tokens}+{view.num_output_tokens}"
        card["x"].append(CARD_WIDTH)
        card["y"].append(y)
        card["base"].append(j)
        card["color"].append(color)
        card["font"].append(text_color(color))
        card["text"].append(label + (f" p{view.priority}" if show_priority else ""))
        card["hover"].append(_card_hover(view, moved.get(rid, [])))
        card["line"].append(3 if rid in moved else 0)
        for kind in moved.get(rid, []):
            marks[kind]["x"].append(j + CARD_WIDTH - 0.08)
            marks[kind]["y"].append(y + 0.4)
            marks[kind]["hover"].append(f"{rid}: {MOVE_LABELS[kind]}")
    for lane, ids in lane_ids.items():
        y = LANE_Y[lane]
        notes["x"].append(-0.35)
        notes["y"].append(y)
        notes["text"].append(f"<b>{len(ids)}</b>")
        if len(ids) > MAX_CARDS:
            notes["x"].append(MAX_CARDS + 0.45)
            notes["y"].append(y)
            notes["text"].append(f"+{len(ids) - MAX_CARDS}")
    traces: list[go.BaseTraceType] = [
        fast.Bar(x=card["x"], y=card["y"], base=card["base"], orientation="h", width=CARD_HEIGHT, text=card["text"],
                 textposition="inside", insidetextanchor="middle", textangle=0,
                 textfont=dict(color=card["font"], size=12),
                 hovertext=card["hover"], hoverinfo="text", showlegend=False, name="requests",
                 marker=dict(color=card["color"], line=dict(width=card["line"], color="#111111"))),
        fast.Scatter(x=notes["x"], y=notes["y"], text=notes["text"], mode="text", hoverinfo="skip",
                     showlegend=False, textfont=dict(size=14, color="#555555"), name="counts")]
    for kind, (symbol, color) in MOVE_MARKS.items():
        m = marks[kind]
        traces.append(fast.Scatter(x=m["x"], y=m["y"], mode="markers", name=MOVE_LABELS[kind], hovertext=m["hover"],
                                   hoverinfo="text", marker=dict(symbol=symbol, size=13, color=color,
                                                                 line=dict(width=2, color=color))))
    return traces


def slots(lane_ids: dict[str, list[str]]) -> int:
    """Card places per lane: as many as the longest lane needs, between MIN_SLOTS and MAX_CARDS."""
    return min(MAX_CARDS, max(MIN_SLOTS, *map(len, lane_ids.values())))


def style_axes(fig: Subplots, num_slots: int = MAX_CARDS, row: int | None = None, col: int | None = None) -> None:
    fig.axes(x=dict(range=[-0.7, num_slots + 0.8], visible=False, fixedrange=True),
             y=dict(range=[-0.6, len(LANES) - 0.4], tickvals=list(LANE_Y.values()), ticktext=list(LANE_Y),
                    showgrid=False, zeroline=False, fixedrange=True, tickfont=dict(size=13)), row=row, col=col)


def figure(records: list[StepRecord]) -> go.Figure:
    """Queues after the last of `records` (pass the history up to the step on screen)."""
    fig = Subplots()
    lane_ids = lanes(records)
    fig.add(queue_traces(records, lane_ids))
    style_axes(fig, slots(lane_ids))
    lane_lines = [dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=y + 0.5, y1=y + 0.5,
                       line=dict(color="#E4E4E4", width=1)) for y in range(len(LANES) - 1)]
    return fig.figure("queues", height=280, barmode="overlay", margin=dict(l=8, r=8, t=28, b=8), shapes=lane_lines)
