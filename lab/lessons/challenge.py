"""A lesson's tuning challenge: knobs to set, targets to meet, and the score of a finished run.

A challenge may run a scenario of its own (a real trace, priced on a deployment, under an
SLO) rather than the lesson's step-by-step story; each attempt is a fresh engine run to the
end, so scoring never disturbs the run on screen.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from engine.metrics import METRICS
from engine.workload import WorkloadSource


@dataclass(frozen=True)
class Target:
    """A bound on one metric of the finished run, e.g. ttft_ms.p95 at most 800 or goodput at least 7.5."""

    metric: str  # a METRICS id
    max: float | None = None
    min: float | None = None

    @property
    def goal(self) -> str:
        return " and ".join(f"at {word} {bound:g}" for word, bound in (("least", self.min), ("most", self.max))
                            if bound is not None)

    def met(self, actual: float | None) -> bool:
        return actual is not None and (self.max is None or actual <= self.max) and \
            (self.min is None or actual >= self.min)


@dataclass(frozen=True)
class ChallengeSpec:
    targets: tuple[Target, ...]
    knobs: tuple[str, ...]  # the knobs the student may turn; the rest stay as the lesson set them
    config: dict = field(default_factory=dict)  # the challenge's own knobs over the lesson's (deployment, SLO)
    workload: WorkloadSource | None = None  # the challenge's own workload; None: the lesson's
    score: str | None = None  # the METRICS id attempts are ranked by


@dataclass
class TargetResult:
    metric: str  # the metric's label, e.g. "TTFT p95"
    goal: str
    actual: float | None
    met: bool


@dataclass
class ChallengeResult:
    passed: bool
    results: list[TargetResult]
    message: str
    knobs: dict = field(default_factory=dict)  # what the attempt set
    score: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ChallengeResult:
        return cls(data["passed"], [TargetResult(**r) for r in data["results"]], data["message"],
                   dict(data.get("knobs", {})), data.get("score"))


def score_challenge(spec: ChallengeSpec, metrics: dict, knobs: dict | None = None) -> ChallengeResult:
    """Score a finished run's engine.metrics() against the targets."""
    agg = metrics["aggregate"]
    results = []
    for t in spec.targets:
        metric = METRICS[t.metric]
        actual = metric.value(agg)
        results.append(TargetResult(metric.label, t.goal, actual, t.met(actual)))
    score = METRICS[spec.score].value(agg) if spec.score else None
    result = ChallengeResult(False, results, "", dict(knobs or {}), score)
    unfinished = agg["num_requests_waiting"] + agg["num_requests_running"] + agg["num_requests_swapped"]
    if unfinished:
        result.message = (f"{unfinished} request(s) have not finished: run the workload to the end before "
                          "scoring, so every latency counts")
    elif agg["num_requests_rejected"]:
        result.message = (f"{agg['num_requests_rejected']} request(s) were rejected: a setting that refuses work "
                          "does not meet a target")
    elif missed := [f"{r.metric} is {r.actual:.3g}, target {r.goal}" if r.actual is not None else
                    f"{r.metric} has no value, target {r.goal}" for r in results if not r.met]:
        result.message = "Missed: " + "; ".join(missed)
    else:
        result.passed, result.message = True, "Every target met."
    return result
