"""A lesson beside the live lab: its text, what to watch, its variants, its questions and its challenge.

A lesson's run is the session's run, built from the lesson's scenario; the Session
remembers which lesson it belongs to (``lesson_id``, which links carry too) and, per
lesson, a ``Visit``: the answers, the skipped questions, the section being read and
the run left there, so switching lessons loses nothing.

The panel never schedules and never knows an answer in advance. A question is asked
when the run's history ends just before its step; "Lock in" runs that one step on
the engine and grades the answer against the StepRecord it produced
(``lab.lessons.grade``). The challenge runs the workload to the end and scores the
engine's own metrics in a fresh run of its own (``play_challenge``).

    open_lesson(lesson_id)   make the session's run the lesson's (or the one left in it)
    follows(lesson, run)     the variant the run follows, or None and how it departs from the lesson
    panel()                  the side panel beside the lab's charts
    hold(run, n)             how many of n steps may run before an unanswered question (the step bar's Hold)
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.knobs import KNOB
from engine.metrics import METRICS
from lab.budgets import heavy_job
from lab.lessons import (
    BASE,
    AnswerError,
    Checkpoint,
    Grade,
    Lesson,
    format_answer,
    grade,
    play_challenge,
)
from lab.lessons.knee import ID as KNEE
from lab.link import LINK_LIST
from lab.run import History, Run, default_config
from ui.draw import prose
from ui.session import Visit, cached_load, exclusive, lessons, session
from ui.widgets.knobs import knob_widget


def number(lesson: Lesson) -> int:
    return list(lessons()).index(lesson.id) + 1


# ---- the run and the lesson's script ------------------------------------------------------------


def _start(lesson: Lesson, variant: str = BASE, **knobs) -> Run:
    """Make the session's run a fresh one of the lesson's scenario, stepped to its first step.
    The run is built before anything changes, so a bad knob (ValueError) leaves the old one."""
    config = lesson.engine_config(variant, model=default_config().model, **knobs)
    run = Run(config, lesson.workload.items(), load=cached_load)
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
        _start(lesson)
    else:
        s.show(resumed, lesson.workload)
    s.lesson_id = lesson_id


def follows(lesson: Lesson, run: History) -> tuple[str | None, list[str]]:
    """The variant whose scenario the run is following, or None and the ways it departs from the
    lesson (changed knobs, another workload, changes made mid-run). Questions are only asked, and
    hints only shown, on the lesson's script: elsewhere they would describe another run."""
    departures = []
    if run.workload != lesson.workload.items():
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


def _open_questions(lesson: Lesson, variant: str, v: Visit) -> list[Checkpoint]:
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
    ahead = [c.at_step for c in _open_questions(lesson, variant, v) if c.id not in v.skipped
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


# ---- callbacks (run before the page is drawn; those changing the run hold its lock) ------------


def _answer_key(lesson: Lesson, checkpoint: Checkpoint) -> str:
    return f"answer_{lesson.id}_{checkpoint.id}"


def _checkpoint(lesson: Lesson, checkpoint_id: str) -> Checkpoint:
    return next(c for c in lesson.checkpoints if c.id == checkpoint_id)


@exclusive
def _on_lock_in(lesson_id: str, checkpoint_id: str) -> None:
    """Read the answer, run exactly the question's step, and grade it against that step's record."""
    s = session()
    lesson, run, v = lessons()[lesson_id], s.run, s.visit(lesson_id)
    checkpoint = _checkpoint(lesson, checkpoint_id)
    answer = s.widget(_answer_key(lesson, checkpoint))
    try:
        if answer is None:
            raise AnswerError("the answer box is empty")
        checkpoint.parse(answer)
    except AnswerError as exc:
        v.notice = f"Your answer was not locked in: {exc}. Nothing ran; fix the answer and lock it in again."
        return
    if run.at_latest:
        run.step(1)
    else:  # the step was run before (the student came back in time): show the engine's record of it
        run.seek(run.cursor + 1)
    record = run.record
    if record is None or record.step != checkpoint.at_step:
        v.notice = f"The run ended before step {checkpoint.at_step}, so this question cannot be graded."
        return
    v.progress.record(checkpoint, answer, grade(checkpoint, record, answer))
    v.skipped.discard(checkpoint.id)


def _on_skip(lesson_id: str, checkpoint_id: str) -> None:
    session().visit(lesson_id).skipped.add(checkpoint_id)


@exclusive
def _on_variant(lesson_id: str, variant: str) -> None:
    lesson = lessons()[lesson_id]
    try:
        _start(lesson, variant)
    except ValueError as exc:
        session().visit(lesson_id).notice = f"The variant could not start: {exc}. The run on screen is kept."


@exclusive
def _on_restart(lesson_id: str) -> None:
    """The lesson from the top: its base run at its first step, no answers, the first section."""
    lesson = lessons()[lesson_id]
    try:
        _start(lesson)
    except ValueError as exc:
        session().visit(lesson_id).notice = f"The lesson could not restart: {exc}. Your run and answers are kept."
        return
    v = session().visit(lesson_id)
    v.progress.restart()
    v.skipped.clear()
    v.section = 0
    session().forget_widgets(f"answer_{lesson_id}_")
    session().forget_widgets("challenge_knob_")


@exclusive
def _on_pick(lesson_id: str | None = None) -> None:
    """Open the lesson picked in the box (or the one given: the Next-lesson button)."""
    s = session()
    try:
        open_lesson(lesson_id or s.widget("lesson_pick"))
    except ValueError as exc:
        s.flash("error", f"The lesson could not open: {exc}. The run on screen is kept.")


@exclusive
def _on_close(lesson_id: str) -> None:
    """Back to the free lab, keeping the run on screen (the lesson resumes it if opened again)."""
    s = session()
    s.visit(lesson_id).run = s.run
    s.lesson_id = None
    s.source = LINK_LIST  # a link now lists the requests instead of naming the lesson
    s.flash("info", "You left the lesson; its run stays on screen for you to change freely. Open it again from "
                  "**Lessons** to carry on where you were.")


def _on_section(lesson_id: str, delta: int) -> None:
    session().visit(lesson_id).section += delta


def _challenge_key(knob: str) -> str:
    return f"challenge_knob_{knob}"


def _on_score(lesson_id: str) -> None:
    """One attempt: the challenge's scenario with the chosen knobs, in a fresh engine run to the
    end beside the one on screen (which, with its questions, is left as it was), then scored."""
    lesson, v = lessons()[lesson_id], session().visit(lesson_id)
    base = lesson.engine_config(**lesson.challenge.config).to_dict()
    chosen = {knob: session().widget(_challenge_key(knob)) for knob in lesson.challenge.knobs}
    changed = {k: value for k, value in chosen.items() if value != base[k]}
    config = lesson.engine_config(model=default_config().model)
    try:
        v.progress.attempt(play_challenge(lesson, changed, cached_load(config.model, config.device, config.dtype)))
    except ValueError as exc:
        v.notice = f"These settings cannot run: {exc}. Nothing was scored; your attempts are kept."


# ---- the panel ----------------------------------------------------------------------------------


def _picker(lesson: Lesson) -> None:
    session().set_widget("lesson_pick", lesson.id)
    titles = {i: f"{n}. {x.title}" for n, (i, x) in enumerate(lessons().items(), 1)}
    st.selectbox("Lesson", list(titles), format_func=titles.get, key="lesson_pick", on_change=_on_pick,
                 label_visibility="collapsed", help="Go straight to any lesson; each keeps your answers and its run.")


def _score(lesson: Lesson, v: Visit) -> None:
    right, answered = v.progress.score()
    skipped = len(v.skipped - set(v.progress.grades))
    badges = [f":green-badge[:material/star: {right} / {answered} right]"] if answered else []
    badges.append(f":gray-badge[{answered} of {len(lesson.checkpoints)} questions answered]")
    badges += [f":gray-badge[{skipped} skipped]"] if skipped else []
    st.markdown(" ".join(badges))
    if v.progress.complete(lesson):
        _complete(lesson, right, answered)


def _complete(lesson: Lesson, right: int, answered: int) -> None:
    """Every question answered (and the challenge passed): say so, and offer the next lesson."""
    ids = list(lessons())
    after = ids.index(lesson.id) + 1
    with st.container(border=True, key="lesson_complete"):
        st.success(f"**Lesson {after} complete:** {right} of {answered} right.", icon=":material/celebration:")
        if after == len(ids):
            st.markdown("That was the last lesson. The **Glossary** gathers the terms they used; the "
                        "**A/B** and **Sweep** pages are there for your own questions.")
            return
        following = lessons()[ids[after]]
        st.button(f"Next lesson: {after + 1}. {following.title}", key="next_lesson", on_click=_on_pick,
                  args=(following.id,), type="primary", icon=":material/arrow_forward:", width="stretch")


def _variants(lesson: Lesson, variant: str | None) -> None:
    """Which variant is live, and a button for each of the others (same workload, other knobs)."""
    if len(lesson.variant_names) == 1:
        return
    labels = {BASE: "the lesson's own knobs", **{x.name: x.label for x in lesson.variants}}
    if variant is not None:
        st.markdown(f":material/alt_route: Variant: **{variant}**, {labels[variant]}")
    for name in lesson.variant_names:
        if name != variant:
            st.button(f"Run the {name} variant", key=f"variant_{name}", on_click=_on_variant, args=(lesson.id, name),
                      icon=":material/alt_route:", width="stretch",
                      help=f"{labels[name]}: restarts the run at step 0 with the same workload.")


def _lines(text: str) -> str:
    """Plain lines as Markdown paragraphs, keeping '- ' lines together as one list."""
    return "\n".join(line if line.startswith("- ") else f"\n{line}\n" for line in text.split("\n"))


def _ask(lesson: Lesson, checkpoint: Checkpoint, v: Visit) -> None:
    """The question, the input its kind calls for, and the two ways on: lock in, or skip."""
    with st.container(border=True, key="lesson_question"):
        st.markdown(f"**:material/quiz: Predict step {checkpoint.at_step}** before it runs")
        st.markdown(checkpoint.question)
        key = _answer_key(lesson, checkpoint)
        if checkpoint.kind == "ids":
            st.multiselect("Your prediction: request ids", checkpoint.options, key=key,
                           placeholder="choose request ids (empty: none)")
        elif checkpoint.kind == "number":
            st.number_input("Your prediction", min_value=0, step=1, value=None, key=key, placeholder="a number")
        else:
            st.radio("Your prediction", checkpoint.options, index=None, key=key)
        if checkpoint.id in v.skipped:
            st.caption("You skipped this one earlier; you can still answer it now.")
        st.button("Lock in and run the step", key="lock_in", on_click=_on_lock_in, args=(lesson.id, checkpoint.id),
                  type="primary", icon=":material/lock:", width="stretch")
        st.button("Skip this question", key="skip_question", on_click=_on_skip, args=(lesson.id, checkpoint.id),
                  disabled=checkpoint.id in v.skipped, type="tertiary", icon=":material/redo:",
                  help="Step on without answering; come back to this step to answer it later.")


def _reveal(checkpoint: Checkpoint, answer: object, result: Grade) -> None:
    """The verdict, the engine's answer, the rule that reads it and the reasons the engine gave."""
    with st.container(border=True, key="lesson_reveal"):
        box, verdict, icon = (st.success, "Right", ":material/check_circle:") if result.correct else \
            (st.error, "Not quite", ":material/cancel:")
        box(f"**Step {checkpoint.at_step}: {verdict}.** You said **{format_answer(answer)}**; the engine's answer: "
            f"**{format_answer(result.right_answer)}**.", icon=icon)
        st.caption(checkpoint.question)
        st.markdown(_lines(result.explanation.split("\n", 1)[1]))  # its first line is the verdict, said above


def _now(lesson: Lesson, variant: str | None, departures: list[str], run: History, v: Visit) -> None:
    """What matters at the step on screen: a question, a reveal, or what to watch."""
    if variant is None:
        st.warning("This run has left the lesson's scenario (" + "; ".join(departures) + "), so its questions and "
                   "hints are paused. **Restart** (at the bottom) brings the scenario back.",
                   icon=":material/explore_off:")
        return
    for c in lesson.checkpoints_for(variant):  # what the step on screen answered, then what the next one asks
        if c.at_step == run.cursor and c.id in v.progress.grades:
            _reveal(c, v.progress.answers[c.id], v.progress.grades[c.id])
    question = next((c for c in _open_questions(lesson, variant, v) if c.at_step == run.next_step), None)
    if question is not None:
        _ask(lesson, question, v)
    for text in lesson.watch_at(max(run.cursor, 0), variant):  # before step 0, the hints for step 0
        st.info(f"**Watch:** {text}", icon=":material/visibility:")
    later = [c.at_step for c in _open_questions(lesson, variant, v) if c.at_step > run.next_step]
    if question is None and later:
        st.caption(f":material/quiz: Next question: before step {min(later)}.")


def _text(lesson: Lesson, v: Visit) -> None:
    """One section at a time, with a stepper: short enough to read beside the charts."""
    total = len(lesson.sections)
    v.section = max(0, min(v.section, total - 1))
    section = lesson.sections[v.section]
    with st.container(border=True, key="lesson_text"):
        st.caption(f"Section {v.section + 1} of {total}")
        st.markdown(f"#### {section.title or 'Introduction'}")
        prose(section.body)
        left, right = st.columns(2)
        left.button("Previous", key="section_prev", icon=":material/chevron_left:", on_click=_on_section,
                    args=(lesson.id, -1), disabled=v.section == 0, width="stretch")
        right.button("Next", key="section_next", icon=":material/chevron_right:", on_click=_on_section,
                     args=(lesson.id, 1), disabled=v.section == total - 1, width="stretch")


def _challenge(lesson: Lesson, v: Visit) -> None:
    """The allowed knobs, a button that runs the challenge to the end, the score and the attempts."""
    spec = lesson.challenge
    base = lesson.engine_config(**spec.config)
    with st.container(border=True, key="lesson_challenge"):
        st.markdown("#### :material/flag: Challenge")
        st.markdown("\n".join(f"- **{METRICS[t.metric].label}** {t.goal}" for t in spec.targets))
        scenario = spec.workload.label if spec.workload is not None else "the lesson's workload"
        priced = f", priced on {base.deployment} (modeled)" if base.deployment else ""
        locked = [f"{k} = {base.to_dict()[k]}" for k in {**lesson.config, **spec.config} if k not in spec.knobs]
        st.caption(f"Each attempt runs {scenario}{priced} to the end in an engine of its own, with the knobs below: "
                   "the sidebar's knobs and the run on screen stay as they are. Locked: " + ", ".join(locked) + ".")
        with st.form("challenge", border=False):
            for knob in spec.knobs:
                if not session().has_widget(_challenge_key(knob)):
                    session().set_widget(_challenge_key(knob), getattr(base, knob))
                knob_widget(KNOB[knob], key=_challenge_key(knob))
            st.form_submit_button("Run to the end and score", on_click=_on_score, args=(lesson.id,), type="primary",
                                  icon=":material/sports_score:", width="stretch")
        result = v.progress.challenge
        if result is None:
            return
        st.markdown("\n".join(
            f"- {':green[:material/check:]' if r.met else ':red[:material/close:]'} **{r.metric}**: "
            f"{'none' if r.actual is None else f'{r.actual:.3g}'} (goal: {r.goal})" for r in result.results))
        (st.success if result.passed else st.error)(result.message)
        _leaderboard(spec, v)


def _knee(lesson: Lesson, v: Visit) -> None:
    """A prediction about whole runs: lock in a rate, then the engine sweeps the trace to grade it."""
    knee = lesson.knee
    with st.container(border=True, key="lesson_knee"):
        st.markdown("#### :material/trending_up: Predict the knee")
        st.markdown(knee.question)
        graded = v.progress.grades.get(KNEE)
        if graded is None:
            with st.form("knee", border=False):
                choice = st.radio("Your prediction (requests/s)", knee.options, index=None, key="knee_answer")
                locked = st.form_submit_button("Lock in and run the sweep", type="primary", width="stretch",
                                               icon=":material/lock:")
            if not locked:
                return
            if choice is None:
                st.warning("Pick a rate first.")
                return
            status = st.empty()
            queued = heavy_job(on_wait=lambda place: status.info(f"The server is busy: number {place} in line."))
            with st.spinner(f"Running the trace at {len(knee.rates)} rates, one fresh engine each…"), queued:
                points = knee.sweep(lesson, default_config().model)
            status.empty()
            graded = knee.grade(points, choice)
            v.progress.answers[KNEE], v.progress.grades[KNEE] = choice, graded
        (st.success if graded.correct else st.error)(graded.explanation.split("\n")[0])
        st.markdown("\n".join(graded.explanation.split("\n")[1:]))


def _leaderboard(spec, v: Visit) -> None:
    """The student's own attempts in this session, best first."""
    if len(v.progress.attempts) < 2:
        return
    metric = METRICS[spec.score] if spec.score else None
    rows = [{"#": v.progress.attempts.index(r) + 1, "passed": "yes" if r.passed else "no",
             **({metric.heading: None if r.score is None else round(r.score, 3)} if metric else {}),
             "knobs changed": ", ".join(f"{k}={x}" for k, x in r.knobs.items()) or "none"}
            for r in v.progress.leaderboard(metric.better if metric else "higher")]
    st.markdown("##### Your attempts, best first")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def _answers(lesson: Lesson, v: Visit) -> None:
    """Every question of the lesson (all variants) and how it went."""
    right, answered = v.progress.score()
    title = f"Your answers: {right} of {answered} right" if answered else f"The {len(lesson.checkpoints)} questions"
    with st.expander(title, icon=":material/checklist:"):
        for c in lesson.checkpoints:
            result = v.progress.grades.get(c.id)
            mark = (":green[:material/check_circle:]" if result and result.correct else
                    ":red[:material/cancel:]" if result else
                    ":gray[:material/skip_next:]" if c.id in v.skipped else ":gray[:material/radio_button_unchecked:]")
            where = "" if c.variant == BASE else f", {c.variant}"
            st.markdown(f"{mark} **step {c.at_step}{where}**: {c.question}")


def _footer(lesson: Lesson) -> None:
    left, right = st.columns(2)
    with left.popover("Restart", icon=":material/restart_alt:", width="stretch", help="Restart the lesson"):
        st.markdown("Back to step 0 of the lesson's own run, with your answers cleared.")
        st.button("Restart", key="restart_lesson", on_click=_on_restart, args=(lesson.id,), type="primary",
                  width="stretch")
    right.button("Leave", key="close_lesson", on_click=_on_close, args=(lesson.id,), icon=":material/logout:",
                 width="stretch", help="Leave the lesson for the free lab; the run stays on screen.")


def panel() -> None:
    """The lesson beside the charts."""
    s = session()
    run, lesson = s.run, s.lesson()
    v = s.visit(lesson.id)
    variant, departures = follows(lesson, run)
    _picker(lesson)
    _score(lesson, v)
    if v.notice:
        st.error(v.notice, icon=":material/error:")
        v.notice = None
    _variants(lesson, variant)
    _now(lesson, variant, departures, run, v)
    _text(lesson, v)
    if lesson.knee is not None:
        _knee(lesson, v)
    if lesson.challenge is not None:
        _challenge(lesson, v)
    _answers(lesson, v)
    _footer(lesson)
