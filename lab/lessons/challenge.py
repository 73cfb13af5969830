"""A lesson's tuning challenge: knobs to set, latency targets, and the score of a finished run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.metrics import METRICS


@dataclass(frozen=True)
class Target:
    """Pass when aggregate[metric][stat] <= max, e.g. p95 ttft_steps <= 6."""

    metric: str
    stat: str
    max: float


@dataclass(frozen=True)
class ChallengeSpec:
    targets: tuple[Target, ...]
    knobs: tuple[str, ...]  # the knobs the student may turn; the rest stay as the lesson set them


@dataclass
class TargetResult:
    metric: str
    stat: str
    max: float
    actual: float | None
    met: bool


@dataclass
class ChallengeResult:
    passed: bool
    results: list[TargetResult]
    message: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def score_challenge(spec: ChallengeSpec, metrics: dict) -> ChallengeResult:
    """Score a finished run's engine.metrics() against the targets."""
    agg = metrics["aggregate"]
    results = []
    for t in spec.targets:
        actual = METRICS[f"{t.metric}.{t.stat}"].value(agg)
        results.append(TargetResult(t.metric, t.stat, t.max, actual, actual is not None and actual <= t.max))
    unfinished = agg["num_requests_waiting"] + agg["num_requests_running"] + agg["num_requests_swapped"]
    if unfinished:
        return ChallengeResult(False, results, f"{unfinished} request(s) have not finished: run the workload to the "
                               "end before scoring, so every latency counts")
    if agg["num_requests_rejected"]:
        return ChallengeResult(False, results, f"{agg['num_requests_rejected']} request(s) were rejected: a "
                               "setting that refuses work does not meet a latency target")
    missed = [f"{r.stat} {r.metric} is {r.actual:g}, target <= {r.max:g}" for r in results if not r.met]
    if missed:
        return ChallengeResult(False, results, "Missed: " + "; ".join(missed))
    return ChallengeResult(True, results, "Every target met.")
