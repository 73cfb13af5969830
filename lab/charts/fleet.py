"""The Fleet page's figures: the replicas side by side, and the fleet timeline.

On this page a hue says which replica (REPLICA_COLORS), as on the lab page it says which
request; a replica opened on its own is drawn with the lab page's views and colours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from engine.fleet.records import FleetRecord, ReplicaState
from lab.charts import fast
from lab.charts.style import house_style, layout
from lab.charts.window import MAX_ROWS
from lab.fleet.views import Journey
from lab.palette import CACHED_FREE, FREE, OKABE_ITO, TOL_MUTED

REPLICA_COLORS = TOL_MUTED + OKABE_ITO
LINK = "#9A9A9A"  # a KV cache on the link between replicas
USED = "#4A4A4A"


def replica_color(replica: int) -> str:
    return REPLICA_COLORS[replica % len(REPLICA_COLORS)]


def replica_label(state: ReplicaState) -> str:
    return f"replica {state.replica}" + ("" if state.role == "all" else f" ({state.role})")


MAX_ARROWS = 6  # KV copies drawn at once (the axis title counts them all)


def replicas_figure(record: FleetRecord, crossing: Sequence[Journey] = ()) -> go.Figure:
    """One strip per replica: its KV pool (in use, cached-free, free) and its queues, after the event.
    The replica the event touched is marked ◀. The counts sit under each name, so a phone shows them too.
    Each KV cache `crossing` the link is an arrow from its prefill replica's strip to its decode replica's,
    and named in the axis title with its bytes and time on the link."""
    states = record.replicas
    labels = [f"<span style='color:{replica_color(s.replica)}'>■</span> {replica_label(s)}"
              f"{' ◀' if s.replica == record.replica else ''}<br>{s.waiting} waiting · {s.running} running · "
              f"{s.in_flight} in flight" for s in states]
    parts = (("in use", USED, lambda s: s.kv_used), ("cached, free", CACHED_FREE, lambda s: s.kv_cached),
             ("free", FREE, lambda s: s.num_gpu_blocks - s.kv_used - s.kv_cached))
    bars = [fast.Bar(y=labels, x=[count(s) for s in states], name=f"KV pages {name}", orientation="h",
                     marker=dict(color=color, line=dict(color="#FFFFFF", width=1)),
                     hovertemplate=f"%{{x}} pages {name}<extra></extra>") for name, color, count in parts]
    pages = max(s.num_gpu_blocks for s in states)
    drawn = list(crossing)[:MAX_ARROWS]
    arrows = [dict(x=pages * (1.04 + 0.07 * k), y=labels[j.replica], ax=pages * (1.04 + 0.07 * k),
                   ay=labels[j.prefill_replica], axref="x", ayref="y", text=j.request_id, showarrow=True,
                   arrowhead=3, arrowwidth=2, arrowcolor=LINK, xanchor="left", font=dict(size=11),
                   hovertext=link_text(j)) for k, j in enumerate(drawn)]
    title = "KV pages" + ("" if not crossing else " · on the link: " + "; ".join(
        link_text(j) for j in crossing[:2]) + (f"; {len(crossing) - 2} more" if len(crossing) > 2 else ""))
    xaxis = dict(title=dict(text=title), **({"range": [0, pages * (1.06 + 0.07 * len(drawn))]} if drawn else {}))
    return fast.Figure(data=bars, layout={**house_style("fleet_replicas", 90 + 46 * len(states)), "barmode": "stack",
                                          "bargap": 0.3, "xaxis": xaxis, "yaxis": dict(autorange="reversed"),
                                          **({"annotations": arrows} if arrows else {})})


def link_text(j: Journey) -> str:
    span = "" if j.transfer_end_ms is None else f", {j.transfer_end_ms - j.transfer_start_ms:,.1f} ms on the link"
    return f"{j.request_id} {j.prefill_replica}→{j.replica}: {j.kv_bytes / 2**20:,.0f} MiB{span}"


def _spans(j: Journey, now_ms: float) -> list[tuple[int | None, float, float]]:
    """(replica or None for the link, start, end) for each part of a request's journey so far."""
    end = j.finished_ms if j.finished_ms is not None else now_ms
    if j.prefill_replica is None:
        return [(j.replica, j.arrival_ms, end)]
    if j.transfer_start_ms is None:
        return [(j.prefill_replica, j.arrival_ms, end)]
    link_end = j.transfer_end_ms if j.transfer_end_ms is not None else now_ms
    out = [(j.prefill_replica, j.arrival_ms, j.transfer_start_ms), (None, j.transfer_start_ms, link_end)]
    if j.transfer_end_ms is not None:
        out.append((j.replica, j.transfer_end_ms, end))
    return out


def timeline_figure(trips: Mapping[str, Journey], now_ms: float) -> go.Figure:
    """Each request (the latest MAX_ROWS of `trips`, lab/fleet/views.py's journeys) as a bar from its
    arrival to its finish at now_ms, coloured by the replica it ran on; a disaggregated one in two
    colours, with its KV copy on the link in grey between."""
    shown = list(trips.values())[-MAX_ROWS:]
    lines: dict[int | None, tuple[list, list]] = {}
    for j in shown:
        for replica, start, end in _spans(j, now_ms):
            xs, ys = lines.setdefault(replica, ([], []))
            xs += [start, max(end, start), None]
            ys += [j.request_id, j.request_id, None]
    traces = []
    for replica in sorted(lines, key=lambda r: -1 if r is None else r):
        xs, ys = lines[replica]
        name, color = ("KV on the link", LINK) if replica is None else (f"replica {replica}", replica_color(replica))
        traces.append(fast.Scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=color, width=7),
                                   hovertemplate=f"%{{y}} · {name} · %{{x:,.1f}} ms<extra></extra>"))
    now = dict(type="line", x0=now_ms, x1=now_ms, xref="x", y0=0, y1=1, yref="y domain",
               line=dict(color="#262730", width=1, dash="dot"))
    return fast.Figure(data=traces, layout={
        **house_style("fleet_timeline", 120 + 14 * len(shown)), "shapes": [now],
        "xaxis": dict(title=dict(text="fleet clock (modeled ms)")),
        "yaxis": dict(autorange="reversed", type="category", categoryorder="array",
                      categoryarray=[j.request_id for j in shown], showticklabels=len(shown) <= 40)})


def sweep_lines(results: dict[str, dict[float, dict]], metric: str, label: str) -> go.Figure:
    """A fleet lesson's sweep: one line per fleet, the metric against the offered rate."""
    fig = go.Figure()
    for i, (name, by_rate) in enumerate(results.items()):
        rates = sorted(by_rate)
        fig.add_scatter(x=rates, y=[by_rate[r][metric] for r in rates], name=name, mode="lines+markers",
                        line=dict(color=REPLICA_COLORS[i * 3 % len(REPLICA_COLORS)]),
                        hovertemplate=f"{name}<br>%{{x:g}} requests/s: %{{y:.3g}}<extra></extra>")
    return layout(fig, f"fleet_sweep_{metric}", 300, xaxis=dict(title="offered rate (requests/s)", type="log"),
                  yaxis=dict(title=label, rangemode="tozero"))
