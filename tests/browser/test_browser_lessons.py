"""A lesson in a real browser: open it from the Lessons page, predict a step, see the engine's verdict.

Uses the server, browser and page fixtures of test_browser.py (one `streamlit run`
for this module). Screenshots land in artifacts/ for a human to judge, at the
1280x800 viewport and in presenter mode.
"""

from __future__ import annotations

import pytest

from tests.browser import test_browser
from tests.browser.test_browser import assert_no_exception, button, screenshot, wait_for_step
from tests.lab.test_lessons import BY_ID, finish

pytestmark = [pytest.mark.browser, test_browser.FLAKY]

# The fixtures this module shares with test_browser.py (loaded, the lessons' model, is in tests/conftest.py).
server, browser, page = test_browser.server, test_browser.browser, test_browser.page

LESSON = BY_ID["04_kv_cache_full"]


def settle(page) -> None:
    """Wait for the script run to end, so a click does not land in a redraw and get lost."""
    page.wait_for_timeout(500)
    page.get_by_test_id("stStatusWidgetRunningIcon").wait_for(state="hidden")


def test_open_a_lesson_answer_a_question_and_see_the_reveal(page, loaded):
    victim = next(c for c in LESSON.checkpoints if c.id == "victim")
    right = victim.answer_from(finish(loaded, LESSON).records[victim.at_step])

    page.get_by_role("link", name="Lessons").click()
    page.get_by_role("heading", name="Lessons").wait_for()
    screenshot(page, "lessons_catalogue.png")
    page.locator(f".st-key-start_{LESSON.id} button").click()
    panel = page.locator(".st-key-lesson_text")
    panel.wait_for()
    assert LESSON.sections[0].body.split()[0] in panel.inner_text()
    screenshot(page, "lesson_start.png")

    button(page, "Run").click()  # Run 10 stops before the step the lesson asks about
    wait_for_step(page, victim.at_step - 1)
    question = page.locator(".st-key-lesson_question")
    question.wait_for()
    assert victim.question in question.inner_text()
    settle(page)
    question.get_by_role("combobox").click()
    for request_id in right:
        page.get_by_role("option", name=request_id, exact=True).click()
    page.keyboard.press("Escape")
    screenshot(page, "lesson_question.png")

    question.get_by_role("button", name="Lock in and run the step").click()
    wait_for_step(page, victim.at_step)
    reveal = page.locator(".st-key-lesson_reveal")
    reveal.wait_for()
    assert "Right" in reveal.inner_text()
    assert_no_exception(page)
    screenshot(page, "lesson_reveal.png")

    page.get_by_test_id("stSidebar").get_by_text("Presenter mode").click()  # the same, on a projector
    page.get_by_role("button", name="Exit").wait_for()
    settle(page)
    screenshot(page, "lesson_presenter.png")
    page.get_by_role("button", name="Exit").click()
    page.get_by_test_id("stSidebar").wait_for()

    # Time travel with the scrubber reruns only the charts' fragment; the lesson panel must follow it.
    settle(page)
    page.locator("[class*=st-key-scrubber_]").get_by_role("slider").focus()
    page.keyboard.press("ArrowLeft")
    wait_for_step(page, victim.at_step - 1)
    reveal.wait_for(state="detached")
    assert_no_exception(page)


def test_a_lesson_link_opens_the_challenge_and_scores_it(page, server):
    page.goto(f"{server}/?lesson=08_it_depends")  # a course page links straight to lesson 8
    challenge = page.locator(".st-key-lesson_challenge")
    challenge.wait_for()
    challenge.get_by_role("button", name="Run to the end and score").click()
    challenge.get_by_text("Missed").wait_for()  # the starting knobs miss the targets
    page.wait_for_load_state("networkidle")
    assert_no_exception(page)
    page.set_viewport_size({"width": 1280, "height": 2000})  # the whole panel, for a reviewer
    page.wait_for_timeout(1500)
    screenshot(page, "lesson_challenge_full.png")
