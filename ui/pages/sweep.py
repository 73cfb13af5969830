"""The sweep page: pick a knob and some values, run the lab's workload once per value, compare.

It reads the lab's current knobs and workload and never changes them: each value
runs on a fresh engine (lab.sweep), and the result stays on screen until the next
sweep, so a typo in the values costs nothing but an error message.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lab.sweep import COLUMNS, MAX_STEPS, SUGGESTED, figure, parse_values, run_sweep, table
from ui.draw import CSS, chart
from ui.session import session
from ui.widgets import presenter


def _on_knob() -> None:
    session().set_widget("sweep_values", SUGGESTED[session().widget("sweep_knob")])


def _run() -> None:
    """Run the sweep in the page (not a callback), so its progress bar shows while it runs."""
    s = session()
    knob = s.widget("sweep_knob")
    base = s.run.config_next()
    try:
        values = parse_values(knob, s.widget("sweep_values"), base)
    except ValueError as exc:
        st.error(f"The sweep did not run: {exc}.")
        return
    items = s.run.items()
    bar = st.progress(0.0, text=f"Running the workload with {len(values)} values of {knob}…")
    try:
        points = run_sweep(base, items, knob, values, progress=lambda done: bar.progress(done / len(values)))
    except ValueError as exc:  # e.g. the lab's model cannot be loaded
        st.error(f"The sweep did not run: {exc}.")
        return
    finally:
        bar.empty()
    current = getattr(base, knob)
    s.sweep = dict(knob=knob, points=points, current=current, requests=len(items), workload=s.source.label)


def results(sweep: dict) -> None:
    knob, points = sweep["knob"], sweep["points"]
    st.markdown(f"##### {knob}: {len(points)} runs of {sweep['workload']} ({sweep['requests']} requests)")
    unfinished = [str(p.value) for p in points if not p.finished]
    if unfinished:
        st.warning(f"Not finished after {MAX_STEPS} steps: {knob} = {', '.join(unfinished)}. Their numbers "
                   "cover only the steps run.")
    st.caption(f"The lab's current value is **{sweep['current']}** (shaded where it was swept). Latencies are in "
               "engine steps, the same on every machine; tokens/s and milliseconds are this machine's.")
    chart(figure(knob, points, sweep["current"]), "sweep")
    formats = {m.heading: st.column_config.NumberColumn(format="%.3g") for m in COLUMNS}
    st.dataframe(pd.DataFrame(table(knob, points)), hide_index=True, key="sweep_table", column_config=formats)


def page() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    presenter.apply()
    st.markdown("## Sweep: one knob, many values")
    st.markdown("The lab's workload runs to the end once for each value, with every other knob as the lab has it. "
                "Where A/B shows *how* two configs differ step by step, a sweep shows *which way* the metrics move "
                "as one knob moves. Choose the workload in the lab's sidebar: a burst or long prompts make the "
                "limits bite.")
    s = session()
    try:
        s.run.config_next()
    except ValueError as exc:  # the lab's model cannot be loaded: there is nothing to sweep
        st.error(f"The lab could not start its engine: {exc}")
        return
    if not s.has_widget("sweep_knob"):
        s.set_widget("sweep_knob", next(iter(SUGGESTED)))
    if not s.has_widget("sweep_values"):
        s.set_widget("sweep_values", SUGGESTED[s.widget("sweep_knob")])
    left, middle, right = st.columns([1.2, 2, 0.8], vertical_alignment="bottom")
    left.selectbox("Knob", list(SUGGESTED), key="sweep_knob", on_change=_on_knob)
    middle.text_input("Values, separated by commas", key="sweep_values",
                      help="Numbers, true/false or choices as the knob takes them; up to 8 values.")
    if right.button("Run the sweep", type="primary", key="sweep_run", icon=":material/play_arrow:", width="stretch"):
        _run()
    if s.sweep is not None:
        results(s.sweep)
