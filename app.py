"""Scheduler Loop Lab: step a real LLM serving engine one scheduler iteration at a time.

    streamlit run app.py            (LAB_MODEL=/path/to/model to use another model)

The app is thin: lab/state.py keeps each session's run, lab/controls.py the
widgets, lab/views.py the page, lab/share.py links, files and replays,
lab/presenter.py the projector mode. Pages are listed in PAGES.
When the run belongs to a lesson, lab/lesson_panel.py draws its text and
questions beside the charts (lab_page's `aside`) and holds the step bar at
each question (`hold`); lab/lesson_page.py lists the lessons and the glossary.
"""

import streamlit as st

from lab import ab_page, controls, lesson_page, lesson_panel, presenter, share, sweep_page, views
from lab.state import session_run

st.set_page_config(page_title="Scheduler Loop Lab", page_icon="🧮", layout="wide")


def lab() -> None:
    share.open_link()  # a shared link's scenario, on a session's first run
    try:
        run = session_run()
    except ValueError as exc:  # the default model is missing or cannot be loaded
        st.error(f"The lab could not start its engine: {exc}")
        st.stop()
    share.sidebar(run, controls.sidebar)
    presenter.apply()
    if share.replaying(run):
        share.replay_notice(run)
    in_lesson = lesson_panel.active(run) is not None  # the run is a lesson's: its text and questions beside it
    views.lab_page(run, aside=lesson_panel.panel if in_lesson else None, hold=lesson_panel.hold if in_lesson else None)


def lessons() -> None:
    lesson_page.catalogue(LAB)  # a lesson opens in the lab page


LAB = st.Page(lab, title="Step the scheduler", icon="🧮", url_path="lab", default=True)
PAGES = [LAB, st.Page(lessons, title="Lessons", icon="🎓", url_path="lessons"),
         st.Page(lesson_page.glossary, title="Glossary", icon="📖", url_path="glossary"),
         st.Page(ab_page.page, title="A/B: two configs", icon="⚖️", url_path="ab"),
         st.Page(sweep_page.page, title="Sweep a knob", icon="📈", url_path="sweep")]

st.navigation(PAGES).run()
