"""A lesson's run and its script: opening a lesson, whether the run still follows it, and holding
the step bar at each unanswered question."""

from __future__ import annotations

import streamlit as st

from engine.workload import WorkloadItem
from lab.lessons import (
    BASE,
    Checkpoint,
    Lesson,
)
from lab.run import History, Run, default_config
from ui.session import Visit, cached_load, lessons, session


def number(lesson: Lesson) -> int:
    return list(lessons()).index(lesson.id) + 1


@st.cache_resource(show_spinner=False)
def script_workload(lesson_id: str) -> list[WorkloadItem]:
    """The lesson's requests, built once per server: a lesson on a trace draws hundreds, and every Step
    click asks whether the run still follows them. Read only: a run gets its own list (start_run)."""
    return lessons()[lesson_id].workload.items()


def start_run(lesson: Lesson, variant: str = BASE, **knobs) -> Run:
    """Make the session's run a fresh one of the lesson's scenario, stepped to its first step.
    The run is built before anything changes, so a bad knob (ValueError) leaves the old one."""
    config = lesson.engine_config(variant, model=default_config().model, **knobs)
    run = Run(config, lesson.workload.items(), load=cached_load)
    if lesson.start_step:
        with st.spinner(f"Running the scenario's first {lesson.start_step} steps, up to where the lesson opens…"):
            run.step(lesson.start_step)
    s = session()
    s.show(run, lesson.workload)
    s.visit(lesson.id).run = run
    return run


def open_lesson(lesson_id: str) -> None:
    """Open a lesson where the student left it (or at its start). Raises ValueError if its engine
    cannot be built; the run on screen is then kept."""
    s = session()
    if s.lesson_id is not None and s.has_run and not s.replaying:
        s.visit(s.lesson_id).run = s.run  # to come back to
    lesson = lessons()[lesson_id]
    resumed = s.visit(lesson_id).run
    if resumed is None:
        start_run(lesson)
    else:
        s.show(resumed, lesson.workload)
    s.lesson_id = lesson_id


def follows(lesson: Lesson, run: History) -> tuple[str | None, list[str]]:
    """The variant whose scenario the run is following, or None and the ways it departs from the
    lesson (changed knobs, another workload, changes made mid-run). Questions are only asked, and
    hints only shown, on the lesson's script: elsewhere they would describe another run."""
    departures = []
    if run.workload != script_workload(lesson.id):
        departures.append("the workload is not the lesson's")
    mid_run = sorted(step for step in run.changes if step <= run.next_step)
    if mid_run:
        departures.append(f"it was changed mid-run, before step {mid_run[0]}")
    actual = run.config.to_dict()
    diffs = {}
    for variant in lesson.variant_names:
        expected = lesson.engine_config(variant, model=run.config.model).to_dict()
        diffs[variant] = [f"{k} = {actual[k]!r} (the lesson: {v!r})" for k, v in expected.items() if actual[k] != v]
    closest = min(diffs, key=lambda v: len(diffs[v]))
    departures += diffs[closest]
    return (None if departures else closest), departures


def open_questions(lesson: Lesson, variant: str, v: Visit) -> list[Checkpoint]:
    """The variant's questions not answered yet (skipped ones included: they can still be answered)."""
    return [c for c in lesson.checkpoints_for(variant) if c.id not in v.progress.grades]


def hold(run: History, n: int) -> int:
    """How many of the n steps asked for (Step, Run N, Play) may run now: never past a question that
    is neither answered nor skipped, so it cannot slip by unseen."""
    s = session()
    lesson = s.lesson()
    variant = follows(lesson, run)[0] if lesson else None
    if variant is None:
        return n
    v = s.visit(lesson.id)
    ahead = [c.at_step for c in open_questions(lesson, variant, v) if c.id not in v.skipped
             and c.at_step >= run.next_step]
    if not ahead or min(ahead) - run.next_step >= n:
        return n
    step = min(ahead)
    if step == run.next_step:
        s.flash("warning", f"**The lesson asks a question before step {step}.** Predict it in the lesson panel and "
                         "press **Lock in and run the step**, or **Skip** the question.")
    else:
        s.flash("info", f"Stopped before step {step}: the lesson asks a question about it first.")
    return step - run.next_step
