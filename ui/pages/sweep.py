"""The sweep page: pick a knob, some values and a workload, run the workload once per value, compare.

It reads the lab's current knobs (and its workload, unless a preset is picked here) and never
changes them: each value
runs on a fresh engine (lab.sweep), and the result stays on screen until the next
sweep, so a typo in the values costs nothing but an error message.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.knobs import SWEEP_KNOBS
from engine.workload import WorkloadItem, WorkloadSource
from lab.budgets import heavy_job
from lab.sweep import (
    COLUMNS,
    LOAD_PANELS,
    MAX_STEPS,
    PANELS,
    RATE,
    RATE_VALUES,
    figure,
    parse_values,
    run_sweep,
    table,
)
from ui.draw import CSS, chart, plain
from ui.session import session
from ui.widgets import presenter
from ui.widgets.workload import page_workload, page_workload_box


def _suggested(knob: str) -> str:
    return RATE_VALUES if knob == RATE else SWEEP_KNOBS[knob]


def _on_knob() -> None:
    session().set_widget("sweep_values", _suggested(session().widget("sweep_knob")))


def _run(label: str, workload: WorkloadSource | list[WorkloadItem]) -> None:
    """Run the sweep in the page (not a callback), so its progress bar shows while it runs."""
    s = session()
    knob = s.widget("sweep_knob")
    base = s.run.config_next()
    try:
        values = parse_values(knob, s.widget("sweep_values"), base)
    except ValueError as exc:
        st.error(f"The sweep did not run: {plain(exc)}.")
        return
    bar = st.progress(0.0, text=f"Running the workload with {len(values)} values of {knob}…")

    def queued(place: int) -> None:
        bar.progress(0.0, text=f"The server is busy with other sweeps and A/B runs: yours is number {place} in "
                               "line and starts when a turn frees up.")

    try:
        with heavy_job(on_wait=queued):
            bar.progress(0.0, text=f"Running the workload with {len(values)} values of {knob}…")
            points = run_sweep(base, workload, knob, values, progress=lambda done: bar.progress(done / len(values)))
    except ValueError as exc:  # e.g. the lab's model cannot be loaded
        st.error(f"The sweep did not run: {plain(exc)}.")
        return
    finally:
        bar.empty()
    load = workload.load if isinstance(workload, WorkloadSource) else None
    current = load.rate if knob == RATE else getattr(base, knob)
    requests = len(workload.items() if isinstance(workload, WorkloadSource) else workload)
    s.sweep = dict(knob=knob, points=points, current=current, requests=requests, workload=label,
                   panels=LOAD_PANELS if load is not None else PANELS)


def results(sweep: dict) -> None:
    knob, points = sweep["knob"], sweep["points"]
    st.markdown(f"##### {knob}: {len(points)} runs of {sweep['workload']} ({sweep['requests']} requests)")
    unfinished = [str(p.value) for p in points if not p.finished]
    if unfinished:
        st.warning(f"Not finished after {MAX_STEPS} steps: {knob} = {', '.join(unfinished)}. Their numbers "
                   "cover only the steps run.")
    priced = points[0].metrics["aggregate"]["mfu"] is not None
    st.caption(f"The lab's current value is **{sweep['current']}** (shaded where it was swept). Latencies in "
               "engine steps are the same on every machine; milliseconds and tokens/s are "
               + ("modeled on the deployment." if priced else "this machine's wall time."))
    chart(figure(knob, points, sweep["current"], sweep["panels"]), "sweep")
    formats = {m.heading: st.column_config.NumberColumn(format="%.3g") for m in COLUMNS}
    st.dataframe(pd.DataFrame(table(knob, points)), hide_index=True, key="sweep_table", column_config=formats)


def page() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    presenter.apply()
    st.markdown("## Sweep: one knob, many values")
    st.markdown("The lab's workload runs to the end once for each value, with every other knob as the lab has it. "
                "Where A/B shows *how* two configs differ step by step, a sweep shows *which way* the metrics move "
                "as one knob moves. Pick the workload below: a burst or long prompts make the limits bite.")
    s = session()
    try:
        s.run.config_next()
    except ValueError as exc:  # the lab's model cannot be loaded: there is nothing to sweep
        st.error(f"The lab could not start its engine: {plain(exc)}")
        return
    page_workload_box("sweep_workload")
    label, workload = page_workload("sweep_workload")
    in_time = isinstance(workload, WorkloadSource) and workload.load is not None
    knobs = ([RATE] if in_time else []) + list(SWEEP_KNOBS)  # under load, its rate first
    if s.widget("sweep_knob") not in knobs:
        s.set_widget("sweep_knob", knobs[0])
        s.set_widget("sweep_values", _suggested(knobs[0]))
    if not s.has_widget("sweep_values"):
        s.set_widget("sweep_values", _suggested(s.widget("sweep_knob")))
    left, middle, right = st.columns([1.2, 2, 0.8], vertical_alignment="bottom")
    left.selectbox("Knob", knobs, key="sweep_knob", on_change=_on_knob,
                   format_func=lambda k: "offered rate (requests/s)" if k == RATE else k)
    middle.text_input("Values, separated by commas", key="sweep_values",
                      help="Numbers, true/false or choices as the knob takes them; up to 8 values.")
    if right.button("Run the sweep", type="primary", key="sweep_run", icon=":material/play_arrow:", width="stretch"):
        _run(label, workload)
    if s.sweep is not None:
        results(s.sweep)
