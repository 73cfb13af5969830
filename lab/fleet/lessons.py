"""Fleet lessons (lessons/fleet/): a fleet scenario, its text, predict-then-reveal checkpoints asked
before a fleet event and graded from that event's record, and claims held to the run.

A fleet lesson is written as a lab lesson is (NN_slug.toml beside NN_slug.md; claims read by
the same safe evaluator), but its scenario is a fleet's (``[engine]``, ``[fleet]``, ``[load]``)
and its rules read FleetRecords: where an arrival was routed, what a candidate's cache held,
whether a request was sent apart to prefill, how long its KV took on the link.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import load_model
from engine.fleet.config import FleetConfig
from engine.fleet.links import KV_LINKS, LINK_FRACTION
from engine.fleet.records import FleetRecord
from lab.budgets import FLEET_EVENTS
from lab.fleet.compare import run_to_end
from lab.fleet.link import FleetScenario
from lab.fleet.run import FleetLoad, FleetRun
from lab.fleet.views import journeys
from lab.lessons.claims import SAFE_FUNCTIONS, Claim, ClaimError, evaluate, unbacked
from lab.lessons.loader import read_sections
from lab.lessons.model import TRY_IT, LessonError, Section
from lab.lessons.rules import AnswerError, Grade
from lab.lessons.toml_table import Table, read_toml

FLEET_LESSONS_DIR = Path(__file__).parents[2] / "lessons" / "fleet"


def _decision(record: FleetRecord, request: str):
    if record.kind != "route" or record.decision.request_id != request:
        raise ValueError(f"event {record.index} is not {request}'s arrival")
    return record


def _arrived(record: FleetRecord, request: str):
    if record.kind != "kv_arrived" or record.handoff.request_id != request:
        raise ValueError(f"event {record.index} is not the arrival of {request}'s KV cache")
    return record.handoff


# rule kind -> (answer kind: 'choice' or 'number', its words, how it reads the asked event's record)
RULES: dict[str, tuple[str, str, Callable[[FleetRecord, str], Any]]] = {
    "routed_replica": ("choice", "the replica {request} is sent to (to decode, when disaggregated)",
                       lambda rec, rid: str(_decision(rec, rid).decision.replica)),
    "cached_blocks": ("number", "the prompt blocks the chosen replica's cache holds for {request}, as the router read",
                      lambda rec, rid: _decision(rec, rid).decision.candidates[
                          [c.replica for c in rec.decision.candidates].index(rec.decision.replica)
                      ].inputs["cached_blocks"]),
    "link_ms": ("number", "the time {request}'s KV cache spends on the link, in modeled ms",
                lambda rec, rid: _arrived(rec, rid).transfer_end_ms - rec.handoff.transfer_start_ms),
    "disaggregated": ("choice", "whether {request} is prefilled on a prefill replica ('yes') or where it decodes",
                      lambda rec, rid: "yes" if _decision(rec, rid).prefill is not None else "no"),
}


@dataclass(frozen=True)
class FleetCheckpoint:
    """A question asked before fleet event ``at_event`` runs, graded from that event's record."""

    id: str
    at_event: int
    question: str
    kind: str  # a key of RULES
    request: str
    options: tuple[str, ...] = ()
    explain: str = ""
    tolerance: float = 0.0

    @property
    def answer_kind(self) -> str:
        return RULES[self.kind][0]

    def answer_from(self, record: FleetRecord) -> Any:
        if record.index != self.at_event:
            raise ValueError(f"checkpoint {self.id!r} is about event {self.at_event}, not event {record.index}")
        return RULES[self.kind][2](record, self.request)

    def grade(self, record: FleetRecord, given: Any) -> Grade:
        right = self.answer_from(record)
        if self.answer_kind == "number":
            try:
                given = float(given)
            except (TypeError, ValueError):
                raise AnswerError(f"the answer must be a number; got {given!r}") from None
            correct = abs(given - right) <= self.tolerance * abs(right)
        else:
            if str(given) not in self.options:
                raise AnswerError(f"the answer must be one of {', '.join(self.options)}; got {given!r}")
            correct = str(given) == right
        shown = f"{given:g}" if isinstance(given, float) else given
        verdict = "Right" if correct else f"Not quite: you said {shown}"
        router = f"The router: {record.decision.why}" if record.decision is not None else ""
        shown_right = f"{right:,.3g}" if isinstance(right, float) else right
        lines = [f"{verdict}. The fleet's answer: {shown_right}.",
                 f"Rule: {RULES[self.kind][1].format(request=self.request)}.", router, record.placed, self.explain]
        return Grade(correct, right, "\n\n".join(line for line in lines if line))


@dataclass(frozen=True)
class SweepQuestion:
    """A question about the same load at several rates on several fleets, graded on that sweep: which
    fleet does best (or worst) on a metric at one rate. The sweep runs when the student checks."""

    id: str
    question: str
    fleets: dict[str, dict]  # a name for each fleet -> its fleet knobs, changed from the lesson's
    rates: tuple[float, ...]
    metric: str  # an aggregate metric's key, e.g. 'goodput'
    at_rate: float
    best: str  # 'max' or 'min': which fleet the answer is
    explain: str = ""

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(self.fleets)

    def answer_from(self, results: dict[str, dict[float, dict]]) -> str:
        values = {name: results[name][self.at_rate][self.metric] for name in self.fleets}
        return (max if self.best == "max" else min)(values, key=values.get)

    def grade(self, results: dict[str, dict[float, dict]], given: str) -> Grade:
        if given not in self.options:
            raise AnswerError(f"the answer must be one of {', '.join(self.options)}; got {given!r}")
        right = self.answer_from(results)
        values = ", ".join(f"{name} {results[name][self.at_rate][self.metric]:.3g}" for name in self.fleets)
        lines = [f"{'Right' if given == right else f'Not quite: you said {given}'}. The sweep's answer: {right}.",
                 f"{self.metric} at {self.at_rate:g} requests/s: {values}.", self.explain]
        return Grade(given == right, right, "\n\n".join(line for line in lines if line))


def sweep_fleets(lesson: FleetLesson, config, progress: Callable[[int], None] = lambda done: None,
                 loader=load_model) -> dict[str, dict[float, dict]]:
    """Every fleet the lesson's sweep questions name, at every rate they name: fleet -> rate -> aggregate."""
    fleets = {name: changes for q in lesson.sweeps for name, changes in q.fleets.items()}
    rates = sorted({rate for q in lesson.sweeps for rate in q.rates})
    out: dict[str, dict[float, dict]] = {}
    for name, changes in fleets.items():
        fleet = dataclasses.replace(lesson.scenario.fleet, **changes)
        for rate in rates:
            load = dataclasses.replace(lesson.scenario.load, rate=rate)
            out.setdefault(name, {})[rate] = run_to_end(config, fleet, load, loader)[0]
            progress(sum(map(len, out.values())))
    return out


@dataclass(frozen=True)
class FleetLesson:
    id: str  # NN_slug
    title: str
    minutes: int
    sections: tuple[Section, ...]
    scenario: FleetScenario
    checkpoints: tuple[FleetCheckpoint, ...]
    claims: tuple[Claim, ...] = ()
    sweeps: tuple[SweepQuestion, ...] = ()

    @property
    def number(self) -> int:
        return int(self.id.split("_", 1)[0])

    def texts(self) -> list[str]:
        """The prose that tells a student about the run: sections (the exercises aside), questions, explanations."""
        pieces = [s.body for s in self.sections if s.title != TRY_IT]
        pieces += [t for c in (*self.checkpoints, *self.sweeps) for t in (c.question, c.explain)]
        return [p for p in pieces if p]

    def unbacked(self) -> dict[str, list[str]]:
        """The numbers and request ids in its prose that no claim backs, by the piece they are in."""
        fragments = [c.says for c in self.claims]
        # A question names its own request, and says how close a number must be.
        asked = {t: [c.request, f"within {c.tolerance:.0%}"] for c in self.checkpoints for t in (c.question, c.explain)}
        asked |= {t: [f"{q.at_rate:g} requests"] for q in self.sweeps for t in (q.question, q.explain)}
        found = {piece: unbacked(piece, fragments + asked.get(piece, [])) for piece in self.texts()}
        return {piece: tokens for piece, tokens in found.items() if tokens}


def load_fleet_lessons(directory: Path = FLEET_LESSONS_DIR) -> list[FleetLesson]:
    return [load_fleet_lesson(p) for p in sorted(directory.glob("*.toml")) if re.match(r"\d+_", p.name)]


def load_fleet_lesson(path: Path) -> FleetLesson:
    file = f"fleet/{path.name}"
    t = Table(file, read_toml(path))
    md = path.with_suffix(".md")
    if not md.exists():
        raise LessonError(f"{file}: its text {md.name} is missing")
    try:
        scenario = FleetScenario(dict(t.get("engine", dict, {})), FleetConfig(**t.get("fleet", dict, {})),
                                 FleetLoad(**t.get("load", dict, {})))
    except (TypeError, ValueError) as exc:
        raise LessonError(f"{file}: the scenario cannot be built: {exc}") from None
    checkpoints = tuple(_checkpoint(c) for c in t.tables("checkpoints"))
    claims = tuple(Claim(c.get("says", str), c.get("value", str), about=float(c.get("about", (int, float), 0)))
                   for c in t.tables("claims"))
    sweeps = tuple(_sweep(q, scenario.fleet) for q in t.tables("sweeps"))
    lesson = FleetLesson(path.stem, t.get("title", str), t.get("minutes", int, 10), tuple(read_sections(md)),
                         scenario, checkpoints, claims, sweeps)
    t.done()
    return lesson


def _sweep(q: Table, fleet: FleetConfig) -> SweepQuestion:
    fleets = {name: dict(changes) for name, changes in q.get("fleets", dict).items()}
    for name, changes in fleets.items():
        try:
            dataclasses.replace(fleet, **changes)
        except (TypeError, ValueError) as exc:
            raise q.error(f"fleets.{name}", str(exc)) from None
    rates = tuple(float(r) for r in q.get("rates", list))
    out = SweepQuestion(q.get("id", str), q.get("question", str), fleets, rates, q.get("metric", str),
                        float(q.get("at_rate", (int, float))), q.get("best", str), q.get("explain", str, ""))
    if out.at_rate not in rates or not all(0 < r <= 100 for r in rates):
        raise q.error("at_rate", f"must be one of the rates, each in (0, 100] requests/s; rates are {list(rates)}")
    if out.best not in ("max", "min"):
        raise q.error("best", f"must be 'max' or 'min'; got {out.best!r}")
    q.done()
    return out


def _checkpoint(c: Table) -> FleetCheckpoint:
    rule = c.table("rule")
    kind = rule.get("kind", str)
    if kind not in RULES:
        raise rule.error("kind", f"must be one of {', '.join(RULES)}; got {kind!r}")
    out = FleetCheckpoint(c.get("id", str), c.get("at_event", int), c.get("question", str), kind,
                          rule.get("request", str), tuple(c.get("options", list, [])), c.get("explain", str, ""),
                          float(c.get("tolerance", (int, float), 0)))
    if not 0 <= out.at_event < FLEET_EVENTS:
        raise c.error("at_event", f"must be an event number in [0, {FLEET_EVENTS - 1}]")
    if out.answer_kind == "choice" and not out.options:
        raise c.error("options", "a choice question needs its options")
    rule.done()
    c.done()
    return out


# ---- claims: what the text says about the run, read off its records -------------------------------


@dataclass
class FleetView:
    """A fleet lesson's run to the end, as its claims read it."""

    run: FleetRun
    lesson: FleetLesson
    swept: dict | None = None  # the lesson's sweep, run on first use

    def sweep(self, fleet: str, rate: float) -> dict:
        """The aggregate metrics of one of the lesson's swept fleets at one rate."""
        if self.swept is None:
            self.swept = sweep_fleets(self.lesson, self.run.config)
        return self.swept[fleet][rate]

    def event(self, index: int) -> FleetRecord:
        return self.run.records[index]

    def route(self, request: str) -> FleetRecord:
        """The event that routed `request`."""
        return next(r for r in self.run.records if r.kind == "route" and r.decision.request_id == request)

    def with_knobs(self, **changes) -> dict:
        """The aggregate metrics of the same load on the fleet with these fleet knobs changed, run to the end."""
        fleet = dataclasses.replace(self.run.fleet, **changes)
        return run_to_end(self.run.config, fleet, self.run.load, load_model)[0]

    @property
    def names(self) -> dict[str, Any]:
        return {"event": self.event, "route": self.route, "with_knobs": self.with_knobs, "sweep": self.sweep,
                "records": self.run.records, "journeys": journeys(self.run.records), "metrics": self.run.metrics(),
                "fleet": self.run.fleet, "config": self.run.config, "load": self.run.load, "lesson": self.lesson,
                "kv_links": KV_LINKS, "link_fraction": LINK_FRACTION,
                **SAFE_FUNCTIONS}

    readers = (event, route, with_knobs, sweep)  # the functions a claim may call, besides the safe ones


def claim_values(lesson: FleetLesson, run: FleetRun, swept: dict | None = None) -> list[tuple[Claim, Any]]:
    """Each claim with its value on the run (the run must be at its end) and the lesson's sweep (run here
    if not given); ClaimError names a bad one."""
    view = FleetView(run, lesson, swept)
    out = []
    for claim in lesson.claims:
        try:
            out.append((claim, evaluate(claim.value, view)))
        except (ClaimError, AttributeError, KeyError, IndexError, StopIteration, TypeError) as exc:
            raise ClaimError(f"{lesson.id}: claim {claim.says!r}: {exc}") from None
    return out
