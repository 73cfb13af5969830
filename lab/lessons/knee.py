"""A question no single step can answer: at what request rate does a service stop keeping its promise?

The answer is read off a rate sweep of the lesson's own trace, run on the engine when the
student locks in a prediction: the lowest rate whose SLO attainment falls below the
threshold. Like a checkpoint, it stores no answer; unlike one, it needs whole runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lab.lessons.rules import Grade
from lab.sweep import RATE, SweepPoint, run_sweep

ID = "knee"  # its key among the lesson's answers


@dataclass(frozen=True)
class KneeQuestion:
    question: str
    rates: tuple[float, ...]  # the rates swept, and the choices
    attainment: float = 0.9  # the share of requests meeting the SLO below which the service has failed
    explain: str = ""

    @property
    def options(self) -> tuple[str, ...]:
        return (*(f"{r:g}" for r in self.rates), "none of these")

    def sweep(self, lesson, model: str, progress: Callable[[int], None] = lambda done: None) -> list[SweepPoint]:
        """The lesson's trace at every rate, each in a fresh engine run to the end (seconds each);
        progress(i) after the i-th."""
        return run_sweep(lesson.engine_config(model=model), lesson.workload, RATE, list(self.rates), progress)

    def answer_from(self, points: list[SweepPoint]) -> str:
        below = [p.value for p in points if (p.metrics["aggregate"]["slo_attainment"] or 0.0) < self.attainment]
        return f"{min(below):g}" if below else "none of these"

    def grade(self, points: list[SweepPoint], given: str) -> Grade:
        if given not in self.options:
            raise ValueError(f"the answer must be one of {', '.join(self.options)}; got {given!r}")
        right = self.answer_from(points)
        lines = [("Right" if given == right else f"Not quite: you said {given}") + f". The sweep's answer: {right}.",
                 f"Rule: the lowest rate whose SLO attainment is below {self.attainment:.0%}."]
        lines += [f"- {p.value:g} req/s: {p.metrics['aggregate']['slo_attainment']:.0%} attained, goodput "
                  f"{p.metrics['aggregate']['goodput']:.2f} of {p.metrics['aggregate']['request_throughput']:.2f} "
                  "requests/s" for p in points]
        if self.explain:
            lines += ["", self.explain]  # a paragraph of its own, not a continuation of the last rate's line
        return Grade(given == right, right, "\n".join(lines))
