"""Two lab processes behind HAProxy (tools/classroom.py), driven by Chromium: new browsers are
spread over both, every click of a session runs on the process that holds it, and so does its
websocket when the network drops it and it reconnects. A browser sent to the other process on
reconnecting meets a fresh session there: the cookie is what keeps a student's run."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from bench.click_latency import STAMP_MESSAGES, server_cpu_s
from tests.browser import test_browser
from tests.browser.test_browser import ARTIFACTS, VIEWPORT, assert_no_exception, button, connected, wait_for_step
from tools.classroom import COOKIE, classroom

pytestmark = [pytest.mark.browser, test_browser.FLAKY]

browser = test_browser.browser
PROCESSES = ("p0", "p1")


@pytest.fixture(scope="module")
def room(lab_model):
    try:
        with classroom(2, env={"LAB_MODEL": lab_model}, logs=ARTIFACTS / "classroom") as room:
            yield room
    except RuntimeError as exc:
        pytest.fail(str(exc))


def _open(browser, url: str):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.add_init_script(STAMP_MESSAGES)
    page.goto(url)
    page.get_by_role("heading", name="Ready at step 0").wait_for()
    return context, page


def _process(context) -> str:
    """The process HAProxy pinned this browser to, from the cookie it set."""
    return next(c["value"] for c in context.cookies() if c["name"] == COOKIE)


def _step(page, steps: range) -> None:
    for step in steps:
        button(page, "Step").click()
        wait_for_step(page, step)
    assert_no_exception(page)


def _drop_socket(page) -> None:
    """Close the page's websocket as a dropped network would, and wait until Streamlit has opened a new one."""
    sockets = page.evaluate("() => { window.labSockets.at(-1).close(); return window.labSockets.length; }")
    page.wait_for_function("n => labSockets.length > n && labSockets.at(-1).readyState === WebSocket.OPEN",
                           arg=sockets)
    connected(page)


def test_new_browsers_are_spread_and_each_ones_clicks_run_on_its_process(browser, room):
    opened = [_open(browser, room.url) for _ in range(4)]
    try:
        names = [_process(context) for context, _ in opened]
        assert sorted(names) == ["p0", "p0", "p1", "p1"], names  # round robin over the two
        for (_, page), mine in zip(opened, names, strict=True):
            before = {name: server_cpu_s(room.processes[int(name[1:])].pid) for name in PROCESSES}
            _step(page, range(5))
            used = {name: server_cpu_s(room.processes[int(name[1:])].pid) - before[name] for name in PROCESSES}
            other = next(name for name in PROCESSES if name != mine)
            # Five steps cost their process 40-60 ms of CPU each (bench/click_latency.py); the other process,
            # idle, spends a few ms on health checks. (Three steps once passed 0.2 s; since the stage-only
            # rerun and the unchecked figures they can come to 0.18 s, which failed a 0.2 s floor.)
            assert used[mine] > 0.1 and used[mine] > 4 * used[other], (mine, used)
        assert all(count > 0 for count in room.requests_per_process().values())
        # each process got its share of the class's two sweep and A/B turns (tools/classroom.py)
        for proc in room.processes:
            assert b"LAB_HEAVY_JOBS=1" in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        for context, _ in opened:
            context.close()


def test_a_reconnecting_session_comes_back_to_its_run(browser, room):
    context, page = _open(browser, room.url)
    try:
        _step(page, range(2))
        _drop_socket(page)
        _step(page, range(2, 3))  # the run went on from where it was: the same session, on the same process

        other = next(name for name in PROCESSES if name != _process(context))
        reached = room.requests_per_process()[other]
        context.add_cookies([{"name": COOKIE, "value": other, "url": room.url}])
        _drop_socket(page)
        assert room.requests_per_process()[other] > reached  # the new websocket went to the other process
        # ...which has never seen this session: the run cannot go on there (what a balancer without
        # stickiness would do to a student at random).
        with pytest.raises(PlaywrightTimeout):
            button(page, "Step").click(timeout=10_000)
            wait_for_step(page, 3)
    finally:
        context.close()
