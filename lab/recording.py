"""A saved run, replayed: its records shown by the same views as a live run, no engine behind them.

A Recording is a History whose future is fixed: Step (and Play) move forward
through the recorded steps and stop at the last one; nothing can be changed.
``continue_live`` re-runs the file's config and workload on the engine and, if
every recorded step comes out the same, hands back a live Run at the same step.
"""

from __future__ import annotations

from engine import StepRecord
from lab.export import SavedRun
from lab.run import History, Loader, Run

FIXED = "a saved run is replayed as it was recorded; go back to the live lab to {}"


class Recording(History):
    def __init__(self, saved: SavedRun, name: str):
        super().__init__(saved.config, saved.workload, saved.records)
        self.changes = dict(saved.changes)
        self.name = name  # the file it came from

    @property
    def done(self) -> bool:
        return self.at_latest

    def step(self, n: int = 1) -> list[StepRecord]:
        first = self.next_step
        self.seek(self.cursor + n)
        return self.records[first:self.next_step]

    def reset(self, *_) -> None:
        self.seek(-1)

    def set_knobs(self, **knobs) -> bool:
        raise ValueError(FIXED.format("change knobs"))

    def add_request(self, item) -> str:
        raise ValueError(FIXED.format("add requests"))

    def continue_live(self, load: Loader) -> Run:
        """A live Run of the file's config and workload, at the step on screen. ValueError (or
        OSError, from the model) if the engine cannot run it or does not reproduce every step."""
        run = Run(self.config, self.workload, load=load)
        run.follow({step: change for step, change in self.changes.items() if step <= len(self.records)})
        run.step(len(self.records) - len(run.records))
        if [r.without_timings() for r in run.records] != [r.without_timings() for r in self.records]:
            raise ValueError("re-running it did not reproduce its steps (it was recorded with another model or "
                             "another engine version)")
        run.seek(self.cursor)
        return run
