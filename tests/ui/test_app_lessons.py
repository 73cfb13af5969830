"""The lessons inside the app, driven headlessly with AppTest.

Every right answer is read off a reference engine run of the same lesson
(test_lessons.finish), never written down here, so the tests follow the engine.
Each test checks the session's Run and progress (what happened) and the page
(what the student sees).
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from engine.knobs import KNOB
from lab.lessons import format_answer, grade, load_glossary
from lab.lessons.terms import link_terms, load_terms
from tests.lab import test_lessons
from tests.lab.test_lessons import BY_ID, LESSONS, SOLUTION, finish
from tests.ui.test_app import APP, click, markdown, run_of, scrubber
from ui.widgets.knobs import widget_kind


@pytest.fixture
def open_lesson(lab_model, monkeypatch):
    """An app opened on a lesson's link (?lesson=<id>), as a student following a course page would."""
    monkeypatch.setenv("LAB_MODEL", lab_model)

    def opener(lesson_id: str) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=120)
        at.query_params["lesson"] = lesson_id
        at.run()
        assert not at.exception, at.exception
        assert at.session_state["session"].lesson_id == lesson_id
        return at

    return opener


def progress(at: AppTest, lesson_id: str):
    return at.session_state["session"].visits[lesson_id].progress


def checkpoint(lesson_id: str, checkpoint_id: str):
    return next(c for c in BY_ID[lesson_id].checkpoints if c.id == checkpoint_id)


def engine_answer(loaded, lesson_id: str, checkpoint_id: str):
    """The engine's own answer: the checkpoint's rule applied to a reference run's record."""
    cp = checkpoint(lesson_id, checkpoint_id)
    return cp.answer_from(finish(loaded, BY_ID[lesson_id], cp.variant).records[cp.at_step])


def messages(elements) -> str:
    return "\n".join(e.value for e in elements)


# The widget kind each answer kind, and each challenge knob kind, is drawn with.
ANSWER_WIDGETS = {"ids": "multiselect", "number": "number_input", "choice": "radio"}
KNOB_WIDGETS = {"int": "number_input", "float": "slider", "bool": "toggle", "choice": "selectbox"}


def widget(at: AppTest, kind: str, key: str):
    return next(w for w in at.get(kind) if w.key == key)


def lock_in(at: AppTest, lesson_id: str, checkpoint_id: str, answer) -> AppTest:
    kind = ANSWER_WIDGETS[checkpoint(lesson_id, checkpoint_id).kind]
    widget(at, kind, f"answer_{lesson_id}_{checkpoint_id}").set_value(answer)
    return click(at, "lock_in")


def test_each_lesson_opens_at_its_start_with_its_config_and_text(open_lesson, lab_model):
    at = open_lesson(LESSONS[0].id)
    for lesson in LESSONS:
        at.selectbox(key="lesson_pick").set_value(lesson.id).run()
        assert not at.exception, at.exception
        run = run_of(at)
        assert at.session_state["session"].lesson_id == lesson.id
        assert run.config == lesson.engine_config(model=lab_model)
        assert run.workload == lesson.workload.items()
        assert (run.next_step, run.at_latest) == (lesson.start_step, True)
        shown = markdown(at)
        # The text, with its first mention of each glossary term linked to the term's entry.
        assert link_terms(lesson.sections[0].body, load_terms()) in shown and "Section 1 of" in messages(at.caption)
        assert at.selectbox(key="lesson_pick").value == lesson.id
        # The sidebar's preset box names the lesson's preset, or none: not the lab's last one.
        assert at.selectbox(key="preset").value == lesson.workload.preset
        assert at.button(key="load_preset").disabled == (lesson.workload.preset is None)


def test_a_question_holds_the_run_and_is_graded_against_the_engine(open_lesson, loaded):
    lesson_id = "04_kv_cache_full"
    at = open_lesson(lesson_id)
    run = run_of(at)
    at.number_input(key="run_n").set_value(10)
    click(at, "run_steps")
    assert run.next_step == 5, "Run should stop just before the step the lesson asks about"
    assert "Stopped before step 5" in messages(at.info)
    click(at, "step")
    assert run.next_step == 5 and "question before step 5" in messages(at.warning)

    right = engine_answer(loaded, lesson_id, "victim")
    lock_in(at, lesson_id, "victim", right)
    reference = finish(loaded, BY_ID[lesson_id]).records[5]
    assert run.cursor == 5 and run.record.without_timings() == reference.without_timings()  # exactly one step
    grade = progress(at, lesson_id).grades["victim"]
    assert grade.correct and grade.right_answer == right
    assert f"Right.** You said **{format_answer(right)}**; the engine's answer: **{format_answer(right)}**" \
        in messages(at.success)
    assert all(e.reason in markdown(at) for e in reference.events if e.kind == "preempted")

    click(at, "step")
    click(at, "step")
    assert run.next_step == 8
    right = engine_answer(loaded, lesson_id, "recompute-cost")
    lock_in(at, lesson_id, "recompute-cost", right + 1)
    grade = progress(at, lesson_id).grades["recompute-cost"]
    assert not grade.correct and grade.right_answer == right
    assert f"Not quite.** You said **{right + 1}**; the engine's answer: **{right}**" in messages(at.error)
    assert progress(at, lesson_id).score() == (1, 2) and "1 / 2 right" in markdown(at)

    click(at, "restart_lesson")
    run = run_of(at)
    assert (run.next_step, len(run.records)) == (0, 0)
    assert progress(at, lesson_id).score() == (0, 0)
    assert f"0 of {len(BY_ID[lesson_id].checkpoints)} questions answered" in markdown(at)


def test_play_pauses_before_a_question(open_lesson):
    at = open_lesson("04_kv_cache_full")
    run = run_of(at)
    click(at, "play")
    for _ in range(10):  # each run of the page is one tick of the player
        if not at.session_state["session"].playing:
            break
        at.run()
    assert not at.session_state["session"].playing and run.next_step == 5
    assert "question before step 5" in messages(at.warning)


def test_skip_then_answer_later_and_bad_input_keeps_everything(open_lesson, loaded):
    lesson_id = "01_the_loop"
    at = open_lesson(lesson_id)
    run = run_of(at)
    click(at, "skip_question")  # the question about step 0
    click(at, "step")
    click(at, "step")
    assert run.next_step == 2 and at.radio(key=f"answer_{lesson_id}_what-stops-r3").value is None
    records = [r.without_timings() for r in run.records]
    click(at, "lock_in")  # nothing chosen
    assert "answer box is empty" in messages(at.error) and "Nothing ran" in messages(at.error)
    assert [r.without_timings() for r in run.records] == records and run.next_step == 2
    assert progress(at, lesson_id).score() == (0, 0)
    lock_in(at, lesson_id, "what-stops-r3", engine_answer(loaded, lesson_id, "what-stops-r3"))
    assert progress(at, lesson_id).grades["what-stops-r3"].correct

    scrubber(at).set_value(-1).run()  # back before step 0: the skipped question again
    assert "You skipped this one earlier" in messages(at.caption)
    lock_in(at, lesson_id, "first-batch", engine_answer(loaded, lesson_id, "first-batch"))
    assert run.cursor == 0 and len(run.records) == 3, "the recorded step is shown, the later ones are kept"
    assert progress(at, lesson_id).score() == (2, 2)

    at.selectbox(key="lesson_pick").set_value("02_decode_first").run()
    at.selectbox(key="lesson_pick").set_value(lesson_id).run()
    assert run_of(at) is run and run.cursor == 0, "switching lessons and back resumes the run"
    assert progress(at, lesson_id).score() == (2, 2) and "2 / 2 right" in markdown(at)


def test_a_variant_restarts_the_same_workload_under_its_knobs(open_lesson, lab_model, loaded):
    lesson_id = "04_kv_cache_full"
    lesson = BY_ID[lesson_id]
    at = open_lesson(lesson_id)
    click(at, "variant_swap")
    run = run_of(at)
    assert run.config == lesson.engine_config("swap", model=lab_model) and run.config.preemption_mode == "swap"
    assert run.workload == lesson.workload.items() and run.next_step == 0
    assert "Variant: **swap**" in markdown(at) and at.button(key="variant_base")
    at.number_input(key="run_n").set_value(10)
    click(at, "run_steps")
    right = engine_answer(loaded, lesson_id, "swap-cost")  # the swap variant's own question
    lock_in(at, lesson_id, "swap-cost", right)
    assert progress(at, lesson_id).grades["swap-cost"].correct


def test_changing_the_scenario_pauses_the_questions(open_lesson):
    at = open_lesson("04_kv_cache_full")
    at.number_input(key="knob_num_gpu_blocks").set_value(64).run()  # a bigger pool: no preemption to ask about
    run = run_of(at)
    assert run.config.num_gpu_blocks == 64
    assert "left the lesson's scenario" in messages(at.warning) and "num_gpu_blocks = 64" in messages(at.warning)
    at.number_input(key="run_n").set_value(10)
    click(at, "run_steps")
    assert run.next_step == 10 and "lock_in" not in [b.key for b in at.button], "no question off the script"


def test_the_challenge_fails_the_start_and_passes_a_tuned_config(open_lesson, loaded):
    """Each attempt runs the challenge's trace in an engine of its own: the run on screen and its
    questions stay as they were, and the attempts are ranked in a table."""
    lesson_id = "08_it_depends"
    at = open_lesson(lesson_id)
    run = run_of(at)
    score = "FormSubmitter:challenge-Run to the end and score"
    click(at, score)
    result = progress(at, lesson_id).challenge
    assert not result.passed and result == test_lessons.attempt(loaded)
    assert result.message in messages(at.error)
    assert run_of(at) is run and run.next_step == 0, "scoring leaves the lesson's run alone"
    assert "left the lesson's scenario" not in messages(at.warning), "its questions still stand"

    for knob, value in SOLUTION.items():
        widget(at, KNOB_WIDGETS[widget_kind(KNOB[knob])], f"challenge_knob_{knob}").set_value(value)
    click(at, score)
    result = progress(at, lesson_id).challenge
    assert result.passed and result == test_lessons.attempt(loaded, **SOLUTION)
    assert result.message in messages(at.success)
    board = next(d.value for d in at.dataframe if "knobs changed" in d.value.columns)
    assert list(board["passed"]) == ["yes", "no"] and board["#"].tolist() == [2, 1]
    assert run_of(at) is run and all(getattr(run.config, k) != v for k, v in SOLUTION.items() if k != "max_num_seqs")


def test_closing_a_lesson_keeps_the_run_in_the_free_lab(open_lesson):
    at = open_lesson("03_token_budget")
    run = run_of(at)
    click(at, "step")
    click(at, "close_lesson")
    assert at.session_state["session"].lesson_id is None and run_of(at) is run and run.next_step == 1
    assert "lesson_pick" not in [w.key for w in at.selectbox], "the lesson panel is gone"
    assert "You left the lesson" in messages(at.info)


def _lessons_pages() -> None:
    """The Lessons and Glossary pages as app.py registers them, with a stand-in for the lab page."""
    import streamlit as st

    from ui.pages import lessons as lesson_page

    lab = st.Page(lambda: st.markdown("the lab page"), title="Lab", url_path="lab")
    catalogue = st.Page(lambda: lesson_page.catalogue(lab), title="Lessons", url_path="lessons", default=True)
    glossary = st.Page(lesson_page.glossary, title="Glossary", url_path="glossary")
    st.navigation([catalogue, glossary, lab]).run()


def test_the_lessons_page_lists_every_lesson_and_opens_one_in_the_lab(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    at = AppTest.from_function(_lessons_pages, default_timeout=120).run()
    assert not at.exception, at.exception
    shown = markdown(at)
    assert all(f"{n}. {lesson.title}" in shown for n, lesson in enumerate(LESSONS, 1))
    lesson = BY_ID["05_paged_attention"]
    click(at, f"start_{lesson.id}")
    assert "the lab page" in markdown(at)
    assert at.session_state["session"].lesson_id == lesson.id
    assert run_of(at).config == lesson.engine_config(model=lab_model)


def _glossary_page() -> None:
    from ui.pages import lessons as lesson_page

    lesson_page.glossary()


def test_the_glossary_page_shows_every_entry():
    at = AppTest.from_function(_glossary_page).run()
    assert not at.exception, at.exception
    shown = markdown(at)
    for section in load_glossary():  # each answer, its terms linked to their entries above it
        assert link_terms(section.body, load_terms(), page="") in shown
        assert not section.title or f"### {section.title}" in shown


def test_the_learning_path_shows_time_prerequisites_and_what_is_done(lab_model, monkeypatch, loaded):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    at = AppTest.from_function(_lessons_pages, default_timeout=120).run()
    captions = "\n".join(c.value for c in at.caption)
    for lesson in LESSONS:
        assert f"about {lesson.minutes} min" in captions
    assert "builds on 4, 9" in captions  # lesson 10: swap or recompute, after the KV cache and GPU costs
    assert "done" not in captions and "in progress" not in captions
    lesson = BY_ID["01_the_loop"]
    progress = at.session_state["session"].visit(lesson.id).progress
    for cp in lesson.checkpoints:  # every question answered right: the lesson is done
        record = finish(loaded, lesson).records[cp.at_step]
        progress.record(cp, cp.answer_from(record), grade(cp, record, cp.answer_from(record)))
    at.run()
    captions = "\n".join(c.value for c in at.caption)
    assert f"done, {len(lesson.checkpoints)} / {len(lesson.checkpoints)} right" in captions



def test_a_link_carries_the_lessons_done_so_a_student_can_resume(lab_model, monkeypatch, loaded):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["done"] = "1,3,99,x"
    at.run()
    s = at.session_state["session"]
    assert s.lessons_done() == [1, 3]
    assert "99, x are not lesson numbers" in messages(at.warning)
    from ui import link

    assert link.link_params(s)["done"] == "1,3"
    lessons_page = AppTest.from_function(_lessons_pages, default_timeout=120)
    lessons_page.session_state["session"] = s
    lessons_page.run()
    assert "\n".join(c.value for c in lessons_page.caption).count("done in an earlier session") == 2


def test_lesson_1s_first_question_can_be_answered_from_the_page_at_step_0(open_lesson, loaded):
    """'Add up their prompt tokens': before step 0 the table gives each request's prompt tokens, the
    first columns, and they add up to what the engine then runs."""
    at = open_lesson("01_the_loop")
    table = next(d.value for d in at.dataframe if "prompt_tokens" in d.value.columns)
    assert list(table.columns[:3]) == ["request", "prompt_tokens", "max_tokens"]
    record = finish(loaded, BY_ID["01_the_loop"]).records[0]
    admitted = {e.request_id for e in record.events if e.kind == "admitted"}
    shown = dict(zip(table["request"], table["prompt_tokens"], strict=True))
    assert sum(shown[r] for r in admitted) == record.budget.prefill_tokens


def test_the_knee_prediction_is_graded_on_a_rate_sweep_of_the_lessons_trace(open_lesson):
    """Lesson 12: the student picks a rate; the engine sweeps the trace and grades it. The answer
    comes from the sweep (6 req/s on this trace, as test_lessons measures), not from the file."""
    lesson_id = "12_queue_under_load"
    at = open_lesson(lesson_id)
    at.radio(key="knee_answer").set_value("5")
    at.button(key="FormSubmitter:knee-Lock in and run the sweep").click().run()
    assert not at.exception, at.exception
    graded = progress(at, lesson_id).grades["knee"]
    assert not graded.correct and graded.right_answer == "6"
    assert "Not quite: you said 5" in messages(at.error) and "6 req/s" in markdown(at)
    assert progress(at, lesson_id).answers["knee"] == "5"


def test_answering_every_question_completes_the_lesson_and_offers_the_next(open_lesson, loaded):
    lesson = BY_ID["01_the_loop"]
    at = open_lesson(lesson.id)
    for cp in lesson.checkpoints:  # in step order: Run stops before each question, then it is locked in
        gap = cp.at_step - run_of(at).next_step
        if gap:
            at.number_input(key="run_n").set_value(gap)
            click(at, "run_steps")
        assert run_of(at).next_step == cp.at_step
        assert all(b.key != "next_lesson" for b in at.button), "offered the next lesson before the last answer"
        lock_in(at, lesson.id, cp.id, engine_answer(loaded, lesson.id, cp.id))
    n = len(lesson.checkpoints)
    assert f"**Lesson 1 complete:** {n} of {n} right." in messages(at.success)
    following = LESSONS[1]
    assert at.button(key="next_lesson").label == f"Next lesson: 2. {following.title}"
    click(at, "next_lesson")
    s = at.session_state["session"]
    assert s.lesson_id == following.id and run_of(at).workload == following.workload.items()
    assert all(b.key != "next_lesson" for b in at.button)


def test_a_lesson_offers_its_offline_page(open_lesson, loaded):
    """Issue 39: the lesson panel's download is the lesson's offline page, made once per server."""
    from lab.export.lesson_page import lesson_page
    from ui.pages.lesson.panel import _offline_page

    at = open_lesson("04_kv_cache_full")
    labels = [b.proto.label for b in at.get("download_button")]
    assert "This lesson offline (HTML)" in labels
    page = _offline_page("04_kv_cache_full")
    assert page == lesson_page(BY_ID["04_kv_cache_full"], lambda *_: loaded)
    assert _offline_page("04_kv_cache_full") == page
