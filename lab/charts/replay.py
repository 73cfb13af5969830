"""The whole history as one Plotly animation: the block map above the queues, a frame per step.

Plotly plays it in the browser (play button, slider), so it runs without the
server: the same traces the live views draw, one frame per StepRecord.
"""

from __future__ import annotations

import plotly.graph_objects as go

from engine.records import StepRecord
from lab.charts import blocks, fast, queues
from lab.charts.style import Subplots

FRAME_MS = 400


def _traces(records: list[StepRecord], i: int) -> list[go.BaseTraceType]:
    previous = records[i - 1] if i else None
    upto = records[: i + 1]
    return blocks.pool_traces(records[i], previous) + queues.queue_traces(upto, queues.lanes(upto))


def figure(records: list[StepRecord]) -> go.Figure:
    """Frames for every record; the figure opens on the last one."""
    first = records[-1]
    widths = blocks.column_widths(first)
    cols = len(widths)
    specs = [[{}] * cols, [{"colspan": cols}] + [None] * (cols - 1)]
    fig = Subplots(rows=2, cols=cols, column_widths=widths, specs=specs, row_heights=[0.5, 0.5],
                   vertical_spacing=0.08, horizontal_spacing=0.03,
                   titles=[*(["GPU KV pool", "CPU swap space"][:cols]), "Queues"])
    pool = blocks.pool_traces(first, records[-2] if len(records) > 1 else None)
    for i in range(0, len(pool), 2):  # a heatmap and its "changed" marks per pool
        fig.add(pool[i:i + 2], row=1, col=1 + i // 2)
    fig.add(queues.queue_traces(records, queues.lanes(records)), row=2)
    blocks.style_axes(fig, first, row=1)
    queues.style_axes(fig, row=2, col=1)  # room for MAX_CARDS in every frame
    axes = [(t.xaxis, t.yaxis) for t in fig.traces]
    frames = []
    for i, record in enumerate(records):
        data = _traces(records, i)
        for trace, (x, y) in zip(data, axes, strict=True):
            trace.update(xaxis=x, yaxis=y)
        frames.append(fast.Frame(data=data, name=str(record.step), layout=dict(title=dict(text=f"Step {record.step}"))))
    play = dict(frame=dict(duration=FRAME_MS, redraw=True), transition=dict(duration=0), fromcurrent=True,
                mode="immediate")
    return fig.figure(
        "replay", height=460 + blocks.num_rows(first) * blocks.CELL_PX, frames=frames, showlegend=False,
        title=dict(text=f"Step {first.step}", x=0, font=dict(size=15)), barmode="overlay",
        margin=dict(l=8, r=8, t=56, b=90),
        updatemenus=[dict(type="buttons", direction="left", x=0, y=-0.06, xanchor="left", yanchor="top",
                          showactive=False, buttons=[
                              dict(label="▶ Play", method="animate", args=[None, play]),
                              dict(label="❚❚ Pause", method="animate",
                                   args=[[None], dict(frame=dict(duration=0, redraw=False), mode="immediate")])])],
        sliders=[dict(active=len(records) - 1, x=0.2, len=0.8, y=-0.04, yanchor="top",
                      currentvalue=dict(prefix="step ", font=dict(size=13), xanchor="right"),
                      steps=[dict(label=str(r.step), method="animate",
                                  args=[[str(r.step)], dict(frame=dict(duration=0, redraw=True), mode="immediate",
                                                            transition=dict(duration=0))]) for r in records])])
