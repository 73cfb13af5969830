"""The lab: Streamlit views over the engine's StepRecords, and each session's run.

    state.py     a session's Run: its script, records and time travel (no Streamlit in Run itself)
    controls.py  the step bar, the knobs and the workload panel
    views.py     the page, section by section; lab_page(run, aside=...) is the lesson panel's hook
    charts/      Plotly figure builders, pure functions of records
    palette.py   one colour per request, one per state, one mark per move

Nothing here schedules: every number drawn comes from a StepRecord.
"""
