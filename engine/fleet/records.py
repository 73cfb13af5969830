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
    pool: str = "all"  # the replicas it chose among: 'all', or in a disaggregated fleet 'prefill' or 'decode'


@dataclass(slots=True)
class Handoff:
    """A disaggregated request: prefilled on one replica, its prompt's KV copied to another that decodes
    it. Times are on the fleet clock; tokens and bytes are what the link carried (the decode replica's
    own cached prefix is not sent)."""

    request_id: str
    prefill_replica: int
    decode_replica: int
    decided: str  # why it was disaggregated (the decider's words)
    prefill_done_ms: float | None = None  # its first token sampled, on the prefill replica
    pages_reserved_ms: float | None = None  # the decode replica took pages for it (it may have waited)
    transfer_start_ms: float | None = None  # the link was free
    transfer_end_ms: float | None = None
    decode_start_ms: float | None = None  # its first step on the decode replica began
    tokens: int = 0  # prompt tokens copied (scaled, as the engine holds them)
    cached_pages: int = 0  # leading pages the decode replica already held, not sent
    bytes: float = 0.0  # bytes per GPU over the link, at full size

@dataclass(slots=True)
class ReplicaState:
    """One replica just after a fleet event, read from its engine: what the Fleet page's strip draws,
    kept per event so that looking back shows the fleet as it was."""

    replica: int
    role: str  # 'all', 'prefill' or 'decode'
    waiting: int  # not yet scheduled (queued, arrived in the step now running, or KV copied in and ready)
    running: int
    kv_used: int  # pages held by requests
    kv_cached: int  # free pages that still hold a cached prefix, reusable until taken
    num_gpu_blocks: int
    in_flight: int  # requests its router sent it and has not heard finish
    clock_ms: float  # its own modeled clock: the end of its last step


@dataclass(slots=True)
class FleetRecord:
    """One fleet event, in clock order: an arrival routed, or one replica's step."""

    index: int
    clock_ms: float  # when it happened: the arrival, or the start of the replica's step
    kind: str  # 'route', 'step', or in a disaggregated fleet 'kv_transfer' (started) and 'kv_arrived'
    replica: int
    decision: RoutingDecision | None = None  # where it decodes (or runs, in an aggregated fleet)
    step: StepRecord | None = None
    prefill: RoutingDecision | None = None  # where a disaggregated request is prefilled
    handoff: Handoff | None = None
    placed: str = ""  # a disaggregated fleet's arrival: why the decider sent it apart or kept it on its decode replica
    replicas: list[ReplicaState] = field(default_factory=list)  # every replica after the event

    def to_dict(self) -> dict:
        out = {"index": self.index, "clock_ms": self.clock_ms, "kind": self.kind, "replica": self.replica,
               "placed": self.placed, "replicas": [dataclasses.asdict(r) for r in self.replicas]}
        if self.decision is not None:
            out["decision"] = dataclasses.asdict(self.decision)
        if self.step is not None:
            out["step"] = self.step.to_dict()
        for name in ("prefill", "handoff"):
            if getattr(self, name) is not None:
                out[name] = dataclasses.asdict(getattr(self, name))
        return out
