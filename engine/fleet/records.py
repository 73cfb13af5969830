"""What a fleet did, as plain JSON-serialisable dataclasses: each routing decision with its why,
and each replica step (the engine's own StepRecord, tagged with its replica).

A student asks of every arrival "why did it go there?"; the RoutingDecision answers
with every candidate's inputs, each term of its score as weighted, the total, the
winner, its margin over the runner-up and how a tie was broken.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from engine.records import StepRecord


@dataclass(slots=True)
class Candidate:
    """One replica as the router saw it: what it read, each weighted term, and their total."""

    replica: int
    inputs: dict[str, float] = field(default_factory=dict)
    terms: dict[str, float] = field(default_factory=dict)
    total: float = 0.0


@dataclass(slots=True)
class RoutingDecision:
    """Where one arrival went, and why."""

    request_id: str
    arrival_ms: float
    router: str
    better: str  # 'lower' (a cost) or 'higher' (a score): how the totals are read
    candidates: list[Candidate]
    replica: int
    margin: float | None  # the winner's advantage over the best other replica (None: one replica)
    tie: str  # how a tie was broken ('' when there was none)
    why: str  # the decision in one sentence


@dataclass(slots=True)
class FleetRecord:
    """One fleet event, in clock order: an arrival routed, or one replica's step."""

    index: int
    clock_ms: float  # when it happened: the arrival, or the start of the replica's step
    kind: str  # 'route' or 'step'
    replica: int
    decision: RoutingDecision | None = None
    step: StepRecord | None = None

    def to_dict(self) -> dict:
        out = {"index": self.index, "clock_ms": self.clock_ms, "kind": self.kind, "replica": self.replica}
        if self.decision is not None:
            out["decision"] = dataclasses.asdict(self.decision)
        if self.step is not None:
            out["step"] = self.step.to_dict()
        return out
