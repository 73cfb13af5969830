"""Scheduler Loop Lab: step a real LLM serving engine one scheduler iteration at a time.

    streamlit run app.py            (LAB_MODEL=/path/to/model to use another model)

The app is thin: lab/state.py keeps each session's run, lab/controls.py the
widgets, lab/views.py the page, lab/share.py links, files and replays,
lab/presenter.py the projector mode. Pages are listed in PAGES.
lab.views.lab_page takes an `aside` callable that draws a panel beside the
charts: the hook for lesson text.
"""

import streamlit as st

from lab import ab_page, controls, presenter, share, views
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
    views.lab_page(run)


PAGES = [st.Page(lab, title="Step the scheduler", icon="🧮", url_path="lab", default=True),
         st.Page(ab_page.page, title="A/B: two configs", icon="⚖️", url_path="ab")]

st.navigation(PAGES).run()
