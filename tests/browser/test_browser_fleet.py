"""The Fleet page in a real browser (Chromium through Playwright): step and go back by button and key,
open a replica, follow a link, and fit a 1280x720 projector and a 390x844 phone."""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest
from playwright.sync_api import expect

from tests.browser import test_browser
from tests.browser.test_browser import assert_no_exception, button, connected, screenshot

pytestmark = [pytest.mark.browser, test_browser.FLAKY]

server, browser = test_browser.server, test_browser.browser  # a server of this module's own


def wait_for_event(page, event: int) -> None:
    page.get_by_role("heading", name=re.compile(rf"^Event {event}\b")).wait_for()
    page.wait_for_load_state("networkidle")


@contextmanager
def open_fleet(browser, server, query: str = "", viewport: dict | None = None):
    """The Fleet page in a context of its own, closed however the test ends."""
    context = browser.new_context(viewport=viewport or test_browser.VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{server}/fleet{query}")
        yield page
    finally:
        context.close()


def test_step_back_and_the_arrow_keys_move_through_fleet_events(browser, server):
    with open_fleet(browser, server) as page:
        page.get_by_text("requests will arrive").wait_for()
        button(page, "Step").click()
        wait_for_event(page, 0)
        assert page.get_by_text("The router's decision").is_visible()
        assert "event=0" in page.url
        page.wait_for_function("() => window.labKeys !== undefined")
        connected(page)
        for _ in range(3):  # three presses, each one event, however fast
            page.keyboard.press("ArrowRight")
            page.wait_for_timeout(150)
        wait_for_event(page, 3)
        button(page, "Back").click()
        wait_for_event(page, 2)
        assert "event=2" in page.url
        screenshot(page, "fleet_event2.png")
        button(page, "Play").click()  # from a past event it plays on through the events already run, then more
        page.wait_for_function("""() => [...document.querySelectorAll("h3")].some(h => {
                                   const m = h.innerText.match(/^Event (\\d+)/); return m && Number(m[1]) >= 6; })""")
        button(page, "Pause").click()
        button(page, "Play").wait_for(timeout=10_000)
        assert_no_exception(page)


def test_a_link_opens_its_fleet_at_its_event_and_a_replica_opens_beside_it(browser, server):
    with open_fleet(browser, server, "?f.router=llmd&f.num_replicas=3&event=40") as page:
        wait_for_event(page, 40)
        expect(page.locator(".st-key-fleet_router input")).to_have_value("llmd", timeout=60_000)  # the link's router
        assert page.locator(".st-key-fleet_replicas .ytick text").count() == 3
        page.get_by_test_id("stButtonGroup").get_by_text("replica 1").click()
        page.get_by_role("heading", name=re.compile(r"^replica 1, after its step \d+")).wait_for()
        page.locator(".st-key-fleet_replica_blocks .main-svg").first.wait_for()
        assert "f.router=llmd" in page.url and "event=40" in page.url
        screenshot(page, "fleet_replica_open.png")
        assert_no_exception(page)


def test_on_a_1280x720_projector_the_replicas_and_the_decision_are_on_the_first_screen(browser, server):
    with open_fleet(browser, server, "?present=1&event=30&f.num_prefill_replicas=1",
                    {"width": 1280, "height": 720}) as page:
        wait_for_event(page, 30)
        page.wait_for_timeout(1_000)  # the charts settle to their height
        assert page.get_by_test_id("stSidebar").count() == 0 or not page.get_by_test_id("stSidebar").is_visible()
        strips = page.locator(".st-key-fleet_replicas").bounding_box()
        decision = page.get_by_role("heading", name="The router's decision").bounding_box()
        assert strips["y"] + strips["height"] <= 720, "the replicas run off the first screen"
        assert decision["y"] + decision["height"] <= 720, "the router's decision is below the first screen"
        screenshot(page, "fleet_presenter_1280x720.png")
        assert_no_exception(page)


def test_on_a_phone_the_page_fits_its_width_and_steps(browser, server):
    with open_fleet(browser, server, "?event=20", {"width": 390, "height": 844}) as page:
        wait_for_event(page, 20)
        button(page, "Step").click()
        wait_for_event(page, 21)
        page.wait_for_timeout(1_000)
        width = page.evaluate("document.querySelector('[data-testid=stMain]').scrollWidth")
        assert width <= 390, f"the page is {width} px wide on a 390 px phone"
        labels = page.locator(".st-key-fleet_replicas .ytick text")
        assert labels.count() == 4
        for i in range(4):  # every replica's name and counts are drawn whole, none cut off at the edge
            label = labels.nth(i).bounding_box()
            assert label["x"] >= 0 and label["x"] + label["width"] <= 390, labels.nth(i).text_content()
        screenshot(page, "fleet_phone.png")
        assert_no_exception(page)


def test_ab_runs_two_fleets_on_the_same_requests_and_tabulates_them(browser, server):
    with open_fleet(browser, server, "?load.duration_s=3.0") as page:
        page.get_by_text("requests will arrive").wait_for()
        page.get_by_role("tab", name="A/B: two fleets").click()
        box = page.locator(".st-key-fleet_ab_router input")
        box.scroll_into_view_if_needed()
        box.click()
        page.keyboard.type("round_robin")
        page.keyboard.press("Enter")
        expect(box).to_have_value("round_robin")
        button(page, "Run A and B to the end").click()
        page.get_by_text("Goodput counts requests that met the SLO").wait_for(timeout=120_000)
        grid = page.get_by_test_id("stDataFrame").first  # its cells are drawn on a canvas; its size says its rows
        grid.wait_for(timeout=30_000)
        assert grid.bounding_box()["height"] > 60
        screenshot(page, "fleet_ab.png")
        assert_no_exception(page)


def test_a_step_reruns_the_stage_not_the_sidebar_and_a_kv_copy_is_drawn_between_strips(browser, server):
    """A Step's messages draw nothing in the sidebar (the stage is a fragment; each delta names its root
    container, 1 for the sidebar); on a disaggregated fleet, a copy on the link is an arrow from the
    prefill strip to the decode strip."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    frames: list[bytes] = []
    with open_fleet(browser, server, "?f.num_prefill_replicas=1&event=23") as page:
        page.on("websocket", lambda ws: ws.on("framereceived", lambda data: frames.append(data)))
        page.reload()
        wait_for_event(page, 23)
        connected(page)
        frames.clear()
        button(page, "Step").click()
        wait_for_event(page, 24)
        roots = []
        for data in frames:
            msg = ForwardMsg()
            msg.ParseFromString(data)
            if msg.WhichOneof("type") == "delta":
                roots.append(msg.metadata.delta_path[0])
        assert roots and 1 not in roots, "a Step redrew part of the sidebar"
        arrows = page.locator(".st-key-fleet_replicas .annotation-arrow-g")
        expect(arrows.first).to_be_attached()
        assert page.locator(".st-key-fleet_replicas").get_by_text(re.compile(r"on the link: r\d+ 0→\d")).count()
        screenshot(page, "fleet_kv_on_the_link.png")
        assert_no_exception(page)
