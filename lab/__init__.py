"""The lab: pure Python over the engine's StepRecords; never imports streamlit (ui/ draws it).

    run.py        History (records, the step on screen) and Run (a History with an engine: time travel)
    recording.py  a saved run, replayed without an engine
    scenario.py   a run as a link's scenario, and back
    metrics.py    engine.metrics from records alone
    compare.py    two configs in lock-step (A/B);  sweep.py: one knob, many values
    lessons/      lesson files, checkpoint rules, the tuning challenge, a student's progress
    export/       run file, Chrome trace, metrics CSV, HTML charts
    charts/       Plotly figure builders, pure functions of records
    palette.py    one colour per request, one per state, one mark per move

Nothing here schedules: every number drawn comes from a StepRecord.
"""
