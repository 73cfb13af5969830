"""Presenter mode: the lab on a projector, driven from the keyboard.

On (the sidebar toggle, or ``?present=1`` in the link), the sidebar and its knobs
are hidden, the type is large, and the step bar ends in an Exit button. The step bar's keys (ui/widgets/keys.py:
→ Step, ← Back, Space Play / Pause) drive it from the keyboard.
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from lab.charts.style import for_projector
from ui.session import session

QUERY_PARAM = "present"  # ?present=1 opens the lab in presenter mode

# Sized for the back of a lecture hall: body text, headings and the step bar's buttons grow;
# the sidebar (and with it every knob) and Streamlit's toolbar go away.
CSS = """
<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stExpandSidebarButton"],
[data-testid="stToolbar"], [data-testid="stDecoration"], [data-testid="stHeader"] {display: none !important}
[data-testid="stMainBlockContainer"] {max-width: 100%; padding: 0.6rem 2rem 2rem 2rem !important}
[data-testid="stMainBlockContainer"] p, [data-testid="stMainBlockContainer"] li,
[data-testid="stMainBlockContainer"] .lab-event {font-size: 1.3rem; line-height: 1.5}
[data-testid="stMainBlockContainer"] h3 {font-size: 2.3rem}
[data-testid="stMainBlockContainer"] h5 {font-size: 1.6rem}
[data-testid="stMainBlockContainer"] button p {font-size: 1.25rem; font-weight: 600}
[data-testid="stMainBlockContainer"] .lab-chip, [data-testid="stMainBlockContainer"] .lab-kind {font-size: 1.1rem}
[data-testid="stMainBlockContainer"] .stMarkdownBadge {font-size: 1.15rem !important}
</style>
"""


def sized(fig: go.Figure) -> go.Figure:
    """The figure as this session shows it: sized for a projector when presenting."""
    return for_projector(fig) if session().presenting else fig


def _exit() -> None:
    session().presenting = False


def _on_toggle() -> None:
    s = session()
    s.presenting = s.widget("presenter_toggle")


def toggle() -> None:
    """The switch, for the sidebar. Its state lives in the Session, not the widget, so it survives a
    visit to a page without the sidebar (Streamlit forgets an undrawn widget's value)."""
    s = session()
    s.set_widget("presenter_toggle", s.presenting)
    st.toggle("Presenter mode", key="presenter_toggle", on_change=_on_toggle,
              help="Large type, no sidebar; → steps, ← goes back, Space plays. Add ?present=1 to a link to "
              "open the lab in presenter mode.")


def apply() -> None:
    """When presenting: the projector style (the sidebar is hidden; the way out is in the step bar)."""
    if session().presenting:
        st.markdown(CSS, unsafe_allow_html=True)


def exit_button() -> None:
    """The way out, at the end of the step bar: a row of its own would push the block map and
    the "why" below a 1280x720 projector's first screen."""
    st.button("Exit", key="exit_presenter", on_click=_exit, icon=":material/close_fullscreen:", width="stretch",
              help="Exit presenter mode: the sidebar and its knobs come back.")
