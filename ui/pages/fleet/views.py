"""The Fleet page's views of the event on screen: the replicas side by side, the router's decision
with every candidate's scores, a replica opened as the lab page draws one engine, the fleet
timeline and the metrics so far. Every number is read from the FleetRecords."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.fleet.records import FleetRecord, RoutingDecision
from lab.charts import blocks, queues
from lab.charts.fleet import replica_label, replicas_figure, timeline_figure
from lab.fleet.run import FleetRun
from lab.fleet.views import decision_rows, describe, journeys, on_link
from lab.markup import event_line
from ui.draw import chart
from ui.pages.fleet.studies import studies
from ui.session import session

RECENT_EVENTS = 12  # the event list under the views: the events just before the one on screen


def header(run: FleetRun, record: FleetRecord) -> None:
    st.markdown(f"### Event {record.index} :gray[of {len(run.records) - 1}]")
    st.markdown(describe(record))


def _by_replica(d: RoutingDecision) -> pd.DataFrame:
    """The candidates as columns (a fleet has few replicas, a router reads many things), as text."""
    rows = decision_rows(d)
    return pd.DataFrame({f"replica {row.pop('replica')}": {k: v if isinstance(v, str) else f"{v:.6g}"
                                                           for k, v in row.items()} for row in rows})


def decision(record: FleetRecord) -> None:
    """Why the arrival went where it did: each candidate's inputs, weighted terms and total."""
    st.markdown("##### The router's decision")
    if record.kind != "route":
        st.caption("This event is not an arrival: step to one (its heading says *arrives*) to see the router "
                   "weigh the replicas.")
        return
    decided = [("prefill", record.prefill)] if record.prefill else []
    for role, d in [*decided, ("decode" if record.prefill else "", record.decision)]:
        st.markdown(f"**{d.router}**{f' ({role} replicas)' if role else ''}: {d.why}"
                    + (f" *{d.tie}*" if d.tie else ""))
        st.dataframe(_by_replica(d), key=f"decision_{role or 'all'}")
        best = "lowest total wins (a cost)" if d.better == "lower" else "highest total wins (a score)"
        st.caption(f"Each *read:* column is what the router knew of the replica; each *term:* its weighted part "
                   f"of the total; the {best}.")


def replica_view(run: FleetRun, record: FleetRecord) -> None:
    """One replica as the lab page draws an engine: its queues, its block map and its last step's decisions."""
    options = [s.replica for s in record.replicas]
    chosen = st.segmented_control("Open a replica", options, key="fleet_open", format_func=lambda r: f"replica {r}",
                                  help="Its own scheduler's view at this moment: the queues and the KV block map "
                                       "as of its latest step.")
    if chosen is None or chosen not in options:
        return
    steps = run.replica_steps(chosen)
    state = record.replicas[chosen]
    if not steps:
        st.info(f"{replica_label(state)} has not run a step yet ({state.waiting} waiting).")
        return
    last = steps[-1]
    st.markdown(f"##### {replica_label(state)}, after its step {last.step}")
    ends = last.modeled.clock_ms
    st.caption(f"The fleet is at {record.clock_ms:,.1f} ms. This replica's step {last.step} "
               + (f"is under way: the engine has computed it, and on the modeled clock it ends at {ends:,.1f} ms."
                  if ends > record.clock_ms else f"ended at {ends:,.1f} ms.")
               + f" Requests routed to it since it began wait for its next step ({state.waiting} waiting now).")
    left, right = st.columns(2, gap="medium")
    with left:
        chart(queues.figure(steps), "fleet_replica_queues")
    with right:
        chart(blocks.figure(last, steps[-2] if len(steps) > 1 else None), "fleet_replica_blocks")
    lines = [event_line(e) for e in last.events] or ["No decisions: every running request decoded one more token."]
    st.markdown("".join(f"<div class='lab-event'>{line}</div>" for line in lines), unsafe_allow_html=True)


def recent_events(run: FleetRun) -> None:
    start = max(0, run.cursor - RECENT_EVENTS + 1)
    st.markdown("##### Events so far")
    st.markdown("\n".join(f"{r.index}. {describe(r)}" for r in run.records[start:run.cursor + 1]))


def metrics(run: FleetRun) -> None:
    """The serving benchmark's numbers, after the latest event run."""
    agg = run.metrics()["aggregate"]

    def p(name: str, q: str = "p50") -> str:
        value = (agg.get(name) or {}).get(q)
        return "–" if value is None else f"{value:,.0f} ms"
    cols = st.columns(5)
    cols[0].metric("finished of routed", f"{agg['num_requests_finished']:,} of {len(run.live.placement):,}")
    cols[1].metric("TTFT p50", p("ttft_ms"))
    cols[2].metric("TTFT p90", p("ttft_ms", "p90"))
    cols[3].metric("ITL p90", p("itl_ms", "p90"))
    cols[4].metric("prefix reuse", f"{agg['prefix_reuse_ratio']:.0%}")
    st.caption(f"After event {len(run.records) - 1}, the latest run; times are modeled on "
               f"{run.config.deployment} (engine/hardware.py), not measured here.")


def views(run: FleetRun) -> None:
    """The event on screen, then (off the projector) the metrics so far and the A/B and sweep tools."""
    record = run.record
    if record is None:
        st.info(f"{run.num_requests:,} requests will arrive ({run.load.label()}). **Step** routes the first: "
                "each event is an arrival routed, one replica's scheduler step, or a KV copy between replicas.")
    else:
        header(run, record)
        trips = journeys(run.records[: run.cursor + 1])  # read once, for the strips' copies and the timeline
        chart(replicas_figure(record, on_link(trips.values(), record.clock_ms)), "fleet_replicas")
        left, right = st.columns([1, 1], gap="medium")
        with left:
            decision(record)
        with right:
            recent_events(run)
        replica_view(run, record)
        st.markdown("##### Where each request ran")
        chart(timeline_figure(trips, record.clock_ms), "fleet_timeline")
    if session().presenting:
        return
    if record is not None:
        metrics(run)
    studies(run)
