"""A class on one server: sixteen browser sessions, each stepping its own run from its own link.

No state of one session may appear in another, nothing raises, the server stays responsive, and
once the class has closed its tabs the server's memory is back near where one visitor left it
(ui/reaper.py). Step latency under this load and the server's memory are written to
artifacts/classroom.json (bench/RESULTS.md quotes them)."""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

import pytest

from tests.browser import test_browser
from tests.browser.test_browser import ARTIFACTS, SERVER_LOGS, VIEWPORT, assert_no_exception, button, connected
from ui import reaper

pytestmark = [pytest.mark.browser, test_browser.FLAKY]

server, browser = test_browser.server, test_browser.browser
SESSIONS = 16
STEPS = 2


def _server_pid(url: str) -> int | None:
    """The streamlit process serving url (for its memory), found by its port in /proc."""
    port = url.rsplit(":", 1)[1]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"streamlit" in b" ".join(args) and port.encode() in args:
            return int(cmdline.parent.name)
    return None


def _rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def _rss_once_reaped_mb(pid: int | None) -> float | None:
    """The server's memory after the reaper has had its chance at every closed tab (and settled)."""
    time.sleep(reaper.GRACE_S + 2 * reaper.EVERY_S)
    readings = [_rss_mb(pid)]
    for _ in range(10):
        time.sleep(reaper.EVERY_S)
        readings.append(_rss_mb(pid))
        if readings[-1] is None or abs(readings[-1] - readings[-2]) < 2:
            break
    return readings[-1]


def _visit(browser, server) -> None:
    """One visitor: open the lab, take a step, close the tab."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(server)
    page.get_by_role("heading", name="Ready at step 0").wait_for()
    connected(page)
    button(page, "Step").click()
    page.get_by_role("heading", name=re.compile(r"^Step 0\b")).wait_for()
    context.close()


def test_sixteen_sessions_step_their_own_runs_and_never_see_each_other(browser, server):
    pid = _server_pid(server)
    _visit(browser, server)  # the model, torch and plotly loaded: what every later visitor shares
    start_mb = _rss_once_reaped_mb(pid)
    contexts, pages = [], []
    for i in range(SESSIONS):  # each its own pool size: what each page shows must be its own
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(180_000)
        page = context.new_page()
        page.goto(f"{server}/?preset=chat_mix&k.num_gpu_blocks={40 + i}", wait_until="commit")
        contexts.append(context)
        pages.append(page)
    for page in pages:
        page.get_by_role("heading", name="Ready at step 0").wait_for()
    latencies = []
    for step in range(STEPS):
        for page in pages:
            connected(page)
            t0 = time.perf_counter()
            button(page, "Step").click()
            page.get_by_role("heading", name=re.compile(rf"^Step {step}\b")).wait_for()
            latencies.append((time.perf_counter() - t0) * 1000)
    peak_mb = _rss_mb(pid)
    for i, page in enumerate(pages):
        assert page.locator(".st-key-knob_num_gpu_blocks input").input_value() == str(40 + i)
        pages_badge = page.get_by_text(re.compile(rf"KV \d+ / {40 + i} pages")).first
        assert pages_badge.is_visible(), f"session {i} shows another session's pool"
        assert f"k.num_gpu_blocks={40 + i}" in page.url and f"step={STEPS - 1}" in page.url
        assert_no_exception(page)
    for context in contexts:
        context.close()
    after_mb = _rss_once_reaped_mb(pid)
    _visit(browser, server)  # the server still answers a newcomer after the class has left
    latencies.sort()
    result = {"sessions": SESSIONS, "steps_each": STEPS, "step_ms_p50": round(statistics.median(latencies)),
              "step_ms_p95": round(latencies[int(0.95 * (len(latencies) - 1))]), "server_rss_mb_start": start_mb,
              "server_rss_mb_peak": peak_mb, "server_rss_mb_after_close": after_mb}
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "classroom.json").write_text(json.dumps(result, indent=1))
    assert "Traceback" not in SERVER_LOGS[__name__].read_text()
    if pid is not None:  # the class's engines and KV pools were given back, not kept for Streamlit's TTL
        class_mb = peak_mb - start_mb
        assert after_mb - start_mb < max(0.25 * class_mb, 20), result
