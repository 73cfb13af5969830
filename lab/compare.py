"""A/B: one workload under two configs, stepped side by side, then compared.

Both engines get the same requests, so every difference in their records comes
from the knobs. They advance together, one step each per call, so at any moment
the lab can show both at the same step; the one that finishes first waits.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine import Engine, EngineConfig, StepRecord, load_model
from engine.limits import MAX_STEPS
from engine.metrics import METRICS, metric_values
from engine.workload import WorkloadItem, submit
from lab.budgets import engine_for
from lab.metrics import run_metrics

LABELS = ("A", "B")
COLORS = ("#1f77b4", "#ff7f0e")


class ABRun:
    """Two engines on one workload, advanced in lock-step."""

    def __init__(self, config_a: EngineConfig, config_b: EngineConfig, workload: list[WorkloadItem]):
        self._configs, self.workload = (config_a, config_b), list(workload)
        self.records: tuple[list[StepRecord], list[StepRecord]] = ([], [])
        self._engines: tuple[Engine, Engine] | None = (self._replay(0), self._replay(1))  # a bad config fails here

    @property
    def engines(self) -> tuple[Engine, Engine]:
        """Both engines, as far as their records go: rebuilt by replaying the workload after release()."""
        if self._engines is None:
            self._engines = (self._replay(0), self._replay(1))
        return self._engines

    def release(self) -> None:
        """Let go of both engines and their KV pools (a closed tab's comparison); the records stay."""
        self._engines = None

    def _replay(self, side: int) -> Engine:
        config = self._configs[side]
        # load_model caches per process, so two configs of one model share its weights.
        engine = engine_for(config, load_model(config.model, config.device, config.dtype))
        submit(engine, self.workload)
        for _ in self.records[side]:
            engine.step()
        return engine

    @property
    def done(self) -> bool:
        return not any(e.has_unfinished_requests() for e in self.engines)

    def step(self) -> tuple[StepRecord | None, StepRecord | None]:
        """Advance both engines one step; an engine with nothing left idles and gives None.

        An idle engine is not stepped at all: an empty step would still add wall time and
        a step to its run, and its throughput would no longer be its own."""
        out = []
        for engine, records in zip(self.engines, self.records, strict=True):
            record = engine.step() if engine.has_unfinished_requests() else None
            if record is not None:
                records.append(record)
            out.append(record)
        return out[0], out[1]

    def run(self, max_steps: int = MAX_STEPS) -> None:
        """Step until both engines are done (or max_steps steps)."""
        for _ in range(max_steps):
            if self.done:
                return
            self.step()

    def metrics(self) -> tuple[dict, dict]:
        """run_metrics of each side, from its records."""
        return run_metrics(self.records[0]), run_metrics(self.records[1])


# ---- the summary table --------------------------------------------------------------------------

# The rows of the A/B table, from the one metric catalogue.
ROWS = tuple(METRICS[m] for m in (
    "ttft_steps.p50", "ttft_steps.p95", "itl_steps.p50", "itl_steps.p95", "e2e_steps.p50", "e2e_steps.p95",
    "num_steps", "throughput_tokens_per_step", "ttft_ms.p95", "itl_ms.p95", "throughput_tokens_per_s", "mfu",
    "num_preemptions", "num_recomputed_tokens", "num_swapped_blocks", "prefix_cache_hit_rate",
    "peak_kv_cache_usage_perc"))


# Metrics read off the clock: this machine's wall time unless both runs are priced on a deployment.
CLOCKED = frozenset({"ttft_ms.p95", "itl_ms.p95", "throughput_tokens_per_s", "mfu"})
WALL_TIME = "not judged: wall time"  # the verdict on a clocked metric of a run timed on this machine
NO_DIRECTION = "neither: a gauge"  # the verdict on a metric with no better direction (peak KV usage)


def diff_table(metrics_a: dict, metrics_b: dict, measured: bool = False) -> list[dict]:
    """One row per metric: A's and B's value, B minus A, the change in percent and which is better.

    Steps, tokens and pages are the same on every rerun, so any difference is the knobs'. With
    measured (a run timed on this machine's clock, not priced), ms and tokens/s also carry the
    machine's noise, so they are shown but never called better: two step-identical runs once read
    "+39%, better: B". A value is None where it does not exist yet on that side; a metric neither
    side has yet is left out."""
    rows = []
    for row in ROWS:
        a, b = (row.value(m["aggregate"]) for m in (metrics_a, metrics_b))
        if a is None and b is None:  # not measured on either side yet (or, for MFU, not priced)
            continue
        delta = None if a is None or b is None else b - a
        better = None
        if measured and row.id in CLOCKED:
            better = WALL_TIME
        elif delta is not None and row.better:
            better = "no difference" if delta == 0 else "B" if (delta < 0) == (row.better == "lower") else "A"
        elif delta is not None:  # a blank read as a missing value ("None" in the A/B table)
            better = NO_DIRECTION
        change = None if delta is None else 0.0 if delta == 0 else 100 * delta / a if a else None
        rows.append({"metric": row.label, "unit": row.unit, "A": a, "B": b, "delta": delta,
                     "change_pct": change, "better": better})
    return rows


# ---- figures ------------------------------------------------------------------------------------


def latency_ecdf(metrics_a: dict, metrics_b: dict, key: str = "ttft_steps",
                 labels: tuple[str, str] = LABELS) -> go.Figure:
    """Overlaid ECDFs of one latency (ttft_steps, itl_steps, e2e_steps or their _ms twins).

    An ECDF shows every request (the fraction at or below each latency) without the
    binning choices a histogram needs, and two of them overlay without hiding each other."""
    fig = go.Figure()
    for metrics, label, color in zip((metrics_a, metrics_b), labels, COLORS, strict=True):
        values = sorted(metric_values(metrics["requests"], key))
        if values:
            fig.add_trace(go.Scatter(x=values, y=[(i + 1) / len(values) for i in range(len(values))], name=label,
                                     mode="lines", line={"shape": "hv", "color": color}))
    name, unit = key.rsplit("_", 1)
    fig.update_layout(title=f"{name.upper()} distribution", xaxis_title=f"{name.upper()} ({unit})",
                      yaxis_title="fraction of requests" if name != "itl" else "fraction of token gaps",
                      yaxis_range=[0, 1.02])
    return fig


def kv_usage_figure(records_a: list[StepRecord], records_b: list[StepRecord],
                    labels: tuple[str, str] = LABELS) -> go.Figure:
    """KV pool usage after every step, both runs on one step axis."""
    fig = go.Figure()
    for records, label, color in zip((records_a, records_b), labels, COLORS, strict=True):
        fig.add_trace(go.Scatter(x=[r.step for r in records], y=[100 * r.stats.kv_cache_usage_perc for r in records],
                                 name=label, mode="lines", line={"color": color}))
    fig.update_layout(title="KV cache usage", xaxis_title="step", yaxis_title="GPU pages in use (%)",
                      yaxis_range=[0, 102])
    return fig


def throughput_figure(metrics_a: dict, metrics_b: dict, labels: tuple[str, str] = LABELS) -> go.Figure:
    """Generated tokens per step (deterministic) beside tokens per second (this machine's wall time)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per step", "tokens per second"))
    for col, key in enumerate(("throughput_tokens_per_step", "throughput_tokens_per_s"), start=1):
        values = [m["aggregate"][key] for m in (metrics_a, metrics_b)]
        fig.add_trace(go.Bar(x=list(labels), y=values, marker_color=list(COLORS), showlegend=False), row=1, col=col)
    fig.update_layout(title="Throughput")
    return fig
