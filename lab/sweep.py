"""A knob sweep: the lab's workload run to the end once for each value of one knob.

The A/B page compares two configs step by step. A sweep shows which way the
metrics move as one knob moves: the token budget against first-token and
inter-token latency, the pool size against preemptions, the page size against
what a request can hold. Every run is deterministic, so the same config,
workload and values give the same table on any machine. Latencies are in steps,
and only tokens/s depends on this machine's speed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from engine import EngineConfig, load_model
from engine.knobs import KNOB, SWEEP_KNOBS
from engine.metrics import METRICS, Slo
from engine.values import parse
from engine.workload import WorkloadItem, WorkloadSource, submit
from lab.budgets import engine_for
from lab.charts.style import Subplots
from lab.metrics import run_metrics

# Not an engine knob: the offered load of the lab's trace or drawn workload (engine/workload/load.py).
RATE = "rate"
RATE_VALUES = "1, 2, 4, 8, 16"
MAX_VALUES = 8
MAX_STEPS = 5_000  # per run; a run still going then is reported as unfinished

# The table's columns, from the one metric catalogue; the figure's panels draw some of them.
COLUMNS = tuple(METRICS[m] for m in (
    "ttft_steps.p50", "ttft_steps.p95", "itl_steps.p95", "itl_steps.max", "e2e_steps.p95", "num_steps",
    "throughput_tokens_per_step", "throughput_tokens_per_s", "ttft_ms.p95", "itl_ms.p95", "num_preemptions",
    "num_recomputed_tokens", "peak_kv_cache_usage_perc", "num_requests_rejected", "request_throughput", "goodput",
    "slo_attainment", "ttft_ms.p90", "tpot_ms.p90"))
# Figure panels: (title, [(line name, metric id)]).
PANELS = (
    ("Time to first token (steps)", [("p50", "ttft_steps.p50"), ("p95", "ttft_steps.p95")]),
    ("Inter-token latency (steps)", [("p95", "itl_steps.p95"), ("max", "itl_steps.max")]),
    ("Throughput (tokens per step)", [("tokens/step", "throughput_tokens_per_step")]),
    ("Repeated work", [("preemptions", "num_preemptions"), ("recomputed tokens", "num_recomputed_tokens")]),
)
# Under a load in time the panels are a serving engineer's: what was served against the SLO, and the tails.
LOAD_PANELS = (
    ("Served (requests/s)", [("throughput", "request_throughput"), ("goodput", "goodput")]),
    ("SLO attainment", [("attainment", "slo_attainment")]),
    ("Time to first token p90 (ms)", [("TTFT p90", "ttft_ms.p90")]),
    ("Time per output token p90 (ms)", [("TPOT p90", "tpot_ms.p90")]),
)
LINE_COLORS = ("#0072B2", "#D55E00")
LINE_DASHES = ("solid", "dash")  # where two lines coincide, the dashed one still shows the other


def parse_values(knob: str, text: str, base: EngineConfig) -> list:
    """The comma-separated values of a sweep, each checked as the engine checks it.
    ValueError names the knob and the value that is wrong."""
    if knob not in SWEEP_KNOBS and knob != RATE:
        raise ValueError(f"a sweep can vary {', '.join(SWEEP_KNOBS)} (or the rate of a load in time); not {knob!r}")
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"give the values of {knob} to try, separated by commas, e.g. {SWEEP_KNOBS[knob]}")
    if len(items) > MAX_VALUES:
        raise ValueError(f"at most {MAX_VALUES} values in one sweep; got {len(items)}")
    values = []
    for item in items:
        try:
            value = _rate(item) if knob == RATE else parse(item, KNOB[knob].annotation)
            if knob != RATE:
                dataclasses.replace(base, **{knob: value})  # validates, with every other knob as it is
        except ValueError as exc:
            raise ValueError(f"{knob} = {item!r} cannot be run: {exc}") from None
        if value not in values:
            values.append(value)
    return values


@dataclass
class SweepPoint:
    value: object
    metrics: dict  # lab.metrics.run_metrics of the run
    finished: bool


def _rate(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1000:
        raise ValueError("a rate is a number of requests/s in (0, 1000]")
    return value


def run_sweep(base: EngineConfig, workload: list[WorkloadItem] | WorkloadSource, knob: str, values: list,
              progress: Callable[[int], None] = lambda done: None, max_steps: int = MAX_STEPS) -> list[SweepPoint]:
    """One fresh engine per value, each run to the end; progress(i) after the i-th run. A rate sweep
    needs the workload's source (a trace or a drawn load), redrawn at each rate."""
    loaded = load_model(base.model, base.device, base.dtype)  # cached: every run shares the weights
    points = []
    for value in values:
        if knob == RATE:
            if not isinstance(workload, WorkloadSource) or workload.load is None:
                raise ValueError("a rate sweep needs a load in time (a trace or requests at a rate) as the workload")
            config, items = base, dataclasses.replace(workload.load, rate=value).items()
        else:
            config = dataclasses.replace(base, **{knob: value})
            items = workload.items() if isinstance(workload, WorkloadSource) else workload
        engine = engine_for(config, loaded)
        submit(engine, items)
        records = engine.run(max_steps)
        points.append(SweepPoint(value, run_metrics(records, Slo.of(config)), not engine.has_unfinished_requests()))
        progress(len(points))
    return points


def table(knob: str, points: list[SweepPoint]) -> list[dict]:
    """One row per value: the knob's value, then every column (None where nothing was measured)."""
    return [{knob: str(p.value),
             **{m.heading: m.value(p.metrics["aggregate"]) for m in COLUMNS},
             "finished": p.finished} for p in points]


def _title(title: str, lines: list[tuple[str, str]]) -> str:
    """A panel's title with a colour key for its lines: it stays beside the lines it explains."""
    if len(lines) == 1:
        return title
    key = " ".join(f"<span style='color:{color}'>{'━' if dash == 'solid' else '╍'} {name}</span>"
                   for (name, _), color, dash in zip(lines, LINE_COLORS, LINE_DASHES, strict=False))
    return f"{title}  {key}"


def figure(knob: str, points: list[SweepPoint], current: object = None, panels: tuple = PANELS) -> go.Figure:
    """Small multiples, the knob's values on every x axis in the order they were given; a grey
    band marks `current` (the lab's own value) where it is one of them."""
    x = [str(p.value) for p in points]
    fig = Subplots(rows=2, cols=2, titles=[_title(title, lines) for title, lines in panels], vertical_spacing=0.16,
                   horizontal_spacing=0.1)
    for i, (_, lines) in enumerate(panels):
        hover = "%{x}<br>%{fullData.name}: %{y:.3g}<extra></extra>"
        fig.add([go.Scatter(x=x, y=[METRICS[m].value(p.metrics["aggregate"]) for p in points], name=name,
                            mode="lines+markers", line=dict(color=color, dash=dash), hovertemplate=hover)
                 for (name, m), color, dash in zip(lines, LINE_COLORS, LINE_DASHES, strict=False)],
                row=i // 2 + 1, col=i % 2 + 1)
    fig.axes(x=dict(type="category", range=[-0.5, len(x) - 0.5]), y=dict(rangemode="tozero"))
    fig.axes(x=dict(title=dict(text=knob)), row=2)
    fig.titles_at_left()
    marks = []
    if str(current) in x:  # a category axis puts value i at x = i
        at = x.index(str(current))
        marks = [dict(type="rect", xref=x_ref, yref=f"{y_ref} domain", x0=at - 0.3, x1=at + 0.3, y0=0, y1=1,
                      layer="below", fillcolor="#EEEEEE", line_width=0)
                 for x_ref, y_ref in (fig.refs(row, col) for row, col in fig.cells)]
    return fig.figure("sweep", height=560, showlegend=False, shapes=marks)
