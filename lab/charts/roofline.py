"""Where a step sits on its GPU's roofline, and what its modeled milliseconds are spent on.

Drawn only for a run priced on a deployment (StepRecord.modeled). The roof is the
deployment's achievable compute and bandwidth (engine/hardware.py); a step is a dot at
its arithmetic intensity (FLOPs per byte moved) and the FLOP/s it attains. Left of the
ridge a step is bound by memory, so adding tokens to it is nearly free; right of it
every token costs compute.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from engine.hardware import GPUS, split_name
from engine.records import ModeledCost, StepRecord
from lab.charts import fast
from lab.charts.style import Subplots

PART_COLORS = {"linear": "#0072B2", "attention": "#E69F00", "elementwise": "#009E73", "communication": "#CC79A7",
               "overhead": "#999999", "swap": "#D55E00"}
EARLIER = 60  # earlier steps drawn faintly


def _attained(record: StepRecord) -> tuple[float, float]:
    """(FLOPs per byte, TFLOP/s) of a step's GPU work (its overhead and copies are off the roof)."""
    m = record.modeled
    gpu_ms = m.parts["linear"] + m.parts["attention"] + m.parts["elementwise"]
    return m.flops / max(m.bytes, 1.0), m.flops / max(gpu_ms, 1e-9) / 1e9


def graph_run(m: ModeledCost) -> str:
    """How the step ran on the GPU: the CUDA graph it replayed and the rows padded in (engine/cudagraph.py)."""
    if m.graph == "eager":
        return f"{m.tokens} tokens, eager (no CUDA graph that large)"
    padding = f" padded to {m.padded_tokens}" if m.padded_tokens > m.tokens else ""
    return f"{m.tokens} tokens{padding} ({m.graph} CUDA graph)"


def figure(records: list[StepRecord]) -> go.Figure:
    """The roofline with this step (the last record) as a dot and earlier ones faint; beside it
    the step's modeled ms, one bar per part."""
    record = records[-1]
    m = record.modeled
    gpu = GPUS[split_name(m.deployment)[1]["gpu"]]
    peak = gpu.flops * gpu.compute_fraction / 1e12
    bandwidth = gpu.bandwidth * gpu.bandwidth_fraction / 1e12  # TB/s: TFLOP/s per FLOP/byte
    ridge = peak / bandwidth
    fig = Subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.14,
                   titles=(f"Roofline: {m.deployment} ({m.bound}-bound, MFU {m.mfu:.0%}, MBU {m.mbu:.0%})",
                           f"This step: {m.total_ms:.2f} ms modeled, {graph_run(m)}"))
    xs = [0.5, ridge, max(ridge * 20, 4000)]
    fig.add([fast.Scatter(x=xs, y=[min(peak, x * bandwidth) for x in xs], mode="lines", name="roof",
                          line=dict(color="#555555", width=2), hovertemplate="attainable %{y:.0f} TFLOP/s"
                          "<extra></extra>"),
             fast.Scatter(x=[ridge], y=[peak], mode="markers+text", text=[f"ridge {ridge:.0f} FLOP/B"],
                          # above the roof, where no step can be: a step's dot never covers it (issue 31)
                          textposition="top left", marker=dict(symbol="diamond", size=9, color="#555555"),
                          name="ridge", hoverinfo="skip")], col=1)
    earlier = [r for r in records[-EARLIER - 1:-1] if r.modeled is not None and r.modeled.flops > 0]
    if earlier:
        points = [_attained(r) for r in earlier]
        fig.add([fast.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers", name="earlier",
                              marker=dict(color="rgba(0,114,178,0.18)", size=7),
                              text=[f"step {r.step}" for r in earlier],
                              hovertemplate="%{text}: %{x:.1f} FLOP/B, %{y:.0f} TFLOP/s<extra></extra>")], col=1)
    if m.flops > 0:
        x, y = _attained(record)
        fig.add([fast.Scatter(x=[x], y=[y], mode="markers", name=f"step {record.step}",
                              marker=dict(color="#D55E00", size=13, line=dict(color="#FFFFFF", width=1.5)),
                              hovertemplate=f"step {record.step}: %{{x:.1f}} FLOP/B, %{{y:.0f}} TFLOP/s"
                                            "<extra></extra>")], col=1)
    parts = [(name, ms) for name, ms in m.parts.items() if ms > 0]
    fig.add([fast.Bar(x=[ms], y=[name], orientation="h", name=name, marker_color=PART_COLORS.get(name, "#777777"),
                      text=[f"{ms:.2f}"], textposition="outside", cliponaxis=False,
                      hovertemplate=f"{name}: %{{x:.3f}} ms<extra></extra>") for name, ms in parts], col=2)
    fig.axes(x=dict(type="log", title=dict(text="FLOPs per byte")), y=dict(type="log", title=dict(
        text="TFLOP/s"), range=[-1, math.log10(peak * 2.2)]), col=1)  # room for the ridge's label
    longest = max((ms for _, ms in parts), default=1.0)
    fig.axes(x=dict(title=dict(text="modeled ms"), range=[0, 1.25 * longest]), y=dict(autorange="reversed"), col=2)
    fig.titles_at_left()
    return fig.figure("roofline", height=300, showlegend=False)
