"""The offline page (issue 39) in Chromium, from file://, with every request that is not the file
refused: stepping, keys, scrubbing, presenter sizes, a lesson's questions graded right and wrong,
progress kept across a reload, a hostile run shown as text, and every figure equal to the lab's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.workload import WorkloadItem
from lab.charts.registry import Frame, figures_at
from lab.charts.style import for_projector
from lab.export import dump_run, load_run, saved_run
from lab.export.lesson_page import lesson_data, lesson_page, lesson_run
from lab.export.player import run_page
from lab.lessons import load_lessons
from lab.lessons.rules import grade
from lab.recording import Recording
from lab.run import Run
from tests.browser.test_browser import ARTIFACTS, FLAKY, ROOT, VIEWPORT, browser  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser, FLAKY]
HOSTILE = '<img src=x onerror="window.pwned=1">'
HOSTILE_ID = '<img id="fz" src=x onerror="window.pwned=2">'


def _lesson(lesson_id: str):
    return next(x for x in load_lessons() if x.id == lesson_id)


@pytest.fixture(scope="module")
def files(tmp_path_factory, loaded):
    """A lesson's page and a run's page (the run with a hand-added hostile request), and the run."""
    folder = tmp_path_factory.mktemp("offline")
    lesson = _lesson("04_kv_cache_full")
    (folder / "lesson.html").write_text(lesson_page(lesson, lambda *_: loaded))
    run = Run(lesson.engine_config(), lesson.workload.items(), lambda *_: loaded)
    run.step(2)
    run.add_request(WorkloadItem(prompt=HOSTILE + " hello", max_tokens=3))
    run.step(30)
    run.seek(-1)
    (folder / "run.html").write_text(run_page(run, "A run", "with a hostile prompt"))
    # and a run file whose request id is markup (a visitor's file): every "r1" in it renamed
    saved = load_run(dump_run(saved_run(run)).replace('"r1"', json.dumps(HOSTILE_ID)))
    (folder / "hostile_id.html").write_text(run_page(Recording(saved, "hostile.jsonl"), "A file", "hostile id"))
    return folder, run


def _open(browser, path):  # noqa: F811 (the fixture)
    """A fresh context, its non-file requests refused and counted; the page once the player is ready."""
    context = browser.new_context(viewport=VIEWPORT)
    refused: list[str] = []
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                  else (refused.append(route.request.url), route.abort()))
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(30_000)
    page.goto(path.as_uri())
    page.wait_for_function("document.body.dataset.ready === '1'")
    return context, page, refused, errors


def _cursor(page) -> int:
    return page.evaluate("window.labPlayer.cursor")


def _expected(run: Run, i: int, presenter: bool = False) -> dict:
    frame = Frame(run.records[:i + 1], len(run.records))
    out = {}
    for key, figure in figures_at(frame, exported_only=True).items():
        built = figure.build(frame)
        out[key] = json.loads((for_projector(built) if presenter else built).to_json())
    return out


def _shown(page, keys) -> dict:
    return {key: json.loads(page.evaluate(f"JSON.stringify(window.labPlayer.figure({key!r}))")) for key in keys}


def test_the_run_steps_scrubs_and_draws_the_labs_own_figures(browser, files):  # noqa: F811
    folder, run = files
    context, page, refused, errors = _open(browser, folder / "run.html")
    assert _cursor(page) == -1 and page.get_by_role("heading", name="Ready at step 0").is_visible()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    assert _cursor(page) == 2 and page.inner_text("#p-where") == f"step 2 of {len(run.records) - 1}"
    page.keyboard.press("ArrowLeft")
    page.get_by_role("button", name="Step →").click()
    page.get_by_role("button", name="Step →").click()
    assert _cursor(page) == 3
    page.get_by_role("button", name="← Back").click()
    assert _cursor(page) == 2
    page.locator("#p-scrub").fill("17")
    assert _cursor(page) == 17 and page.get_by_role("heading", name="Step 17 of").is_visible()
    for i in (17, 3, len(run.records) - 1, 0):
        page.evaluate(f"window.labPlayer.seek({i})")  # far jumps rebuild from the whole copy before them
        expected = _expected(run, i)
        assert _shown(page, list(expected)) == expected, i
        hidden = page.evaluate("[...document.querySelectorAll('.p-view[hidden]')].map(v => v.dataset.key)")
        assert set(hidden) == {"roofline", "padding"} - set(expected)
    page.wait_for_function("window.labPlayer.drawn('queues') && window.labPlayer.drawn('budget')")
    page.locator("#p-presenter").check()
    expected = _expected(run, 0, presenter=True)
    assert _shown(page, list(expected)) == expected
    page.locator("#p-head h2").click()  # off the checkbox, which Space would toggle
    page.keyboard.press("Space")
    page.wait_for_function("window.labPlayer.cursor >= 2")
    page.keyboard.press("Space")
    assert page.inner_text("#p-play") == "▶ Play"
    page.screenshot(path=str(ARTIFACTS / "offline-run.png"))
    assert refused == [] and errors == []
    context.close()


def test_a_hostile_run_is_shown_as_text(browser, files):  # noqa: F811
    folder, run = files
    context, page, refused, errors = _open(browser, folder / "run.html")
    assert HOSTILE in page.inner_text("#p-head")  # the intro table, before step 0
    page.evaluate("window.labPlayer.seek(2)")  # the step the request was added before
    assert HOSTILE[:20] in page.inner_text(".p-why")
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("window.pwned") is None
    assert refused == [] and errors == []
    context.close()
    context, page, refused, errors = _open(browser, folder / "hostile_id.html")
    for step in (-1, 0, 5, 12):
        page.evaluate(f"window.labPlayer.seek({step})")
        page.wait_for_function("window.labPlayer.drawn('queues') || window.labPlayer.cursor < 0")
        assert page.locator("#fz, img").count() == 0 and page.evaluate("window.pwned") is None, step
    page.evaluate("window.labPlayer.seek(0)")
    assert HOSTILE_ID in page.inner_text(".p-why")  # the id, as text, in step 0's decisions
    assert refused == [] and errors == []
    context.close()


def _answer(page, question: dict, value) -> None:
    box = page.locator(".p-question")
    if question["kind"] == "ids":
        for rid in value:
            box.get_by_label(rid).check()
    elif question["kind"] == "choice":
        box.get_by_label(value, exact=True).check()
    else:
        box.get_by_label("Your prediction").fill(str(value))
    box.get_by_role("button", name="Lock in and run the step").click()


def test_a_lesson_grades_in_the_page_and_keeps_progress_over_a_reload(browser, files, loaded):  # noqa: F811
    folder, _ = files
    lesson = _lesson("04_kv_cache_full")
    run = lesson_run(lesson, lambda *_: loaded)
    first, second = lesson_data(lesson, run)["questions"]
    context, page, refused, errors = _open(browser, folder / "lesson.html")
    page.evaluate(f"window.labPlayer.seek({first['at_step'] - 1})")
    assert page.locator(".p-question").is_visible()
    _answer(page, first, first["right"])  # right
    assert _cursor(page) == first["at_step"]
    reveal = page.locator(".p-right")
    assert f"Step {first['at_step']}: Right." in reveal.inner_text()
    assert f"the engine's answer: {first['right_text']}." in reveal.inner_text()
    assert grade(lesson.checkpoints[0], run.records[first["at_step"]], first["right"]).correct

    page.evaluate(f"window.labPlayer.seek({second['at_step'] - 1})")
    page.locator(".p-question").get_by_label("Your prediction").fill("lots")  # not a number: named, not graded
    page.locator(".p-question").get_by_role("button", name="Lock in and run the step").click()
    assert "the answer must be a number; got 'lots'" in page.inner_text(".p-error")
    assert _cursor(page) == second["at_step"] - 1
    wrong = second["right"] + 7
    _answer(page, second, wrong)
    assert f"Step {second['at_step']}: Not quite. You said {wrong}" in page.inner_text(".p-wrong")
    assert not grade(lesson.checkpoints[1], run.records[second["at_step"]], wrong).correct
    assert page.inner_text("#p-score") == "1 / 2 right · 2 of 2 questions answered"

    page.reload()
    page.wait_for_function("document.body.dataset.ready === '1'")
    assert _cursor(page) == second["at_step"]
    assert page.inner_text("#p-score") == "1 / 2 right · 2 of 2 questions answered"
    assert page.locator(".p-wrong").is_visible()
    page.locator("#p-lesson a[href='#preemption']").first.click()  # a glossary link stays in the page
    assert page.url.endswith("#preemption") and page.locator("dt#preemption").is_visible()
    page.screenshot(path=str(ARTIFACTS / "offline-lesson.png"))
    assert refused == [] and errors == []
    context.close()


def test_the_offline_page_benchmark_runs(tmp_path):
    """In its own process: this module's browser already holds Playwright's loop."""
    done = subprocess.run([sys.executable, "-m", "bench.offline_page", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "offline_page.json").read_text())
    assert result["steps"] == 60 and result["refused_requests"] == 0
    assert result["open_s"] > 0 and 0 < result["size_mb"] < result["budgets"]["size_mb"]
