"""Scheduler Loop Lab: step a real LLM serving engine one scheduler iteration at a time.

    streamlit run app.py            (LAB_MODEL=/path/to/model to use another model)

Wiring only. The engine is engine/, everything that can run without a browser is
lab/, and ui/ draws it: ui/session.py holds each browser session's state in one
object, ui/pages/ the pages below, ui/widgets/ what they share.
"""

import streamlit as st

from lab.budgets import use_server_threads
from ui.pages import ab, lessons, sweep
from ui.pages import lab as lab_page
from ui.pages.fleet import page as fleet_page

use_server_threads()  # a class's steps share the cores: one torch thread each (lab/budgets.py)
st.set_page_config(page_title="Scheduler Loop Lab", page_icon=":material/play_circle:", layout="wide")

LAB = st.Page(lab_page.page, title="Step the scheduler", icon=":material/play_circle:", url_path="lab", default=True)
PAGES = [LAB, st.Page(lambda: lessons.catalogue(LAB), title="Lessons", icon=":material/school:", url_path="lessons"),
         st.Page(lessons.glossary, title="Glossary", icon=":material/menu_book:", url_path="glossary"),
         st.Page(ab.page, title="A/B: two configs", icon=":material/compare_arrows:", url_path="ab"),
         st.Page(sweep.page, title="Sweep a knob", icon=":material/show_chart:", url_path="sweep"),
         st.Page(fleet_page.page, title="A fleet of engines", icon=":material/hub:", url_path="fleet")]

st.navigation(PAGES).run()
