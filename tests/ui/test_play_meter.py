"""Auto-play's speed as delivered: what the step header says while playing (ui/play_meter.py)."""

from __future__ import annotations

import pytest

from ui.play_meter import PlayMeter


def played(starts: list[float], busy_s: float) -> PlayMeter:
    meter = PlayMeter()
    for start in starts:
        meter.finished(meter.started(start), start + busy_s)
    return meter


def test_the_speed_asked_is_said_until_three_steps_have_played():
    assert played([0.0, 0.5], 0.1).rate() is None
    assert played([0.0, 0.5], 0.1).note(2.0) == "playing at 2.0 steps/s"


def test_a_speed_delivered_is_the_steps_over_the_time_they_took():
    meter = played([0.0, 0.5, 1.0, 1.5, 2.0], 0.2)
    assert meter.rate() == pytest.approx(2.0)
    assert meter.note(2.0) == "playing at 2.0 steps/s"


def test_what_holds_the_speed_back_is_said():
    """Asked 8 steps/s, a step comes every 400 ms, 125 ms of it on the server: 2.5 steps/s arrive."""
    meter = played([0.4 * i for i in range(6)], 0.125)
    assert meter.rate() == pytest.approx(2.5)
    assert meter.note(8.0) == ("playing at 2.5 of the 8.0 steps/s asked: a step comes every 400 ms, 125 ms of it "
                               "computing on the server, the rest sending and drawing the charts")


def test_only_the_recent_steps_count_and_play_starts_afresh():
    meter = played([0.0, 10.0] + [10.0 + 0.5 * i for i in range(1, 8)], 0.1)  # a long first gap, then 2 / s
    assert meter.rate() == pytest.approx(2.0)
    meter.restart()
    assert meter.rate() is None and meter.note(4.0) == "playing at 4.0 steps/s"
