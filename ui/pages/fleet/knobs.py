"""The Fleet page's sidebar: the load, the fleet's knobs and each replica's engine knobs, in one form.

The knobs are set together and applied with one click. If only live fleet knobs changed (a router
weight, the decider and its thresholds, the link), the fleet runs on with them from the event on
screen, a branch as in the lab; anything else builds the fleet again from event 0. The widgets
come from the knob tables (engine/fleet/config.py, engine/knobs.py); a bad value is named in
one message and the fleet on screen stays as it was.
"""

from __future__ import annotations

import dataclasses

import streamlit as st

from engine.fleet.config import FLEET_KNOB, FLEET_KNOBS, LIVE_FLEET_KNOBS, FleetConfig
from engine.knobs import KNOB, Knob
from engine.values import spell
from lab.fleet.link import DEFAULTS, ENGINE_KNOBS, FleetScenario, scenario_of
from lab.fleet.run import LOADS, MAX_DURATION_S, FleetLoad
from lab.run import default_config
from ui.draw import literal, plain
from ui.pages.fleet import lesson
from ui.pages.fleet.state import start
from ui.session import exclusive, session
from ui.widgets import presenter
from ui.widgets.knobs import knob_widget

# The knobs shown first; the router's own weights and the disaggregation thresholds go in expanders.
MAIN = ("num_replicas", "router", "num_prefill_replicas", "kv_link", "disagg_decider")
DISAGG = ("replica_gpu_blocks", "replica_presets", "non_cached_tokens", "conditional_disagg_eff_isl_threshold",
          "conditional_disagg_eff_isl_ratio_threshold")


def _key(name: str) -> str:
    return f"fleet_{name}"


def _fleet_widget(knob: Knob) -> None:
    """A fleet knob's input: its row's choices, type and range (a plain input, read on Apply)."""
    key, label = _key(knob.name), knob.name
    if knob.choices:
        st.selectbox(label, knob.choices, key=key, help=knob.help)
    elif knob.type is int:
        st.number_input(f"{label} ({int(knob.low):,} to {int(knob.high):,})", step=1, key=key, help=knob.help)
    elif knob.type is float:
        st.number_input(label, step=0.1, key=key, help=knob.help, format="%g")
    else:  # a free-text row: empty is None
        st.text_input(label, key=key, help=knob.help, placeholder="none")


def _show(scenario: FleetScenario) -> None:
    """Set every input to the fleet on screen (before they are drawn)."""
    s = session()
    for name, value in dataclasses.asdict(scenario.fleet).items():
        s.set_widget(_key(name), "" if value is None and FLEET_KNOB[name].type is str else value)
    config = default_config().with_changes(**scenario.engine)
    for name in ENGINE_KNOBS:
        s.set_widget(_key(name), getattr(config, name))
    for name, value in dataclasses.asdict(scenario.load).items():
        s.set_widget(_key(f"load_{name}"), value)


@exclusive
def _on_apply() -> None:
    s = session()
    fleet = {k.name: s.widget(_key(k.name)) for k in FLEET_KNOBS}
    for name in ("replica_gpu_blocks", "replica_presets"):  # free text: empty is none
        fleet[name] = (fleet[name] or "").strip() or None
    base = default_config()
    engine = {n: s.widget(_key(n)) for n in ENGINE_KNOBS if s.widget(_key(n)) != KNOB[n].default}
    load = {f.name: s.widget(_key(f"load_{f.name}")) for f in dataclasses.fields(FleetLoad)}
    try:
        scenario = FleetScenario(engine, FleetConfig(**fleet), FleetLoad(**load))
        if base.with_changes(**engine) == base.with_changes(**scenario_of(s.fleet).engine) and _branch(scenario):
            return
        start(scenario)
    except ValueError as exc:
        s.flash("error", f"The fleet was not changed: {plain(exc)}")
        return
    s.flash("info", "The fleet starts again at event 0 with these knobs and load.")


def _branch(scenario: FleetScenario) -> bool:
    """If the same fleet on the same load differs only in live knobs, run on with them from the event on
    screen (True): the events after it are dropped, and a lesson's fleet becomes the free fleet."""
    s = session()
    run = s.fleet
    now = run.fleet_next()
    changed = {k: v for k, v in dataclasses.asdict(scenario.fleet).items() if getattr(now, k) != v}
    if scenario.load != run.load or not changed or not set(changed) <= LIVE_FLEET_KNOBS:
        return False
    event = run.cursor + 1
    run.set_knobs(**changed)
    s.fleet_lesson, s.fleet_grades = None, {}  # the lesson's questions are about its own fleet
    said = ", ".join(f"{k} = {spell(v)}" for k, v in changed.items())
    s.flash("info", f"From event {event} on, the fleet runs with {literal(said)}. The events after the one on "
                    "screen were dropped; Back and the slider still show the ones before.")
    return True


@exclusive
def _on_defaults() -> None:
    try:
        start(DEFAULTS)
    except ValueError as exc:
        session().flash("error", f"The default fleet could not start: {plain(exc)}")


def sidebar(scenario: FleetScenario) -> None:
    _show(scenario)
    with st.sidebar:
        st.markdown("### :material/hub: A fleet of engines")
        lesson.chooser()
        with st.form("fleet_knobs", border=False):
            st.header("Load", divider="gray")
            st.selectbox("trace", LOADS, key=_key("load_trace"), help="mooncake-conv / mooncake-synth: windows of "
                         "the Mooncake FAST'25 traces (Moonshot AI, Apache-2.0), whose prompts share prefix blocks; "
                         "shared-prefix: sessions that each start with one of 4 system prompts, drawn at the rate")
            st.number_input(f"duration_s (up to {MAX_DURATION_S:g})", 0.5, MAX_DURATION_S, step=1.0,
                            key=_key("load_duration_s"), help="seconds of load")
            st.number_input("start_s", 0.0, 3600.0, step=10.0, key=_key("load_start_s"),
                            help="where in the trace the window starts")
            st.number_input("rate", 0.1, 100.0, step=0.5, key=_key("load_rate"), placeholder="the trace's own",
                            help="requests/s: rescale the trace to it (empty: its own timing)")
            st.header("Fleet", divider="gray")
            for name in MAIN:
                _fleet_widget(FLEET_KNOB[name])
            with st.expander("The router's weights"):
                for knob in FLEET_KNOBS:
                    if knob.name not in (*MAIN, *DISAGG):
                        _fleet_widget(knob)
            with st.expander("Replicas that differ, and disaggregation"):
                for name in DISAGG:
                    _fleet_widget(FLEET_KNOB[name])
            with st.expander("Each replica's engine"):
                for name in ENGINE_KNOBS:
                    knob_widget(KNOB[name], key=_key(name))
            st.form_submit_button("Apply", type="primary", on_click=_on_apply, width="stretch",
                                  icon=":material/check:", help="A router weight, the decider and its thresholds, "
                                  "or the link: the fleet runs on with them from the event on screen. Anything "
                                  "else: the fleet starts again at event 0.")
        at_defaults = dataclasses.replace(scenario, event=-1) == DEFAULTS
        st.button("Default fleet", key="fleet_defaults", on_click=_on_defaults, width="stretch",
                  icon=":material/settings_backup_restore:", disabled=at_defaults)
        presenter.toggle()
