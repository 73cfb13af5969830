"""A hostile visitor in Chromium (issue 32, cases 3 and 4): what a link or a file holds is drawn as
text. No element, link or image from the input reaches the page, and the page keeps working."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from engine.workload import WorkloadItem, dump_workload
from tests.browser import test_browser
from tests.browser.test_browser import VIEWPORT, assert_no_exception, button, wait_for_step

pytestmark = [pytest.mark.browser, test_browser.FLAKY]

server, browser = test_browser.server, test_browser.browser  # a server of this module's own
EVIL = "http://evil.example/login"


@pytest.fixture
def visitor(browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(60_000)
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if r.url.startswith(("http://evil.example",
                                                                              "http://127.0.0.1:9/")) else None)
    yield page, fetched
    context.close()


def no_input_markup(page, fetched) -> None:
    links = page.locator('a[href*="evil.example"]')
    assert links.count() == 0, links.first.evaluate("a => a.parentElement.parentElement.outerHTML")
    assert page.locator('img[src*="evil.example"], img[src*="127.0.0.1:9"], #fz').count() == 0
    assert not fetched  # nothing from the input was loaded
    assert_no_exception(page)


def test_a_links_markdown_and_html_are_shown_as_text(visitor, server):
    page, fetched = visitor
    params = {f"[Session expired - log in again]({EVIL})": "1", "foo": "![a](http://127.0.0.1:9/p.png)",
              "preset": f'<img id="fz" src="{EVIL}">'}
    page.goto(f"{server}?{urlencode(params)}")
    page.get_by_text("Parts of this link could not be used").wait_for()
    page.get_by_text("Session expired - log in again").first.wait_for()  # there, as text
    no_input_markup(page, fetched)


def test_an_uploaded_files_markup_is_shown_as_text(visitor, server, tmp_path):
    page, fetched = visitor
    page.goto(server)
    page.get_by_role("heading", name="Ready at step 0").wait_for()
    items = [WorkloadItem(f'<a href="{EVIL}">x</a> [log in]({EVIL}) <img id="fz" src="{EVIL}">', max_tokens=3)]
    upload = tmp_path / f"[log in]({EVIL.replace('/', '_')}).jsonl"
    upload.write_text(dump_workload(items, "jsonl"))
    page.get_by_test_id("stSidebar").get_by_text("Upload / download").first.click()
    page.locator(".st-key-upload input[type=file]").set_input_files(str(upload))
    page.get_by_text("Loaded the file").wait_for()
    button(page, "Step").click()
    wait_for_step(page, 0)
    no_input_markup(page, fetched)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x", "max_tokens": f"[log in]({EVIL})"}) + "\n")
    page.locator(".st-key-upload input[type=file]").set_input_files(str(bad))
    page.get_by_text("field 'max_tokens'").wait_for()
    no_input_markup(page, fetched)
