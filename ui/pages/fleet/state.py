"""The Fleet page's run and its link: the session's FleetRun, built from a scenario, and the address
bar kept equal to it (lab/fleet/link.py), so a copied link reopens the same fleet at the same event."""

from __future__ import annotations

import streamlit as st

from lab.budgets import FLEET_EVENTS
from lab.fleet.link import DEFAULTS, EVENT_PARAM, FleetScenario, decode, encode, scenario_of
from lab.fleet.run import FleetRun
from lab.run import default_config
from ui.draw import literal, plain
from ui.session import cached_load, exclusive, fleet_lessons, session
from ui.widgets import presenter

LESSON_PARAM = "lesson"  # ?lesson=13_where_a_request_lands&event=18: a fleet lesson at an event


def start(scenario: FleetScenario) -> FleetRun:
    """Build the scenario's fleet, run its script of live changes and then to its event; it replaces the
    session's only if it builds (ValueError, e.g. a budget, leaves the fleet on screen as it was)."""
    run = FleetRun(default_config().with_changes(**scenario.engine), scenario.fleet, scenario.load, cached_load)
    run.follow(scenario.changes)
    event = min(scenario.event, FLEET_EVENTS - 1)
    run.step(max(0, event - run.cursor))
    run.seek(event)  # a link may look at an event before its last change
    s = session()
    s.fleet, s.fleet_playing = run, False
    s.fleet_lesson, s.fleet_grades = None, {}  # a lesson's questions are about its own fleet
    return run


def fleet_run() -> FleetRun:
    """The session's fleet, built from the link the page was opened with (or the defaults) on first use."""
    s = session()
    if s.fleet is None:
        _open_link()
    if s.fleet is None:
        start(DEFAULTS)
    return s.fleet


@exclusive
def _open_link() -> None:
    """Once per session: the fleet a link names. Bad parameters keep their defaults and are listed in
    one warning; a fleet that cannot be built (a budget) falls back to the defaults, saying why."""
    s = session()
    if s.fleet_link_opened:
        return
    s.fleet_link_opened = True
    params = st.query_params.to_dict()
    if params.pop(presenter.QUERY_PARAM, None) in ("1", "true", "on"):
        s.presenting = True
    if not params:
        return
    lesson_id = params.pop(LESSON_PARAM, None)
    if lesson_id is not None:
        _open_lesson_link(lesson_id, params)
        return
    scenario, warnings = decode(params, DEFAULTS, default_config())
    try:
        run = start(scenario)
    except ValueError as exc:
        s.flash("error", f"The link's fleet could not start: {plain(exc)}. The page starts with the default fleet.")
        return
    if scenario.event > run.cursor:
        warnings.append(f"event={scenario.event}: the fleet has {len(run.records)} events; showing the last")
    if warnings:
        s.flash("warning", "Parts of this link could not be used, so they kept their defaults:\n\n"
                + "\n".join(f"- {literal(w)}" for w in warnings))


def _open_lesson_link(lesson_id: str, params: dict) -> None:
    """A lesson's link: its fleet at the event shown (the lesson's knobs are its own, so a link names none)."""
    s = session()
    lesson = fleet_lessons().get(lesson_id)
    if lesson is None:
        s.flash("warning", f"This link names no fleet lesson ({literal(lesson_id[:60])}): the default fleet opens.")
        return
    scenario, warnings = decode({k: v for k, v in params.items() if k == EVENT_PARAM}, lesson.scenario,
                                default_config())  # the lesson's own fleet, at the link's event
    start(scenario)
    s.fleet_lesson = lesson_id
    ignored = [k for k in params if k != EVENT_PARAM]
    if warnings or ignored:
        s.flash("warning", "Parts of this link could not be used: "
                + "; ".join(literal(w) for w in [*warnings, *(f"{k}: a lesson's fleet has its own knobs"
                                                             for k in ignored)]))


def sync_link(run: FleetRun) -> None:
    """The address bar follows every event, knob and load change; in a lesson, the lesson and the event."""
    s = session()
    params = {LESSON_PARAM: s.fleet_lesson, **({EVENT_PARAM: str(run.cursor)} if run.cursor >= 0 else {})} \
        if s.fleet_lesson else encode(scenario_of(run), DEFAULTS)
    if s.presenting:
        params[presenter.QUERY_PARAM] = "1"
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
