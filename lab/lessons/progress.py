"""A student's answers in one lesson: plain data, kept per session and saved as a dict."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from lab.lessons.challenge import ChallengeResult
from lab.lessons.knee import ID as KNEE
from lab.lessons.rules import Answer, Checkpoint, Grade


@dataclass
class LessonProgress:
    """A student's answers in one lesson: plain data, which the session keeps and to_dict saves."""

    lesson_id: str
    answers: dict[str, Answer] = field(default_factory=dict)
    grades: dict[str, Grade] = field(default_factory=dict)
    challenge: ChallengeResult | None = None  # the latest attempt
    attempts: list[ChallengeResult] = field(default_factory=list)  # every attempt, for the leaderboard

    def record(self, checkpoint: Checkpoint, answer: Any, result: Grade) -> None:
        self.answers[checkpoint.id] = checkpoint.parse(answer)
        self.grades[checkpoint.id] = result

    def score(self) -> tuple[int, int]:
        """(correct, answered)."""
        return sum(g.correct for g in self.grades.values()), len(self.grades)

    def attempt(self, result: ChallengeResult) -> None:
        self.challenge = result
        self.attempts.append(result)

    def leaderboard(self, better: str = "higher") -> list[ChallengeResult]:
        """The attempts, best first: passed before missed, then by score (in the direction that is better)."""
        sign = -1 if better == "higher" else 1
        return sorted(self.attempts, key=lambda r: (not r.passed, r.score is None, sign * (r.score or 0.0)))

    def complete(self, lesson) -> bool:
        """Every question answered and, if the lesson has one, its challenge passed."""
        answered = all(c.id in self.grades for c in lesson.checkpoints) and (lesson.knee is None or KNEE in self.grades)
        return answered and (lesson.challenge is None or any(r.passed for r in self.attempts))

    def restart(self) -> None:
        self.answers.clear()
        self.grades.clear()
        self.challenge = None
        self.attempts.clear()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LessonProgress:
        challenge = data.get("challenge")
        return cls(data["lesson_id"], dict(data.get("answers", {})),
                   {k: Grade(**g) for k, g in data.get("grades", {}).items()},
                   ChallengeResult.from_dict(challenge) if challenge else None,
                   [ChallengeResult.from_dict(a) for a in data.get("attempts", [])])
