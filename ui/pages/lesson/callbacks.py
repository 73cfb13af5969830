"""The lesson panel's callbacks: they run before the page is drawn, and those changing the run
hold its lock."""

from __future__ import annotations

from lab.lessons import (
    AnswerError,
    Checkpoint,
    Lesson,
    grade,
    play_challenge,
)
from lab.link import LINK_LIST
from lab.run import default_config
from ui.draw import plain
from ui.pages.lesson.script import open_lesson, start_run
from ui.session import cached_load, exclusive, lessons, session


def answer_key(lesson: Lesson, checkpoint: Checkpoint) -> str:
    return f"answer_{lesson.id}_{checkpoint.id}"


def find_checkpoint(lesson: Lesson, checkpoint_id: str) -> Checkpoint:
    return next(c for c in lesson.checkpoints if c.id == checkpoint_id)


@exclusive
def on_lock_in(lesson_id: str, checkpoint_id: str) -> None:
    """Read the answer, run exactly the question's step, and grade it against that step's record."""
    s = session()
    lesson, run, v = lessons()[lesson_id], s.run, s.visit(lesson_id)
    checkpoint = find_checkpoint(lesson, checkpoint_id)
    answer = s.widget(answer_key(lesson, checkpoint))
    try:
        if answer is None:
            raise AnswerError("the answer box is empty")
        checkpoint.parse(answer)
    except AnswerError as exc:
        v.notice = f"Your answer was not locked in: {plain(exc)}. Nothing ran; fix the answer and lock it in again."
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


def on_skip(lesson_id: str, checkpoint_id: str) -> None:
    session().visit(lesson_id).skipped.add(checkpoint_id)


@exclusive
def on_variant(lesson_id: str, variant: str) -> None:
    lesson = lessons()[lesson_id]
    try:
        start_run(lesson, variant)
    except ValueError as exc:
        session().visit(lesson_id).notice = f"The variant could not start: {plain(exc)}. The run on screen is kept."


@exclusive
def on_restart(lesson_id: str) -> None:
    """The lesson from the top: its base run at its first step, no answers, the first section."""
    lesson = lessons()[lesson_id]
    try:
        start_run(lesson)
    except ValueError as exc:
        session().visit(lesson_id).notice = (f"The lesson could not restart: {plain(exc)}. Your run and answers "
                                             "are kept.")
        return
    v = session().visit(lesson_id)
    v.progress.restart()
    v.skipped.clear()
    v.section = 0
    session().forget_widgets(f"answer_{lesson_id}_")
    session().forget_widgets("challenge_knob_")


@exclusive
def on_pick(lesson_id: str | None = None) -> None:
    """Open the lesson picked in the box (or the one given: the Next-lesson button)."""
    s = session()
    try:
        open_lesson(lesson_id or s.widget("lesson_pick"))
    except ValueError as exc:
        s.flash("error", f"The lesson could not open: {plain(exc)}. The run on screen is kept.")


@exclusive
def on_close(lesson_id: str) -> None:
    """Back to the free lab, keeping the run on screen (the lesson resumes it if opened again)."""
    s = session()
    s.visit(lesson_id).run = s.run
    s.lesson_id = None
    s.source = LINK_LIST  # a link now lists the requests instead of naming the lesson
    s.flash("info", "You left the lesson; its run stays on screen for you to change freely. Open it again from "
                  "**Lessons** to carry on where you were.")


def on_section(lesson_id: str, delta: int) -> None:
    session().visit(lesson_id).section += delta


def challenge_key(knob: str) -> str:
    return f"challenge_knob_{knob}"


def on_score(lesson_id: str) -> None:
    """One attempt: the challenge's scenario with the chosen knobs, in a fresh engine run to the
    end beside the one on screen (which, with its questions, is left as it was), then scored."""
    lesson, v = lessons()[lesson_id], session().visit(lesson_id)
    base = lesson.engine_config(**lesson.challenge.config).to_dict()
    chosen = {knob: session().widget(challenge_key(knob)) for knob in lesson.challenge.knobs}
    changed = {k: value for k, value in chosen.items() if value != base[k]}
    config = lesson.engine_config(model=default_config().model)
    try:
        v.progress.attempt(play_challenge(lesson, changed, cached_load(config.model, config.device, config.dtype)))
    except ValueError as exc:
        v.notice = f"These settings cannot run: {plain(exc)}. Nothing was scored; your attempts are kept."
