"""The lab on a 390x844 phone, in a real browser (Chromium through Playwright).

Streamlit stacks columns below 640 px. Each test here failed before its fix: the step bar's
eight buttons stacked as icons without names, the KV map's two pool titles ran into each other,
Plotly's toolbar sat on the timeline's legend, and the A/B form's "A" and "B" headers became a
list above the knobs, so no input said which side it was.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser import test_browser
from tests.browser.test_browser import assert_no_exception, button, screenshot, wait_for_step

pytestmark = [pytest.mark.browser, test_browser.FLAKY]

server, browser = test_browser.server, test_browser.browser  # a server of this module's own
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def phone(browser):
    context = browser.new_context(viewport=PHONE, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def box(locator) -> dict:
    locator.scroll_into_view_if_needed()
    return locator.bounding_box()


def overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and \
        a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def test_on_a_phone_the_step_bar_wraps_two_to_a_row_with_its_labels(phone, server):
    phone.goto(f"{server}/?step=3")
    wait_for_step(phone, 3)
    back, step = box(button(phone, "Back")), box(button(phone, "Step"))
    assert abs(back["y"] - step["y"]) < 2, "Back and Step are on rows of their own"
    assert box(button(phone, "Step").locator("p"))["width"] > 20, "the Step button shows no name"
    assert_no_exception(phone)


def test_on_a_phone_the_charts_titles_legends_and_toolbar_do_not_overlap(phone, server):
    phone.goto(f"{server}/?step=12")
    wait_for_step(phone, 12)
    titles = phone.locator(".st-key-blocks .annotation")
    titles.nth(1).wait_for()  # Plotly has drawn the KV map (seconds, on a busy machine)
    phone.wait_for_timeout(1_000)  # the charts settle to their size
    assert titles.count() == 2  # the GPU pool and the CPU swap space
    assert not overlap(box(titles.nth(0)), box(titles.nth(1))), "the KV map's pool titles overlap"

    timeline = phone.locator(".st-key-timeline")
    timeline.locator(".nsewdrag").first.scroll_into_view_if_needed()
    timeline.locator(".nsewdrag").first.tap()  # a tap shows Plotly's toolbar, as hovering does
    toolbar = timeline.locator(".modebar")
    toolbar.wait_for()
    plot = timeline.locator(".nsewdrag").first.bounding_box()
    legend = timeline.locator(".legend").bounding_box()
    assert not overlap(toolbar.bounding_box(), legend), "Plotly's toolbar covers the timeline's legend"
    assert legend["y"] >= plot["y"] + plot["height"], "the legend is no longer under the chart"
    screenshot(phone, "phone_lab.png")
    assert_no_exception(phone)


def test_on_a_phone_each_ab_input_says_which_side_it_sets(phone, server):
    phone.goto(f"{server}/ab")
    form = phone.get_by_test_id("stForm")
    form.wait_for()
    for side in "AB":  # each knob's input says its side (and the knob's range)
        expect(form.get_by_text(f"{side} (1 to 1,000,000)").first).to_be_visible()  # num_gpu_blocks, the first
    expect(phone.locator(".st-key-ab_header")).to_have_count(1)
    expect(phone.locator(".st-key-ab_header")).to_be_hidden()  # it showed as a list: "knob", "A", "B"
    screenshot(phone, "phone_ab.png")

    phone.set_viewport_size({"width": 1280, "height": 800})  # wide: one header row, no label per input
    phone.locator(".st-key-ab_header").wait_for()
    expect(form.get_by_text("A (1 to 1,000,000)").first).to_be_hidden()
    assert_no_exception(phone)
