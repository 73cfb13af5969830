"""The Fleet page: many real engines behind a router, stepped one fleet event at a time.

The step bar works as the lab page's does, over fleet events: Step runs the next one
(an arrival routed, one replica's step, a KV copy), Back and the slider look at past
ones, Play steps on its own, and the keys are the same (→, ←, Space).
"""

from __future__ import annotations

import dataclasses

import streamlit as st

from lab.fleet.link import scenario_of
from ui.draw import CSS, flashes
from ui.pages.fleet import knobs, lesson
from ui.pages.fleet.state import fleet_run, sync_link
from ui.pages.fleet.views import views
from ui.session import exclusive, session
from ui.widgets import keys, presenter
from ui.widgets.scrubber import scrubber

PLAY_EVENTS_PER_S = 4.0


@exclusive
def _on_step(n: int | None = None) -> None:
    s = session()
    if s.fleet.done:
        return
    allowed = lesson.hold(s.fleet, n or s.widget("fleet_run_n"))
    if allowed:
        s.fleet.step(allowed)
    else:
        s.flash("info", "The lesson asks a question about the next event: answer it beside the views first.")


@exclusive
def _on_back() -> None:
    s = session()
    s.fleet_playing = False
    s.fleet.back()


def _set_playing(playing: bool) -> None:
    """Play or Pause, as pressed: not a toggle, since Streamlit can deliver a click twice when it lands
    while auto-play redraws, and a second Pause must leave the fleet paused (ui/widgets/step_bar.py)."""
    s = session()
    s.fleet_playing = playing and not s.fleet.done


def _on_space() -> None:
    """Space toggles: each press arrives once (ui/widgets/keys.py counts them)."""
    _set_playing(not session().fleet_playing)


def step_bar() -> None:
    """The lab's step bar over fleet events. Step, Back and Run keep the lab's keys, so the page counts
    their clicks as it counts key presses (ui/widgets/keys.py): fast clicks are never folded together."""
    s = session()
    run, playing = s.fleet, s.fleet_playing
    cols = st.container(key="step_bar").columns([1, 1, 1, 0.7, 1, 1] + [0.9] * s.presenting,
                                                vertical_alignment="bottom", gap="xsmall")
    cols[0].button("Back", icon=":material/skip_previous:", key="back", on_click=_on_back,
                   disabled=run.cursor < 0, width="stretch", help="Show the previous fleet event. Key: ←")
    cols[1].button("Step", icon=":material/skip_next:", key="step", on_click=_on_step, args=(1,),
                   type="primary", disabled=run.done or playing, width="stretch",
                   help="The next fleet event: an arrival routed, one replica's scheduler step, or a KV copy. Key: →")
    cols[2].button("Run", icon=":material/fast_forward:", key="run_steps", on_click=_on_step,
                   disabled=run.done or playing, width="stretch", help="Run the number of events on the right.")
    cols[3].number_input("events", 1, 5000, 25, key="fleet_run_n", label_visibility="collapsed")
    if playing:  # two buttons under two keys: a Pause click delivered late can never press Play
        cols[4].button("Pause", icon=":material/pause:", key="fleet_pause", on_click=_set_playing, args=(False,),
                       width="stretch", help="Stop at the event shown. Key: Space")
    else:
        cols[4].button("Play", icon=":material/play_arrow:", key="fleet_play", on_click=_set_playing, args=(True,),
                       disabled=run.done, width="stretch",
                       help=f"Step {PLAY_EVENTS_PER_S:g} events a second. Key: Space")
    keys.listen({"step": lambda: _on_step(1), "back": _on_back, "play": _on_space, "run": _on_step})
    with cols[5].popover("Keys", icon=":material/keyboard:", width="stretch", help="Keyboard shortcuts"):
        keys.keys_help()
    if s.presenting:
        with cols[6]:
            presenter.exit_button()


def _live() -> None:
    """The part auto-play reruns: an event when playing, the slider, the address bar, the views."""
    s = session()
    run = s.fleet
    if _sidebar_state() != s.fleet_sidebar_for:
        st.rerun()  # the slider crossed a live change: the sidebar's knobs must show this event's
    if s.fleet_playing:
        if run.done or not lesson.hold(run, 1):
            s.fleet_playing = False
            st.rerun()
        with s.lock:
            run.step(1)
    scrubber("fleet_scrubber", lambda: len(s.fleet.records), run.cursor, lambda i: s.fleet.seek(i), "event",
             s.fleet_playing, "Look at any event run so far; nothing is re-run.")
    sync_link(run)
    open_lesson = lesson.open_lesson()
    if open_lesson is None:
        views(run)
        return
    main, side = st.columns([0.66, 0.34], gap="medium")
    with main:
        views(run)
    with side:
        lesson.panel(open_lesson, run)


def page() -> None:
    s = session()
    try:
        run = fleet_run()
    except ValueError as exc:
        st.error(f"The fleet could not start: {exc}")
        st.stop()
    if not s.presenting:
        # The knobs the fleet has at the event on screen (a live change is among them from its event on).
        knobs.sidebar(dataclasses.replace(scenario_of(run), fleet=run.fleet_next()))
    s.fleet_sidebar_for = _sidebar_state()
    presenter.apply()
    st.markdown(CSS, unsafe_allow_html=True)
    st.fragment(_stage)()


def _sidebar_state() -> tuple:
    """What the sidebar (and the presenter's page style) draws: the fleet's knobs at the event on screen,
    its load, the lesson, presenter mode. A click in the stage that changes any of it redraws the page."""
    s = session()
    run = s.fleet
    return s.presenting, s.fleet_lesson, run.config, run.load, run.fleet_next()


def _stage() -> None:
    """Right of the sidebar, rerun alone by a click of the step bar (the sidebar's form is not redrawn)."""
    s = session()
    if _sidebar_state() != s.fleet_sidebar_for:
        st.rerun()
    step_bar()
    flashes()
    st.fragment(_live, run_every=1 / PLAY_EVENTS_PER_S if s.fleet_playing else None)()
