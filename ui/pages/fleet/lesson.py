"""A fleet lesson beside the Fleet page's views: its text, and each checkpoint's question asked before
its event runs. Step stops there until the student answers; the answer is graded from the record
of the event the question is about (lab/fleet/lessons.py)."""

from __future__ import annotations

import streamlit as st

from lab.budgets import heavy_job
from lab.charts.fleet import sweep_lines
from lab.fleet.lessons import FleetCheckpoint, FleetLesson, SweepQuestion, sweep_fleets
from lab.fleet.run import FleetRun
from lab.lessons import LessonError
from lab.lessons.rules import AnswerError
from ui.draw import chart, plain, prose
from ui.pages.fleet.state import start
from ui.session import cached_load, exclusive, fleet_lessons, session


def open_lesson() -> FleetLesson | None:
    s = session()
    try:
        return fleet_lessons().get(s.fleet_lesson)
    except LessonError:
        return None


def pending(lesson: FleetLesson, run: FleetRun) -> FleetCheckpoint | None:
    """The first question not yet answered, if its event is still ahead."""
    grades = session().fleet_grades
    return next((c for c in lesson.checkpoints if c.id not in grades and c.at_event > run.cursor), None)


def hold(run: FleetRun, n: int) -> int:
    """Events Step may run now: up to the event before an unanswered question, never past it."""
    lesson = open_lesson()
    asked = pending(lesson, run) if lesson else None
    return n if asked is None else max(0, min(n, asked.at_event - 1 - run.cursor))


@exclusive
def _on_choose() -> None:
    s = session()
    chosen = s.widget("fleet_lesson_box")
    try:
        if chosen is not None:
            start(fleet_lessons()[chosen].scenario)
    except ValueError as exc:
        s.flash("error", f"The lesson could not open: {plain(exc)}")
        return
    s.fleet_lesson, s.fleet_grades = chosen, {}


def chooser() -> None:
    """The sidebar's box: no lesson, or one of lessons/fleet/."""
    try:
        lessons = fleet_lessons()
    except LessonError as exc:
        st.error(f"The fleet lessons cannot be read: {plain(exc)}")
        return
    s = session()
    s.set_widget("fleet_lesson_box", s.fleet_lesson)
    st.selectbox("Fleet lesson", [None, *lessons], key="fleet_lesson_box", on_change=_on_choose,
                 placeholder="none: the free fleet",
                 format_func=lambda i: "none: the free fleet" if i is None else
                 f"{lessons[i].number}. {lessons[i].title}",
                 help="Opens the lesson's fleet at event 0, with its text and questions beside the views.")


@exclusive
def _on_answer(checkpoint: FleetCheckpoint) -> None:
    s = session()
    run = s.fleet
    given = s.widget(f"fleet_answer_{checkpoint.id}")
    run.step(checkpoint.at_event - run.cursor)  # the event the question is about
    try:
        s.fleet_grades[checkpoint.id] = checkpoint.grade(run.record, given)
    except AnswerError as exc:
        run.back()
        s.flash("error", plain(exc))


def _question(checkpoint: FleetCheckpoint) -> None:
    with st.container(border=True, key="fleet_question"):
        st.markdown(f"**Predict, then Step.** {checkpoint.question}")
        key = f"fleet_answer_{checkpoint.id}"
        if checkpoint.answer_kind == "choice":
            st.radio("Your answer", checkpoint.options, key=key, horizontal=True, index=None,
                     format_func=lambda o: f"replica {o}" if checkpoint.kind == "routed_replica" else o)
        else:
            st.number_input("Your answer", key=key, value=None, step=1.0, format="%g")
        st.button("Check: run the event", key="fleet_check", type="primary", on_click=_on_answer,
                  args=(checkpoint,), disabled=session().widget(key) is None)


def panel(lesson: FleetLesson, run: FleetRun) -> None:
    """The question now asked (on top, where Step stopped for it), the answers graded so far, then the
    lesson's text."""
    st.markdown(f"#### {lesson.number}. {lesson.title}")
    asked = pending(lesson, run)
    if asked is not None and asked.at_event == run.cursor + 1:
        _question(asked)
    elif asked is not None:
        st.caption(f"Step on: a question comes before event {asked.at_event}.")
    for checkpoint in reversed(lesson.checkpoints):  # the latest answer first
        grade = session().fleet_grades.get(checkpoint.id)
        if grade is not None:
            (st.success if grade.correct else st.warning)(grade.explanation)
    for section in lesson.sections:
        if section.title:
            st.markdown(f"##### {section.title}")
        prose(section.body)
    for question in lesson.sweeps:
        _sweep_question(lesson, question, run)


def _run_sweep(lesson: FleetLesson, run: FleetRun) -> dict | None:
    """The lesson's sweep, once per session: every fleet its questions name at every rate, each run to the end."""
    s = session()
    if lesson.id not in s.fleet_swept:
        total = len({n for q in lesson.sweeps for n in q.fleets}) * len({r for q in lesson.sweeps for r in q.rates})
        bar = st.progress(0.0, text=f"Running the sweep: {total} fleets to the end…")
        try:
            with heavy_job(on_wait=lambda place: bar.progress(0.0, text=f"The server is busy: yours is number "
                                                                        f"{place} in line.")):
                s.fleet_swept[lesson.id] = sweep_fleets(lesson, run.config, lambda done: bar.progress(done / total),
                                                        cached_load)
        except ValueError as exc:
            st.error(f"The sweep did not run: {plain(exc)}.")
            return None
        finally:
            bar.empty()
    return s.fleet_swept[lesson.id]


def _sweep_question(lesson: FleetLesson, question: SweepQuestion, run: FleetRun) -> None:
    s = session()
    grade = s.fleet_grades.get(question.id)
    with st.container(border=True, key=f"fleet_sweep_q_{question.id}"):
        st.markdown(f"**Predict, then sweep.** {question.question}")
        if grade is None:
            key = f"fleet_answer_{question.id}"
            st.radio("Your answer", question.options, key=key, index=None)
            if st.button("Check: run the sweep", key=f"fleet_check_{question.id}", type="primary",
                         disabled=s.widget(key) is None):
                results = _run_sweep(lesson, run)
                if results is not None:
                    grade = s.fleet_grades[question.id] = question.grade(results, s.widget(key))
        if grade is not None:
            (st.success if grade.correct else st.warning)(grade.explanation)
            chart(sweep_lines(s.fleet_swept[lesson.id], question.metric, question.metric.replace("_", " ")),
                  f"fleet_sweep_{question.id}")
