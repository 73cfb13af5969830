"""Fleet lessons (lessons/fleet/): every number and request id their text states is held to their own
run, every question's answer is read from the event it is about, and a malformed file is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import EngineConfig
from lab.fleet.lessons import load_fleet_lesson, load_fleet_lessons, sweep_fleets
from lab.fleet.run import FleetRun
from lab.lessons.claims import check
from lab.lessons.model import LessonError

LESSONS = load_fleet_lessons()


@pytest.fixture(scope="module", params=[lesson.id for lesson in LESSONS])
def lesson_run(request, loaded):
    lesson = next(lesson for lesson in LESSONS if lesson.id == request.param)
    s = lesson.scenario
    run = FleetRun(EngineConfig(model=loaded.name).with_changes(**s.engine), s.fleet, s.load)
    run.step(20_000)
    assert run.done and not run.live.has_unfinished_requests()
    return lesson, run, sweep_fleets(lesson, run.config) if lesson.sweeps else None


def test_there_are_fleet_lessons():
    assert len(LESSONS) >= 3 and all((lesson.checkpoints or lesson.sweeps) and lesson.claims for lesson in LESSONS)


def test_every_claim_holds_on_the_lessons_own_run(lesson_run):
    from lab.fleet.lessons import claim_values

    lesson, run, swept = lesson_run
    wrong = {claim.says: problem for claim, value in claim_values(lesson, run, swept)
             if (problem := check(claim, value))}
    assert not wrong


def test_every_number_and_request_in_the_text_is_backed_by_a_claim(lesson_run):
    lesson, _, _ = lesson_run
    assert lesson.unbacked() == {}


def test_each_question_reads_its_answer_from_the_event_it_is_about(lesson_run):
    lesson, run, _ = lesson_run
    for checkpoint in lesson.checkpoints:
        record = run.records[checkpoint.at_event]
        answer = checkpoint.answer_from(record)
        if checkpoint.answer_kind == "choice":
            assert answer in checkpoint.options, checkpoint.id
        assert checkpoint.grade(record, answer).correct
        wrong = next(o for o in checkpoint.options if o != answer) if checkpoint.options else answer * 2
        assert not checkpoint.grade(record, wrong).correct
        with pytest.raises(ValueError, match="not event"):
            checkpoint.answer_from(run.records[checkpoint.at_event + 1])


def test_each_sweep_question_reads_its_answer_from_the_sweep(lesson_run):
    lesson, run, swept = lesson_run
    for question in lesson.sweeps:
        values = {name: swept[name][question.at_rate][question.metric] for name in question.fleets}
        right = question.answer_from(swept)
        assert values[right] == (max if question.best == "max" else min)(values.values())
        assert sorted(values.values()).count(values[right]) == 1, "a tie would make the question unfair"
        assert question.grade(swept, right).correct
        assert not question.grade(swept, next(o for o in question.options if o != right)).correct
        with pytest.raises(ValueError, match="must be one of"):
            question.grade(swept, "a fourth fleet")
    for name, by_rate in (swept or {}).items():  # each fleet served every request it was offered
        for rate, aggregate in by_rate.items():
            assert aggregate["num_requests_finished"] == round(rate * lesson.scenario.load.duration_s), (name, rate)


@pytest.mark.parametrize("change, named", [
    (("kind = \"routed_replica\"", "kind = \"guess\""), "must be one of routed_replica"),
    (("at_event = 19", "at_event = -1"), "at_event"),
    (("router = \"dynamo\"", "router = \"magic\""), "router must be one of"),
    (("minutes = 15", "minutes = 15\nsurprise = 1"), "'surprise': is not a known field"),
])
def test_a_malformed_fleet_lesson_is_named_by_file_and_field(tmp_path, change, named):
    source = LESSONS[0]
    folder = Path(__file__).parents[2] / "lessons" / "fleet"
    text = (folder / f"{source.id}.toml").read_text(encoding="utf-8")
    assert change[0] in text
    (tmp_path / f"{source.id}.toml").write_text(text.replace(change[0], change[1], 1), encoding="utf-8")
    (tmp_path / f"{source.id}.md").write_text((folder / f"{source.id}.md").read_text(encoding="utf-8"))
    with pytest.raises(LessonError, match=named):
        load_fleet_lesson(tmp_path / f"{source.id}.toml")
