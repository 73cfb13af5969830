"""What a lesson's text says about its run is what the run did.

Each lesson's [[claims]] hold a fragment of its text to an expression read off the run's
records; its [[facts]] cite where every other number comes from. A number or request id in
the text that neither backs fails the coverage test, so new prose cannot slip in unchecked.
"""

from __future__ import annotations

import inspect

import pytest

from engine import EngineConfig
from lab.lessons import LESSONS_DIR, Lesson, LessonError, load_lesson
from lab.lessons.claims import NUMBER, Claim, ClaimError, RunView, check, evaluate, unbacked
from tests.lab import test_lessons
from tests.lab.test_lessons import LESSONS, _finish


class Runs(dict):
    """A lesson's variants, each run to the end when a claim first reads it (cached across tests)."""

    def __init__(self, lesson: Lesson):
        super().__init__()
        self.lesson = lesson

    def __missing__(self, variant: str) -> RunView:
        if variant not in self.lesson.variant_names:
            raise KeyError(variant)
        finished = _finish(self.lesson.id, variant, ())
        config = self.lesson.engine_config(variant)
        self[variant] = RunView(finished.records, finished.metrics, config, self, self.lesson)
        return self[variant]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.id)
def test_every_claim_holds_on_the_run(loaded, lesson):
    runs = Runs(lesson)
    wrong = []
    for claim in (c for c in lesson.claims if not c.held_by):
        try:
            problem = check(claim, evaluate(claim.value, runs[claim.variant]))
        except (ClaimError, LookupError, TypeError, AttributeError) as exc:
            problem = f"cannot read {claim.value!r}: {exc}"
        if problem:
            wrong.append(f"{claim.says!r} ({claim.variant}): {problem}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.id)
def test_a_claim_held_by_a_test_is_quoted_by_it(lesson):
    """A claim that needs many runs (a sweep, every variant's end) names the test that holds it; that
    test exists here and states each of the claim's numbers."""
    for claim in (c for c in lesson.claims if c.held_by):
        test = getattr(test_lessons, claim.held_by, None)
        assert callable(test), f"{lesson.id}: no test {claim.held_by} in tests/lab/test_lessons.py"
        source = inspect.getsource(test)
        missing = [n for n in NUMBER.findall(claim.says) if n not in source]
        assert not missing, f"{lesson.id}: {claim.held_by} never states {missing} of {claim.says!r}"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.id)
def test_every_number_in_the_text_is_backed(lesson):
    loose = {piece[:60]: tokens for piece, tokens in lesson.unbacked().items()}
    assert not loose, f"{lesson.id}: numbers or ids no claim or fact backs: {loose}"


# ---- the mechanism itself ----------------------------------------------------------------------


def test_a_claim_fails_when_the_text_and_the_value_differ():
    assert check(Claim("fill 13 pages", "x"), 13) is None
    assert check(Claim("fill 13 pages", "x"), 12) == "the run's value is 12"
    assert check(Claim("about 48 ms sooner", "x", about=2), 46.5) is None
    assert check(Claim("about 48 ms sooner", "x", about=2), 45.9) is not None
    assert check(Claim("14.0 ms modeled", "x"), 14.04) is None and check(Claim("14.0 ms", "x"), 14.06)
    assert check(Claim("1,024 tokens", "x"), 1024) is None
    assert check(Claim("r2 and r5 are preempted", "x"), ["r2", "r5"]) is None
    assert check(Claim("r2 and r5 are preempted", "x"), ["r2", "r15"]) is not None
    assert check(Claim("it is compute-bound", "x"), "compute") is None
    assert check(Claim("sooner", "x"), False) is not None


def test_claims_read_only_the_run():
    view = RunView((), {"requests": [{"request_id": "r0", "ttft_ms": 9.0}]}, EngineConfig(), {})
    assert evaluate("req('r0')['ttft_ms'] * 2", view) == 18.0
    assert evaluate("[n for n in [1, 2, 3] if n > 1]", view) == [2, 3]
    assert evaluate("[m.get('ttft_ms') for m in metrics['requests']]", view) == [9.0]
    for hostile in ("__import__('os')", "req.__globals__", "().__class__", "open('x')", "x := 1",
                    "(lambda: 1)()", "metrics.pop('requests')", "metrics.clear()", "'{}'.format(metrics)"):
        with pytest.raises(ClaimError):
            evaluate(hostile, view)


def test_coverage_skips_list_markers_and_cross_references_only():
    text = "1. As lesson 3 and lessons 4, 5 showed, r3 holds 13 pages.\n2. Then 7 more."
    assert unbacked(text, ["r3 holds 13 pages"]) == ["7"]
    assert unbacked(text, []) == ["13", "7", "r3"]


def test_a_claim_must_quote_the_lesson(tmp_path):
    source = LESSONS[0]
    toml = tmp_path / f"{source.id}.toml"
    toml.write_text((LESSONS_DIR / f"{source.id}.toml").read_text()
                    + '\n[[claims]]\nsays = "words the lesson never says"\nvalue = "1"\n')
    (tmp_path / f"{source.id}.md").write_text((LESSONS_DIR / f"{source.id}.md").read_text())
    with pytest.raises(LessonError, match="not in the lesson's text"):
        load_lesson(toml)
