"""A fleet run in the lab, and time travel over it: the Fleet page's History.

A fleet event is one of what ``Fleet.step`` does next on the fleet clock: an arrival
routed, one replica's scheduler step, or in a disaggregated fleet a KV copy started.
Every FleetRecord is kept, so looking at a past event costs nothing, and stepping from a
past event moves forward through the events already run, then runs more.

A run is its knobs at event 0, its load, and a script of live changes (a router weight, the
decider, the link: engine/fleet/config.py's 'router' rows), each filed under the event it
applied before. Changing a live knob while a past event is on screen *branches*: the events
after it are dropped and a fleet rebuilt by replaying the script to it runs on with the new
value. Any other knob starts the fleet again at event 0.

    run = FleetRun(config, fleet, load)        # the replicas at event 0 (ValueError on bad knobs or load)
    run.records, run.cursor, run.record        # history, the event on screen (-1: none yet), its record
    run.step(n) / run.back() / run.seek(i)
    run.set_knobs(**knobs) -> bool             # live knobs from the next event (a branch); others restart (True)
    run.follow(changes), run.fleet_next()      # a link's script of changes; the knobs the next event runs with
    run.replica_steps(r)                       # replica r's own StepRecords up to the event on screen
    run.done, run.at_latest, run.metrics()
    run.release()                              # drop the replicas; the next use re-runs the events
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine import EngineConfig, LoadedModel, StepRecord, load_model
from engine.fleet.config import LIVE_FLEET_KNOBS, FleetConfig
from engine.fleet.fleet import Fleet
from engine.fleet.metrics import fleet_metrics
from engine.fleet.records import FleetRecord
from engine.fleet.workload import MOONCAKE, FleetRequest, mooncake_requests, shared_prefix_requests
from lab.budgets import FLEET_EVENTS, check_fleet
from lab.run import ReplayError

Loader = Callable[[str, str, str], LoadedModel]
LOADS = (*MOONCAKE, "shared-prefix")  # what the lab's fleet serves: a real trace, or drawn sessions
FLEET_DEPLOYMENT = "llama-3.1-8b@h100-sxm"  # the modeled clock every replica steps on, unless the knobs name another
MAX_DURATION_S = 120.0  # of load, in the lab: a class's server steps every event of it


@dataclass(frozen=True)
class FleetLoad:
    """What the fleet serves: a window of a shipped Mooncake trace (its own timing, or rescaled to
    `rate` requests/s), or sessions sharing system prompts drawn at `rate` (4/s when unset)."""

    trace: str = "mooncake-conv"
    duration_s: float = 10.0
    start_s: float = 0.0
    rate: float | None = None

    def __post_init__(self) -> None:
        if self.trace not in LOADS:
            raise ValueError(f"trace must be one of {', '.join(LOADS)}; got {self.trace!r}")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"duration_s must be in (0, {MAX_DURATION_S:g}] seconds in the lab; got {self.duration_s}")

    def requests(self, vocab_size: int) -> list[FleetRequest]:
        if self.trace == "shared-prefix":
            return shared_prefix_requests(vocab_size, self.rate or 4.0, self.duration_s)
        return mooncake_requests(self.trace, vocab_size, self.duration_s, self.start_s, self.rate)

    def label(self) -> str:
        timing = "its own timing" if self.rate is None else f"{self.rate:g} requests/s"
        start = f" from {self.start_s:g} s" if self.start_s and self.trace != "shared-prefix" else ""
        return f"{self.trace}, {self.duration_s:g} s{start}, {timing}"


def _without_wall_times(record: FleetRecord) -> dict:
    """The record as data, less the wall times of its step: what must be equal when it is re-run."""
    data = record.to_dict()
    if "step" in data:
        data["step"].pop("timings")
    return data


def fleet_config(config: EngineConfig) -> EngineConfig:
    """The replicas' engine knobs: a fleet needs a modeled clock, and prefix caching is what
    a KV-aware router reads."""
    return config.with_changes(deployment=config.deployment or FLEET_DEPLOYMENT)


class FleetRun:
    """A fleet, its records and the event on screen."""

    def __init__(self, config: EngineConfig, fleet: FleetConfig, load: FleetLoad, loader: Loader = load_model):
        self.config, self.fleet, self.load = fleet_config(config), fleet, load  # fleet: the knobs at event 0
        self._loader = loader
        self.records: list[FleetRecord] = []
        self.changes: dict[int, dict[str, object]] = {}  # event index -> live knobs set just before it
        self.cursor = -1
        self._fleet: Fleet | None = self._build(0)

    def _build(self, num_events: int) -> Fleet:
        """A fleet at event 0 with the load submitted, then run through the first num_events recorded
        events with the script's changes, and the changes due before the next; each event must come out
        as recorded (the fleet is deterministic), else ReplayError."""
        loaded = self._loader(self.config.model, self.config.device, self.config.dtype)
        check_fleet(self.config, self.fleet, loaded)
        fleet = Fleet(self.config, self.fleet, loaded)
        requests = self.load.requests(loaded.vocab_size)
        for request in requests:
            request.submit(fleet)
        self.num_requests = len(requests)
        for index in range(num_events + 1):
            if index in self.changes:
                fleet.retune(**self.changes[index])
            if index == num_events:
                break
            if _without_wall_times(fleet.step()) != _without_wall_times(self.records[index]):
                raise ReplayError(f"re-running the fleet gave another event {index}: it is not deterministic")
        return fleet

    @property
    def live(self) -> Fleet:
        """The fleet itself, after the last recorded event (the metrics read it); rebuilt after release()."""
        if self._fleet is None:
            self._fleet = self._build(len(self.records))
        return self._fleet

    def release(self) -> None:
        """Let go of the replicas and their KV pools (a closed tab, on a shared server). The records
        stay; the next step re-runs the events into a fresh fleet."""
        self._fleet = None

    @property
    def record(self) -> FleetRecord | None:
        return self.records[self.cursor] if self.cursor >= 0 else None

    @property
    def at_latest(self) -> bool:
        return self.cursor == len(self.records) - 1

    @property
    def done(self) -> bool:
        """At the last event with nothing left to serve, or at the session's event budget."""
        return self.at_latest and (not self.live.has_unfinished_requests() or len(self.records) >= FLEET_EVENTS)

    def step(self, n: int = 1) -> list[FleetRecord]:
        """The next n events: first those already run after the cursor, then new ones (stops when done)."""
        shown = max(0, min(n, len(self.records) - 1 - self.cursor))
        self.cursor += shown
        new = []
        while len(new) < n - shown and not self.done:
            new.append(self.live.step())
            self.records.append(new[-1])
            self.cursor += 1
        return new

    def fleet_next(self) -> FleetConfig:
        """The fleet knobs the next event from the cursor runs with: event 0's and every change up to it."""
        knobs: dict[str, object] = {}
        for index in sorted(i for i in self.changes if i <= self.cursor + 1):
            knobs.update(self.changes[index])
        return dataclasses.replace(self.fleet, **knobs)

    def set_knobs(self, **knobs) -> bool:
        """Fleet knobs from the next event. If all that changes is live, the change joins the script and
        the run branches at the event on screen (the events after it are dropped); otherwise the fleet
        starts again at event 0 with the new knobs (returns True). A bad value raises ValueError and
        leaves the run as it was."""
        current = self.fleet_next()
        target = dataclasses.replace(current, **knobs)  # checked before anything changes
        changed = {k: v for k, v in dataclasses.asdict(target).items() if getattr(current, k) != v}
        if not changed:
            return False
        if not set(changed) <= LIVE_FLEET_KNOBS:
            fresh = FleetRun(self.config, target, self.load, self._loader)
            self.__dict__.update(fresh.__dict__)
            return True
        following = self.cursor + 1
        fleet = self.live if self.at_latest else self._build(following)
        fleet.retune(**changed)
        del self.records[following:]
        self.changes = {i: c for i, c in self.changes.items() if i <= following}
        self.changes.setdefault(following, {}).update(changed)
        self._fleet = fleet
        return False

    def follow(self, changes: Mapping[int, Mapping[str, object]]) -> None:
        """Run a script of live changes (a link's): each made just before its event. A change due after
        the fleet has finished is made at its end."""
        for index, knobs in sorted(changes.items()):
            self.step(index - (self.cursor + 1))
            self.set_knobs(**knobs)

    def seek(self, index: int) -> None:
        self.cursor = max(-1, min(index, len(self.records) - 1))

    def back(self) -> None:
        self.seek(self.cursor - 1)

    def replica_steps(self, replica: int) -> list[StepRecord]:
        """Replica `replica`'s own scheduler steps, up to the event on screen: its single-engine history."""
        return [r.step for r in self.records[: self.cursor + 1] if r.kind == "step" and r.replica == replica]

    def metrics(self) -> dict:
        """The fleet's metrics after the last event run (engine/fleet/metrics.py)."""
        return fleet_metrics(self.live)
