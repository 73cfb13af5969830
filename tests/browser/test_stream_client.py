"""bench/stream_client.py, the headless session bench/classroom.py plays most of a class with, drives
a real lab server as a browser does: each click runs the step it asked for in its own session."""

from __future__ import annotations

import asyncio

import pytest

from bench.stream_client import HeadlessSession
from tests.browser.test_browser import FLAKY, server  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser, FLAKY]


async def _two_sessions(url: str) -> tuple[list[float], list[float]]:
    first, second = await HeadlessSession.open(url), await HeadlessSession.open(url)
    try:
        assert any(text.startswith("### Ready at step 0") for text in first.texts)
        ahead = [await first.click("step", f"Step {n}") for n in range(3)]
        behind = [await second.click("step", "Step 0")]  # its own run, not the other session's
        with pytest.raises(AssertionError, match="no heading 'Step 7'"):
            await first.click("step", "Step 7")  # the run shows step 3, and the client says so
        await first.click("back", "Step 2")
        return ahead, behind
    finally:
        await first.close()
        await second.close()


def test_headless_sessions_step_their_own_runs(server):  # noqa: F811 (the fixture)
    ahead, behind = asyncio.run(_two_sessions(server))
    assert len(ahead) == 3 and len(behind) == 1 and all(ms > 0 for ms in ahead + behind)
