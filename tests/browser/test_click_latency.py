"""bench/click_latency.py runs end to end (two clicks, from a link's step) and its split of each click
adds up; bench/classroom.py runs end to end (a browser and a headless session at once, on one process
and on two behind HAProxy) and counts every click; bench/click_cost.py's probe times every click's
script run, and its parts add up to the server's CPU."""

from __future__ import annotations

import json

import pytest

from bench.common import CHROMIUM
from tests.browser.test_browser import FLAKY

pytestmark = [pytest.mark.browser, FLAKY]


def test_click_latency_quick_adds_up(tmp_path):
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    from bench import click_latency

    click_latency.main(["--quick", "--clicks", "2", "--at", "3", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "click_latency.json").read_text())
    assert data["clicks"] == 2 and data["at"] == 3 and len(data["runs"]) == 2 and len(data["fleet"]["runs"]) == 2
    assert len(data["lesson"]["runs"]) == 2
    assert data["fleet"]["p50_vs_lab"] == pytest.approx(data["fleet"]["summary"]["total_ms"]["p50"]
                                                        / data["summary"]["total_ms"]["p50"])
    for run in data["runs"] + data["lesson"]["runs"] + data["fleet"]["runs"]:
        parts = run["until_first_message_ms"] + run["server_span_ms"] + run["drawing_ms"]
        assert run["total_ms"] == pytest.approx(parts) and run["total_ms"] > 0
        assert run["messages"] > 10 and run["bytes"] > 1000


def test_classroom_quick_counts_every_click(tmp_path):
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    from bench import classroom

    classroom.main(["--quick", "--sessions", "2", "--browsers", "1", "--clicks", "2", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "classroom.json").read_text())
    for setup in ("one_process", "two_processes_behind_haproxy"):
        result = data[setup]
        assert result["clicks"] == 4 and 0 < result["p50_ms"] <= result["p90_ms"] <= result["max_ms"]
        assert result["server_cpu_ms_per_click"] > 0 and result["browser_cpu_ms_per_click"] > 0
        assert 0 < result["browsers"]["p50_ms"] <= result["browsers"]["max_ms"] <= result["max_ms"]
    alone = data["alone"]  # one session of each kind, two clicks each, measured before the class
    assert alone["browser"]["clicks"] == alone["headless"]["clicks"] == 2
    assert alone["headless"]["browser_cpu_ms_per_click"] == 0 < alone["browser"]["browser_cpu_ms_per_click"]
    assert data["headless_vs_browser_server_cpu"] == pytest.approx(
        alone["headless"]["server_cpu_ms_per_click"] / alone["browser"]["server_cpu_ms_per_click"])


def test_click_cost_quick_times_every_click(tmp_path):
    from bench import click_cost

    click_cost.main(["--quick", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "click_cost.json").read_text())
    assert set(data["pages"]) == {"lab", "lesson 12 from step 20"}
    for page in data["pages"].values():
        assert page["script_runs"] == page["clicks"] == len(page["server_cpu_ms"]) == 3
        split = page["split_ms"]
        assert list(split) == list(click_cost.PARTS)
        # The probe's script runs fit in the process's CPU over the clicks (read in 10 ms ticks, so a click's
        # reading may be a tick short): a probe that timed anything else, such as the link's replay, would not.
        assert split["outside the script"] > -10
        # Every Step ran the engine, built figures, turned them into messages and ran the rest of the page.
        assert all(split[part] > 0 for part in ("engine step", "figures built", "figures to JSON", "page script"))
