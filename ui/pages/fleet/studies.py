"""Under the Fleet page's views: the fleet on screen (A) against another (B) on the same load, and one
knob swept. Both run whole fleets to the end, so they hold one of the server's heavy-job turns."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pandas as pd
import streamlit as st

from engine.fleet.config import FLEET_KNOB
from lab.budgets import heavy_job
from lab.fleet.compare import COLUMNS, PANELS, SWEEP_KNOBS, compare, parse_values, sweep, sweep_rows
from lab.fleet.run import FleetRun
from lab.sweep import RATE, figure
from ui.draw import chart, plain
from ui.session import cached_load, session

SUGGESTED = {RATE: "1, 2, 4, 8", "num_replicas": "1, 2, 4, 8", "num_prefill_replicas": "0, 1, 2"}
FORMATS = {m.heading: st.column_config.NumberColumn(format="%.3g") for m in COLUMNS}


def _heavy(text: str, job: Callable[[Callable[[int], None]], object], total: int) -> object | None:
    """Run a job under a heavy-job turn with a progress bar; None (and the error shown) if it fails."""
    bar = st.progress(0.0, text=text)

    def queued(place: int) -> None:
        bar.progress(0.0, text=f"The server is busy with other sweeps and A/B runs: yours is number {place} in line.")

    try:
        with heavy_job(on_wait=queued):
            bar.progress(0.0, text=text)
            return job(lambda done: bar.progress(done / total))
    except ValueError as exc:
        st.error(f"It did not run: {plain(exc)}.")
        return None
    finally:
        bar.empty()


def ab(run: FleetRun) -> None:
    s, fleet = session(), run.fleet_next()
    st.caption("A is the fleet on screen, with the knobs it has at this event; B is the same but for the knobs "
               f"below. Both serve the same requests ({run.load.label()}) from the start to the end, on the same "
               "modeled clock.")
    cols = st.columns(3, vertical_alignment="bottom")
    for col, name in zip(cols, ("router", "num_replicas", "num_prefill_replicas"), strict=True):
        knob, key = FLEET_KNOB[name], f"fleet_ab_{name}"
        if not s.has_widget(key):
            s.set_widget(key, getattr(fleet, name))
        if knob.choices:
            col.selectbox(f"B: {name}", knob.choices, key=key, help=knob.help)
        else:
            col.number_input(f"B: {name}", int(knob.low), int(knob.high), key=key, help=knob.help)
    if st.button("Run A and B to the end", key="fleet_ab_run", type="primary", icon=":material/compare_arrows:"):
        try:
            b = dataclasses.replace(fleet, **{n: s.widget(f"fleet_ab_{n}") for n in
                                                 ("router", "num_replicas", "num_prefill_replicas")})
        except ValueError as exc:
            st.error(f"B cannot run: {plain(exc)}.")
            return
        rows = _heavy("Running A, then B…", lambda progress: compare(run.config, fleet, b, run.load,
                                                                      cached_load, progress), 2)
        if rows is not None:
            s.fleet_ab = rows
    if s.fleet_ab:
        st.dataframe(pd.DataFrame(s.fleet_ab), hide_index=True, key="fleet_ab_table", column_config=FORMATS)
        st.caption(f"Goodput counts requests that met the SLO (TTFT {run.config.slo_ttft_ms} ms, TPOT "
                   f"{run.config.slo_tpot_ms} ms); times are modeled on {run.config.deployment}.")


def _on_sweep_knob() -> None:
    s = session()
    s.set_widget("fleet_sweep_values", SUGGESTED.get(s.widget("fleet_sweep_knob"), "0, 1, 2, 4"))


def sweep_panel(run: FleetRun) -> None:
    s, fleet = session(), run.fleet_next()  # the knobs the fleet has at the event on screen
    if not s.has_widget("fleet_sweep_values"):
        s.set_widget("fleet_sweep_values", SUGGESTED[RATE])
    left, right = st.columns([1, 2], vertical_alignment="bottom")
    knob = left.selectbox("Knob", SWEEP_KNOBS, key="fleet_sweep_knob", on_change=_on_sweep_knob,
                          format_func=lambda k: "offered rate (requests/s)" if k == RATE else k)
    right.text_input("Values, separated by commas", key="fleet_sweep_values", help="Up to 8 values.")
    if st.button("Run the sweep", key="fleet_sweep_run", type="primary", icon=":material/show_chart:"):
        try:
            values = parse_values(knob, s.widget("fleet_sweep_values"), fleet)
        except ValueError as exc:
            st.error(f"The sweep did not run: {plain(exc)}.")
            return
        points = _heavy(f"Running the fleet with {len(values)} values of {knob}…", lambda progress: sweep(
            run.config, fleet, run.load, knob, values, cached_load, progress), len(values))
        if points is not None:
            current = run.load.rate if knob == RATE else getattr(fleet, knob)
            s.fleet_sweep = dict(knob=knob, points=points, current=current)
    if s.fleet_sweep:
        knob, points = s.fleet_sweep["knob"], s.fleet_sweep["points"]
        chart(figure(knob, points, s.fleet_sweep["current"], PANELS), "fleet_sweep")
        st.dataframe(pd.DataFrame(sweep_rows(knob, points)), hide_index=True, key="fleet_sweep_table",
                     column_config=FORMATS)


def studies(run: FleetRun) -> None:
    st.markdown("##### Compare and sweep")
    tabs = st.tabs(["A/B: two fleets", "Sweep a fleet knob"])
    with tabs[0]:
        ab(run)
    with tabs[1]:
        sweep_panel(run)
