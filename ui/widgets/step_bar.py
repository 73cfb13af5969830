"""The step bar above the views: Back, Step, Run N, Play/Pause with its speed, and Reset.

A page may hold the run short of a step (a lesson does, before each question):
``Hold`` maps the steps asked for to the steps allowed now.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import streamlit as st

from lab.run import History
from ui.session import exclusive, session
from ui.widgets import keys, presenter

Hold = Callable[[History, int], int]


@exclusive
def _on_step(n: int | None = None, hold: Hold | None = None) -> None:
    s = session()
    if s.playing or s.run.done:  # the button is disabled then; a key press lands here too
        return
    n = n or s.widget("run_n")
    if hold is not None:
        n = hold(s.run, n)
    if n:  # Run.step(0) would still branch a past step
        s.run.step(n)


@exclusive
def _on_back() -> None:
    s = session()
    if not s.playing and s.run.cursor >= 0:
        s.run.back()


@exclusive
def _on_reset() -> None:
    s = session()
    s.run.reset(s.run.config_next(), s.run.items())
    s.playing = False
    s.flash("info", "Reset: back to step 0 with the knobs and workload shown.")


def _set_playing(playing: bool) -> None:
    """Play or Pause, as pressed. Not a toggle: Streamlit can deliver one click twice when it lands
    while auto-play is redrawing (1 Pause in 6 came back as Pause then Play), and a second Pause
    must leave the run paused."""
    s = session()
    if playing and not s.playing and not s.run.done:
        s.play_meter.restart()
        s.playing = True
    elif not playing:
        s.playing = False


def _on_space() -> None:
    """Space toggles: each press arrives once (ui/widgets/keys.py counts them)."""
    _set_playing(not session().playing)


def step_bar(hold: Hold | None = None) -> None:
    """The buttons, in one row; `hold` may cut a Step or Run short."""
    s = session()
    run, playing = s.run, s.playing
    done = run.done
    # A small gap leaves the labels room on a laptop beside the sidebar; narrower still, the
    # buttons show their icons only (ui/draw.py's CSS): the label is hidden from sight but still
    # names the button for a screen reader, and the tooltip stays. On a phone, where Streamlit
    # would stack the eight one under another, they wrap two to a row, labels shown.
    widths = [1.1, 1.05, 1, 0.7, 1.05, 1.2, 1.1, 0.9] + [0.9] * s.presenting
    cols = st.container(key="step_bar").columns(widths, vertical_alignment="bottom", gap="xsmall")
    cols[0].button("Back", icon=":material/skip_previous:", key="back", on_click=_on_back,
                   disabled=run.cursor < 0 or playing, width="stretch",
                   help="Show the previous step (nothing is re-run). Key: ←")
    cols[1].button("Step", icon=":material/skip_next:", key="step", on_click=_on_step, args=(1, hold), type="primary",
                   disabled=done or playing, width="stretch",
                   help="Run one scheduler step. From a past step, the run branches there. Key: →")
    cols[2].button("Run", icon=":material/fast_forward:", key="run_steps", on_click=_on_step, args=(None, hold),
                   disabled=done or playing, width="stretch",
                   help="Run the number of steps on the right (stops early when every request has finished).")
    cols[3].number_input("steps", 1, 1000, 10, key="run_n", label_visibility="collapsed")
    if playing:  # two buttons under two keys: a Pause click delivered late can never press Play
        cols[4].button("Pause", icon=":material/pause:", key="pause", on_click=_set_playing, args=(False,),
                       width="stretch", help="Stop auto-play at the step shown. Key: Space")
    else:
        cols[4].button("Play", icon=":material/play_arrow:", key="play", on_click=_set_playing, args=(True,),
                       disabled=done, width="stretch", help="Step automatically at the speed on the right. Key: Space")
    cols[5].slider("steps / s", 0.5, 8.0, 2.0, 0.5, key="speed", label_visibility="collapsed",
                   format="%.1f steps/s", help="Auto-play speed asked, steps per second. While playing, the step "
                                               "header says the speed delivered and, when less, where the time goes.")
    keys.listen({"step": functools.partial(_on_step, 1, hold), "back": _on_back, "play": _on_space,
                 "run": functools.partial(_on_step, None, hold)})
    cols[6].button("Reset", icon=":material/restart_alt:", key="reset", on_click=_on_reset, width="stretch",
                   help="Start again at step 0 with the knobs and workload shown (the sidebar's Restore default "
                        "knobs goes back to the defaults).")
    with cols[7].popover("Keys", icon=":material/keyboard:", width="stretch", help="Keyboard shortcuts"):
        keys.keys_help()
    if s.presenting:
        with cols[8]:
            presenter.exit_button()
