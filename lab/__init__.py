"""The lab: Streamlit views over the engine's StepRecords, and each session's run.

    state.py     a session's Run: its script, records and time travel (no Streamlit in Run itself)
    controls.py  the step bar, the knobs and the workload panel
    views.py     the page, section by section; lab_page(run, aside=...) is the lesson panel's hook
    charts/      Plotly figure builders, pure functions of records
    palette.py   one colour per request, one per state, one mark per move
    lesson_panel.py  a lesson beside the charts: text, hints, variants, graded questions, the challenge
    lesson_page.py   the Lessons and Glossary pages

Nothing here schedules: every number drawn comes from a StepRecord.
"""
