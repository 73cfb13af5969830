"""The run over time: one row per request, and the engine's gauges step by step.

Both figures take the history up to the step on screen plus the length of the
whole history, so the x axis does not rescale while you scrub. On a long run the
request timeline draws the last RECENT_STEPS steps and the gauges keep each
stretch's peak (lab/charts/window.py), so what the browser receives stays bounded.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from engine.records import StepRecord
from lab.charts import fast
from lab.charts.history import latest_views, moves, states_in
from lab.charts.style import Subplots, discrete_colorscale, legend_key
from lab.charts.window import MAX_POINTS, MAX_ROWS, RECENT_STEPS, peaks, recent
from lab.metrics import run_metrics
from lab.palette import STATE_COLORS, STATE_GLYPHS, request_color

STATES = list(STATE_COLORS)
STATE_INDEX = {state: i for i, state in enumerate(STATES)}  # a state's z value (its colour in the scale)
GLYPH_STEPS = 80  # past this many columns a glyph no longer fits its cell: the greys alone


def _x_range(num_steps: int) -> list[float]:
    return [-0.5, max(num_steps, 1) - 0.5]


def _step_ticks(x_range: list[float], ms_until: float | None) -> dict:
    """Steps are whole numbers: ticks every 1, 2, 5, 10, ... steps, never at -0.4 (none on a ms axis)."""
    if ms_until is not None:
        return {}
    span = max(x_range[1] - x_range[0], 1)
    dtick = next(d * 10 ** e for e in range(7) for d in (1, 2, 5) if span / (d * 10 ** e) <= 10)
    return dict(tick0=0, dtick=dtick)


def _x(records: list[StepRecord], ms_until: float | None) -> tuple[list[float], list[float], str]:
    """Each step's place on the x axis, the axis range and its title: the step number, or, with
    ms_until (the whole history's end on the modeled clock), the middle of the step in modeled ms."""
    if ms_until is None:
        return [r.step for r in records], _x_range(len(records)), "step"
    return [r.modeled.clock_ms - r.modeled.total_ms / 2 for r in records], [0, max(ms_until, 1e-3)], "modeled ms"


def requests_figure(records: list[StepRecord], num_steps: int, ms_until: float | None = None) -> go.Figure:
    """Gantt-like: cell (request, step) coloured by what the request did in that step; with
    ms_until, each step is as wide as its modeled cost (see _x). Past RECENT_STEPS steps, the
    last RECENT_STEPS and the requests seen in them; past MAX_ROWS requests, the latest that did
    work (the queues chart counts the ones that only waited)."""
    windowed = len(records) > RECENT_STEPS
    records = recent(records)
    states = [states_in(record) for record in records]
    ids = list(latest_views(records))
    if len(ids) > MAX_ROWS:  # an overloaded queue: the rows that did work, the latest of them
        busy = {rid for step in states for rid, state in step.items() if state != "waiting"}
        ids = [rid for rid in ids if rid in busy][-MAX_ROWS:]
    steps, x_range, x_title = _x(records, ms_until)
    if windowed:
        x_range = [steps[0] - 0.5, steps[-1] + 0.5] if ms_until is None else [records[0].modeled.clock_ms -
                                                                               records[0].modeled.total_ms, ms_until]
    z = [[None] * len(records) for _ in ids]
    hover = [[""] * len(records) for _ in ids]
    glyphs = [[""] * len(records) for _ in ids]
    show_glyphs = len(records) <= GLYPH_STEPS
    pre_x, pre_y, pre_text = [], [], []  # preemption marks
    for col, record in enumerate(records):
        chunks = {c.request_id: c for c in record.batch}
        moved = moves(record)
        for row, rid in enumerate(ids):
            state = states[col].get(rid)
            if state is None:
                continue
            z[row][col] = STATE_INDEX[state]
            glyphs[row][col] = STATE_GLYPHS[state]
            chunk = chunks.get(rid)
            hover[row][col] = f"{rid} {state}" + (f", {chunk.num_tokens} tokens" if chunk and chunk.num_tokens > 1
                                                   else "")
            if "preempted" in moved.get(rid, []):
                pre_x.append(steps[col])
                pre_y.append(row)
                pre_text.append(f"{rid} preempted at step {record.step}")
    # Past GLYPH_STEPS columns the glyphs are left out of the figure, not sent as empty strings.
    glyph_props = dict(text=glyphs, texttemplate="%{text}", textfont=dict(size=11)) if show_glyphs else {}
    fig = Subplots()
    fig.add([fast.Heatmap(
        z=z, x=steps, y=list(range(len(ids))), customdata=hover, **glyph_props, hoverongaps=False,
        hovertemplate="%{customdata} · at %{x}<extra></extra>",
        colorscale=discrete_colorscale(list(STATE_COLORS.values())), zmin=-0.5, zmax=len(STATES) - 0.5,
        showscale=False, xgap=1, ygap=2, name="states")])
    fig.add([legend_key(f"{STATE_GLYPHS[state]} {state}".strip(), color) for state, color in STATE_COLORS.items()])
    fig.add([fast.Scatter(x=pre_x, y=pre_y, mode="markers", name="preemption", hovertext=pre_text, hoverinfo="text",
                          marker=dict(symbol="x-thin-open", size=12, line=dict(width=3, color="#111111")))])
    whole = ms_until is not None or windowed
    x_range = x_range if whole else _x_range(num_steps)
    fig.axes(x=dict(range=x_range, title=dict(text=x_title), showgrid=False, **_step_ticks(x_range, ms_until)),
             y=dict(range=[len(ids) - 0.5, -0.5], tickvals=list(range(len(ids))), ticktext=[
                 f"<span style='color:{request_color(rid)}'>■</span> {rid}" for rid in ids], showgrid=False,
                 fixedrange=True))
    return fig.figure("timeline", height=130 + 22 * max(len(ids), 3))


def metrics_figure(records: list[StepRecord], num_steps: int, ms_until: float | None = None) -> go.Figure:
    steps, x_range, x_title = _x(records, ms_until)
    fig = Subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                   titles=("KV cache and token budget, % used", "Requests per queue"))
    series = [
        (1, "KV cache usage %", [100 * r.stats.kv_cache_usage_perc for r in records], "#882255", "solid"),
        (1, "token budget used %", [100 * r.budget.tokens_used / r.budget.token_budget for r in records],
         "#E69F00", "solid"),
        (2, "running", [r.stats.num_requests_running for r in records], STATE_COLORS["decoding"], "solid"),
        (2, "waiting", [r.stats.num_requests_waiting for r in records], "#777777", "solid"),
        (2, "swapped", [r.stats.num_requests_swapped for r in records], STATE_COLORS["swapped"], "solid"),
        (2, "preemptions so far", [r.stats.num_preemptions for r in records], STATE_COLORS["preempted"], "dot"),
    ]
    for row, name, ys, color, dash in series:
        xs, ys = peaks(steps, ys)
        fig.add([fast.Scatter(x=xs, y=ys, name=name, mode="lines",
                              line=dict(color=color, dash=dash, width=2, shape="hv"))], row=row)
    x_range = x_range if ms_until is not None else _x_range(num_steps)
    fig.axes(x=dict(range=x_range, showgrid=False, **_step_ticks(x_range, ms_until)))
    fig.axes(x=dict(title=dict(text=x_title)), row=2)
    fig.axes(y=dict(range=[0, 105]), row=1)
    fig.axes(y=dict(rangemode="tozero"), row=2)
    fig.titles_at_left()
    return fig.figure("metrics", height=440)


def latency_figure(records: list[StepRecord]) -> go.Figure:
    """Per request: time to first token, and every gap between two tokens, in steps; past MAX_ROWS
    requests, the latest MAX_ROWS to have their first token (the metrics panel summarises them all)."""
    lat = {m["request_id"]: m for m in run_metrics(records)["requests"] if m.get("ttft_steps") is not None}
    ids = list(lat)[-MAX_ROWS:]
    fig = Subplots(rows=1, cols=2, horizontal_spacing=0.08,
                   titles=("Time to first token (steps, arrival to first token)",
                           "Inter-token latency (steps between tokens)"))
    fig.add([fast.Bar(x=ids, y=[lat[r]["ttft_steps"] for r in ids], showlegend=False, name="TTFT",
                      marker_color=[request_color(r) for r in ids],
                      hovertemplate="%{x}: first token after %{y} steps<extra></extra>")], col=1)
    style = dict(showlegend=False, name="ITL", line=dict(color="#999999"), fillcolor="rgba(0,0,0,0)")
    gaps = {rid: lat[rid]["itl_steps"] for rid in ids if lat[rid]["itl_steps"]}
    if sum(map(len, gaps.values())) <= MAX_POINTS:  # a lesson's dozen requests: every gap as a dot
        fig.add([fast.Box(x=[rid for rid in gaps for _ in gaps[rid]], y=[g for rid in gaps for g in gaps[rid]],
                          boxpoints="all", jitter=0.4, pointpos=0, marker=dict(color="#555555", size=5),
                          hovertemplate="%{x}: %{y} steps between two tokens<extra></extra>", **style)], col=2)
    else:  # a trace's thousands of gaps: each request's quartiles and extremes, computed here
        q = {rid: np.percentile(g, [0, 25, 50, 75, 100]) for rid, g in gaps.items()}
        fig.add([fast.Box(x=list(q), lowerfence=[v[0] for v in q.values()], q1=[v[1] for v in q.values()],
                          median=[v[2] for v in q.values()], q3=[v[3] for v in q.values()],
                          upperfence=[v[4] for v in q.values()], **style)], col=2)
    fig.axes(x=dict(categoryorder="array", categoryarray=ids), y=dict(rangemode="tozero"))
    fig.titles_at_left()
    return fig.figure("latency", height=320)
