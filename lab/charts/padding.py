"""CUDA-graph padding: what a step of decodes costs as the running batch grows, on the step's deployment.

vLLM 0.32 replays a CUDA graph captured for a fixed batch size, so a step of n decodes runs at the
next captured size (engine/cudagraph.py): its cost climbs in stairs as n sweeps from one request up
to max_num_seqs. max_num_seqs is itself a captured size, so a full batch is never padded; the
padding is paid while fewer run. Beside the stairs, the same model without graphs. Modeled on the
deployment (engine/hardware.py): decodes of one token each, each with this step's mean context.
"""

from __future__ import annotations

import functools

import plotly.graph_objects as go

from engine.cudagraph import capture_sizes
from engine.hardware import MODELS, Deployment, split_name
from engine.records import StepRecord
from lab.charts import fast
from lab.charts.style import Subplots

MAX_BATCH = 128  # the sweep's end when max_num_seqs is larger: past it the stairs repeat every 8 or 16
CONTEXT = 512  # tokens of context per decode where the step has no decodes to take it from
STAIRS, PLAIN = "#D55E00", "#0072B2"


@functools.lru_cache(maxsize=64)
def sweep(deployment: str, max_num_seqs: int, budget: int, context: int) -> tuple[tuple[int, ...], ...]:
    """(batch sizes, padded rows, ms with graphs, ms without) for 1..max_num_seqs running decodes."""
    dep = Deployment.parse(deployment)
    sizes = capture_sizes(max_num_seqs, budget, dep.gpu)
    batches = tuple(range(1, min(max_num_seqs, budget, MAX_BATCH) + 1))
    graphed = [dep.step_cost([(1, context)] * n, graph_sizes=sizes) for n in batches]
    plain = tuple(dep.step_cost([(1, context)] * n).total_ms for n in batches)
    return batches, tuple(c.padded_tokens for c in graphed), tuple(c.total_ms for c in graphed), plain


def applies(record: StepRecord) -> bool:
    """Priced on a model the lab knows by name (the engine's own, 'this@gpu', is read from its folder, which
    a record does not name)."""
    return record.modeled is not None and split_name(record.modeled.deployment)[0] in MODELS


def figure(record: StepRecord) -> go.Figure:
    """Left, the token rows a step of n decodes computes (the stairs); right, what it costs in modeled ms, with
    graphs and without. This step, if it is all decodes, is the dot."""
    decodes = [c for c in record.batch if c.kind == "decode" and not c.draft_token_ids]
    context = round(sum(c.start for c in decodes) / len(decodes)) if decodes else CONTEXT
    b = record.budget
    batches, rows, graphed, plain = sweep(record.modeled.deployment, b.seq_cap, b.token_budget, context)
    fig = Subplots(rows=1, cols=2, horizontal_spacing=0.12,
                   titles=(f"Token rows a step of n decodes computes (max_num_seqs = {b.seq_cap})",
                           f"Its modeled ms, with the padding and without ({context} tokens of context each)"))
    x = list(batches)
    fig.add([fast.Scatter(x=x, y=x, mode="lines", name="without CUDA graphs", line=dict(color=PLAIN, dash="dash"),
                          hovertemplate="%{x} decodes: %{y} rows<extra></extra>"),
             fast.Scatter(x=x, y=list(rows), mode="lines", name="vLLM 0.32's CUDA graphs",
                          line=dict(color=STAIRS, shape="hv"),
                          hovertemplate="%{x} decodes: padded to %{y} rows<extra></extra>")], col=1)
    fig.add([fast.Scatter(x=x, y=list(plain), mode="lines", name="without CUDA graphs", showlegend=False,
                          line=dict(color=PLAIN, dash="dash"),
                          hovertemplate="%{x} decodes: %{y:.3f} ms<extra></extra>"),
             fast.Scatter(x=x, y=list(graphed), mode="lines", name="vLLM 0.32's CUDA graphs", showlegend=False,
                          line=dict(color=STAIRS, shape="hv"), customdata=list(rows),
                          hovertemplate="%{x} decodes, padded to %{customdata}: %{y:.3f} ms<extra></extra>")], col=2)
    running = len(decodes)
    if decodes and running == len(record.batch) and running <= len(batches):
        dot = dict(mode="markers", name=f"step {record.step}", showlegend=False,
                   marker=dict(color=STAIRS, size=12, line=dict(color="#FFFFFF", width=1.5)))
        fig.add([fast.Scatter(x=[running], y=[rows[running - 1]], hovertemplate=f"step {record.step}: {running} "
                              f"decodes, {rows[running - 1]} rows<extra></extra>", **dot)], col=1)
        fig.add([fast.Scatter(x=[running], y=[graphed[running - 1]], hovertemplate=f"step {record.step}: "
                              f"{graphed[running - 1]:.3f} ms<extra></extra>", **dot)], col=2)
    fig.axes(x=dict(title=dict(text="decodes running")))
    fig.axes(y=dict(title=dict(text="token rows")), col=1)
    fig.axes(y=dict(title=dict(text="modeled ms"), rangemode="tozero"), col=2)
    fig.titles_at_left()
    return fig.figure("padding", height=280)
