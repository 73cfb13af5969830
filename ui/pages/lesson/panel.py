"""The lesson panel beside the lab's charts: the text, what to watch, the variants, the question
at this step and its reveal, the challenge and the knee, and the answers so far."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.knobs import KNOB
from engine.metrics import METRICS
from lab.budgets import heavy_job
from lab.export.lesson_page import lesson_page
from lab.lessons import (
    BASE,
    Checkpoint,
    Grade,
    Lesson,
    format_answer,
    reasons_markdown,
)
from lab.lessons.knee import ID as KNEE
from lab.run import History, default_config
from ui.draw import prose
from ui.pages.lesson.callbacks import (
    answer_key,
    challenge_key,
    on_close,
    on_lock_in,
    on_pick,
    on_restart,
    on_score,
    on_section,
    on_skip,
    on_variant,
)
from ui.pages.lesson.script import follows, open_questions
from ui.session import Visit, cached_load, lessons, session
from ui.widgets.knobs import knob_widget


def _picker(lesson: Lesson) -> None:
    session().set_widget("lesson_pick", lesson.id)
    titles = {i: f"{n}. {x.title}" for n, (i, x) in enumerate(lessons().items(), 1)}
    st.selectbox("Lesson", list(titles), format_func=titles.get, key="lesson_pick", on_change=on_pick,
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
        st.button(f"Next lesson: {after + 1}. {following.title}", key="next_lesson", on_click=on_pick,
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
            st.button(f"Run the {name} variant", key=f"variant_{name}", on_click=on_variant, args=(lesson.id, name),
                      icon=":material/alt_route:", width="stretch",
                      help=f"{labels[name]}: restarts the run at step 0 with the same workload.")


def _ask(lesson: Lesson, checkpoint: Checkpoint, v: Visit) -> None:
    """The question, the input its kind calls for, and the two ways on: lock in, or skip."""
    with st.container(border=True, key="lesson_question"):
        st.markdown(f"**:material/quiz: Predict step {checkpoint.at_step}** before it runs")
        st.markdown(checkpoint.question)
        key = answer_key(lesson, checkpoint)
        if checkpoint.kind == "ids":
            st.multiselect("Your prediction: request ids", checkpoint.options, key=key,
                           placeholder="choose request ids (empty: none)")
        elif checkpoint.kind == "number":
            st.number_input("Your prediction", min_value=0, step=1, value=None, key=key, placeholder="a number")
        else:
            st.radio("Your prediction", checkpoint.options, index=None, key=key)
        if checkpoint.id in v.skipped:
            st.caption("You skipped this one earlier; you can still answer it now.")
        st.button("Lock in and run the step", key="lock_in", on_click=on_lock_in, args=(lesson.id, checkpoint.id),
                  type="primary", icon=":material/lock:", width="stretch")
        st.button("Skip this question", key="skip_question", on_click=on_skip, args=(lesson.id, checkpoint.id),
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
        st.markdown(reasons_markdown(result))


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
    question = next((c for c in open_questions(lesson, variant, v) if c.at_step == run.next_step), None)
    if question is not None:
        _ask(lesson, question, v)
    for text in lesson.watch_at(max(run.cursor, 0), variant):  # before step 0, the hints for step 0
        st.info(f"**Watch:** {text}", icon=":material/visibility:")
    later = [c.at_step for c in open_questions(lesson, variant, v) if c.at_step > run.next_step]
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
        left.button("Previous", key="section_prev", icon=":material/chevron_left:", on_click=on_section,
                    args=(lesson.id, -1), disabled=v.section == 0, width="stretch")
        right.button("Next", key="section_next", icon=":material/chevron_right:", on_click=on_section,
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
                if not session().has_widget(challenge_key(knob)):
                    session().set_widget(challenge_key(knob), getattr(base, knob))
                knob_widget(KNOB[knob], key=challenge_key(knob))
            st.form_submit_button("Run to the end and score", on_click=on_score, args=(lesson.id,), type="primary",
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
            with queued:
                bar = st.progress(0.0, text=f"Running the trace at {knee.rates[0]:g} req/s (1 of {len(knee.rates)}), "
                                            "a fresh engine for each rate…")

                def ran(done: int) -> None:
                    nxt = f"at {knee.rates[done]:g} req/s ({done + 1} of {len(knee.rates)})" if done < len(knee.rates) \
                        else "done"
                    bar.progress(done / len(knee.rates), text=f"Running the trace {nxt}, a fresh engine for each rate…")

                points = knee.sweep(lesson, default_config().model, ran)
            bar.empty()
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


@st.cache_data(max_entries=4, show_spinner="Recording the lesson's run for its offline page…")
def _offline_page(lesson_id: str) -> str:
    """The same file for every student, so the server records each lesson's run once (in a heavy-job
    turn: lesson 12's run and figures take seconds of CPU)."""
    with heavy_job():
        return lesson_page(lessons()[lesson_id], cached_load)


def _footer(lesson: Lesson) -> None:
    st.download_button("This lesson offline (HTML)", lambda: _offline_page(lesson.id),
                       f"lesson{lesson.number:02d}.html", "text/html", key="lesson_offline", on_click="ignore",
                       icon=":material/download:", width="stretch",
                       help="The lesson and its own run as one page: step through it and answer its questions in "
                       "any browser, offline, with no install. Your answers stay in that browser.")
    left, right = st.columns(2)
    with left.popover("Restart", icon=":material/restart_alt:", width="stretch", help="Restart the lesson"):
        st.markdown("Back to step 0 of the lesson's own run, with your answers cleared.")
        st.button("Restart", key="restart_lesson", on_click=on_restart, args=(lesson.id,), type="primary",
                  width="stretch")
    right.button("Leave", key="close_lesson", on_click=on_close, args=(lesson.id,), icon=":material/logout:",
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
