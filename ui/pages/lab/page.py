"""The lab page: the sidebar, the welcome, the step bar, then the live views; in a lesson, the
lesson panel (ui/pages/lesson/) beside them, holding the step bar at each of its questions.

Everything right of the sidebar is one ``st.fragment`` (the stage): a click of Step, Back or
Run reruns only it, not the sidebar's hundred elements, which a step rarely changes. When it
does change what the sidebar shows (ui/pages/lab/views.py: sidebar_state), the stage redraws
the whole page."""

from __future__ import annotations

import streamlit as st

from ui import link
from ui.draw import CSS, flashes, plain
from ui.pages import lesson as lesson_panel
from ui.pages.lab.views import live, sidebar_stale, sidebar_state
from ui.session import readable_lessons, session
from ui.widgets import presenter
from ui.widgets import replay as replay_widgets
from ui.widgets.knobs import knobs_panel
from ui.widgets.share_panel import share_panel
from ui.widgets.step_bar import step_bar
from ui.widgets.workload import workload_panel


def _sidebar() -> None:
    """The knobs and workload (or, in a replay, the replay's), then sharing."""
    if session().replaying:
        replay_widgets.sidebar()
    else:
        with st.sidebar:
            st.markdown("### :material/neurology: Scheduler Loop Lab")
            st.header("Knobs", divider="gray")
            knobs_panel()
            st.header("Workload", divider="gray")
            workload_panel()
    share_panel()


def _welcomed(first_lesson: str | None = None) -> None:
    s = session()
    s.welcomed = True
    if first_lesson is not None:
        try:
            lesson_panel.open_lesson(first_lesson)
        except ValueError as exc:
            s.flash("error", f"Lesson 1 could not open: {plain(exc)}")


def welcome() -> None:
    """A first visit, opened cold: what the lab is, in two sentences, and the way into lesson 1."""
    first = next(iter(readable_lessons()), None)
    with st.container(border=True, key="welcome"):
        st.markdown("**Scheduler Loop Lab** runs a real small language model one scheduler step at a time, and "
                    "shows every decision a serving engine such as vLLM makes: which prompts and decodes join the "
                    "next forward pass, and what happens when the KV cache runs out. Start with lesson 1, or step "
                    "the lab's own workload with **Step** and turn the knobs in the sidebar.")
        left, right, _ = st.columns([1.2, 1, 3])
        if first is not None:
            left.button("Start lesson 1", key="welcome_lesson", type="primary", icon=":material/school:",
                        on_click=_welcomed, args=(first,), width="stretch")
        right.button("Explore the lab", key="welcome_dismiss", on_click=_welcomed, width="stretch")


def page() -> None:
    """The step bar, then the live views; in a lesson, its panel to their right."""
    link.open_link()  # a shared link's scenario, on a session's first run
    s = session()
    try:
        s.sidebar_for = sidebar_state(s)  # builds the run: a model that cannot load is one message here
    except ValueError as exc:  # the default model is missing or cannot be loaded
        st.error(f"The lab could not start its engine: {plain(exc)}")
        st.stop()
    _sidebar()
    s.sidebar_for = sidebar_state(s)  # after the sidebar's own callbacks and drawing
    presenter.apply()
    st.markdown(CSS, unsafe_allow_html=True)
    st.fragment(_stage)()


def _stage() -> None:
    """The part a step reruns: the welcome, the step bar, the notices, the views and the lesson panel."""
    s = session()
    if sidebar_stale():
        st.rerun()  # the step changed what the sidebar shows: redraw the whole page
    run = s.run
    if s.replaying:
        replay_widgets.notice()
    in_lesson = s.lesson() is not None
    if in_lesson or s.presenting or run.records:
        s.welcomed = True
    if not s.welcomed:
        welcome()
    hold = lesson_panel.hold if in_lesson else None
    step_bar(hold)
    flashes()  # below the step bar, so a notice never moves the button under the cursor
    main = st.container()
    s.aside_at = None
    if in_lesson:
        main, side = st.columns([0.68, 0.32], gap="medium")
        with side:
            lesson_panel.panel()
        s.aside_at = (run.cursor, len(run.records))  # the step it was drawn for (see _aside_stale)
    with main:
        st.fragment(live, run_every=1 / s.widget("speed") if s.playing else None)(hold)
