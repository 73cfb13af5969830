"""Auto-play's delivered speed, and what holds it back.

Streamlit reruns the live fragment on a browser timer at the speed asked, but a tick that
comes while the previous step is still being computed, sent or drawn waits for it: on two
shared cores a step came every 400 ms at most (127 ms of it on the server, the rest the
browser drawing five charts), so 8 steps/s delivered 2.5. The step header says the speed
delivered and where the time goes, so the control never claims more than the student gets.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

WINDOW = 8  # the play steps the speed is averaged over: recent enough to follow a speed change
NEAR = 0.9  # delivered within this share of the speed asked reads as the speed asked


@dataclass
class PlayMeter:
    """When each play step started, and how long its run of the page took."""

    starts: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    busy_s: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def restart(self) -> None:
        """Play pressed: earlier plays (and the pause between) say nothing of this one's speed."""
        self.starts.clear()
        self.busy_s.clear()

    def started(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self.starts.append(now)
        return now

    def finished(self, started: float, now: float | None = None) -> None:
        self.busy_s.append((time.monotonic() if now is None else now) - started)

    def rate(self) -> float | None:
        """Steps per second over the recent play steps; None until there are three."""
        if len(self.starts) < 3 or self.starts[-1] <= self.starts[0]:
            return None
        return (len(self.starts) - 1) / (self.starts[-1] - self.starts[0])

    def note(self, asked: float) -> str:
        """What the step header says while playing."""
        rate = self.rate()
        if rate is None:
            return f"playing at {asked:.1f} steps/s"
        if rate >= NEAR * asked:
            return f"playing at {rate:.1f} steps/s"
        busy_ms = 1000 * sum(self.busy_s) / len(self.busy_s)
        return (f"playing at {rate:.1f} of the {asked:.1f} steps/s asked: a step comes every {1000 / rate:,.0f} ms, "
                f"{busy_ms:,.0f} ms of it computing on the server, the rest sending and drawing the charts")
