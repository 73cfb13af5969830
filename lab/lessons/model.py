"""A lesson as the lab runs it: its text, its scenario, its variants, checkpoints and challenge."""

from __future__ import annotations

from dataclasses import dataclass

from engine import DEFAULT_MODEL, Engine, EngineConfig, LoadedModel, load_model
from engine.workload import WorkloadSource, submit
from lab.budgets import engine_for
from lab.lessons.challenge import ChallengeResult, ChallengeSpec, score_challenge
from lab.lessons.claims import Claim, Fact, unbacked
from lab.lessons.knee import KneeQuestion
from lab.lessons.rules import BASE, Checkpoint

TRY_IT = "Try it"  # a section of exercises: its numbers are values to set, not statements about the run


class LessonError(ValueError):
    """A lesson file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Section:
    title: str  # '' for the text before the first heading
    body: str  # Markdown


@dataclass(frozen=True)
class Variant:
    """A named change of knobs to compare against the base run on the same workload."""

    name: str
    label: str
    config: dict


@dataclass(frozen=True)
class Watch:
    """What to look at while the run is between two steps (inclusive)."""

    from_step: int
    to_step: int
    text: str
    variant: str | None = None  # None: every variant


@dataclass(frozen=True)
class Lesson:
    """One lesson: its text, the scenario it runs, and the questions it asks along the way."""

    id: str  # the file stem, e.g. "04_kv_cache_full"; file names order the lessons
    title: str
    sections: tuple[Section, ...]
    config: dict  # EngineConfig keyword arguments (never the model: lessons are written for the default one)
    workload: WorkloadSource  # a preset, a generator, or the lesson's own list of requests
    seed: int
    start_step: int  # the app runs steps before this one without stopping
    checkpoints: tuple[Checkpoint, ...]
    watch: tuple[Watch, ...] = ()
    variants: tuple[Variant, ...] = ()
    challenge: ChallengeSpec | None = None
    knee: KneeQuestion | None = None  # a prediction graded on a rate sweep of the lesson's trace
    minutes: int = 10  # about how long it takes, for the learning path
    needs: tuple[int, ...] = ()  # the numbers of the lessons it builds on
    claims: tuple[Claim, ...] = ()  # what its text says about its run, each with the reading that backs it
    facts: tuple[Fact, ...] = ()  # what its text says about anything else, each with its source

    @property
    def number(self) -> int:
        """The NN of NN_slug (load_lessons reads only such files)."""
        return int(self.id.split("_", 1)[0])

    @property
    def variant_names(self) -> tuple[str, ...]:
        return (BASE, *(v.name for v in self.variants))

    def engine_config(self, variant: str = BASE, model: str = DEFAULT_MODEL, **changes) -> EngineConfig:
        """The lesson's knobs, the variant's on top, then any of the student's changes."""
        overrides = {} if variant == BASE else self._variant(variant).config
        return EngineConfig.from_dict({**self.config, **overrides, "seed": self.seed, "model": model, **changes})

    def texts(self) -> list[str]:
        """The prose that tells a student about the run: sections (the exercises aside), watch notes,
        questions and explanations."""
        pieces = [s.body for s in self.sections if s.title != TRY_IT] + [w.text for w in self.watch]
        pieces += [t for c in self.checkpoints for t in (c.question, c.explain)]
        if self.knee is not None:
            pieces += [self.knee.question, self.knee.explain]
        return [p for p in pieces if p]

    def unbacked(self) -> dict[str, list[str]]:
        """The numbers and request ids in its prose that no claim or fact backs, by the piece they are
        in (a question's own step is backed by the checkpoint asked at it)."""
        fragments = [c.says for c in self.claims] + [f.says for f in self.facts]
        asked = {c.question: [f"step {c.at_step}"] for c in self.checkpoints}
        found = {piece: unbacked(piece, fragments + asked.get(piece, [])) for piece in self.texts()}
        return {piece: tokens for piece, tokens in found.items() if tokens}

    def checkpoints_for(self, variant: str = BASE) -> list[Checkpoint]:
        return [c for c in self.checkpoints if c.variant == variant]

    def watch_at(self, step: int, variant: str = BASE) -> list[str]:
        return [w.text for w in self.watch
                if w.from_step <= step <= w.to_step and w.variant in (None, variant)]

    def _variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ValueError(f"lesson {self.id!r} has no variant {name!r}; it has {', '.join(self.variant_names)}")


def start_engine(lesson: Lesson, variant: str = BASE, loaded: LoadedModel | None = None, **changes) -> Engine:
    """A fresh engine with the lesson's workload submitted, before step 0."""
    config = lesson.engine_config(variant, model=loaded.name if loaded else DEFAULT_MODEL, **changes)
    engine = engine_for(config, loaded or load_model(config.model, config.device, config.dtype))
    submit(engine, lesson.workload.items())
    return engine


MAX_CHALLENGE_STEPS = 20_000  # far past any challenge's end: a setting that never finishes is scored unfinished


def play_challenge(lesson: Lesson, knobs: dict, loaded: LoadedModel | None = None) -> ChallengeResult:
    """One attempt: the challenge's scenario (its own workload and knobs, or the lesson's) with the
    student's knobs, in a fresh engine run to the end, scored. Raises ValueError for knobs that cannot run."""
    spec = lesson.challenge
    if spec is None:
        raise ValueError(f"lesson {lesson.id!r} has no challenge")
    model = loaded.name if loaded else DEFAULT_MODEL
    config = lesson.engine_config(model=model, **{**spec.config, **knobs})
    engine = engine_for(config, loaded or load_model(config.model, config.device, config.dtype))
    submit(engine, (spec.workload or lesson.workload).items())
    engine.run(MAX_CHALLENGE_STEPS)
    return score_challenge(spec, engine.metrics(), knobs)
