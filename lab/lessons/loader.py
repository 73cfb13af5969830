"""Reading lessons: the TOML scenario and the Markdown text of each, checked field by field."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from engine import EngineConfig
from engine.metrics import LATENCY_KEYS, METRICS, SUMMARY_STATS
from engine.records import EVENT_KINDS
from engine.request import request_id
from engine.workload import FIELDS, PRESETS, GeneratorSpec, WorkloadError, WorkloadItem, WorkloadSource
from engine.workload.load import TraceSpec
from lab.lessons.challenge import ChallengeSpec, Target
from lab.lessons.claims import Claim, Fact
from lab.lessons.knee import KneeQuestion
from lab.lessons.model import Lesson, LessonError, Section, Variant, Watch
from lab.lessons.rules import BASE, RULES, Checkpoint, Rule
from lab.lessons.toml_table import Table, read_toml

LESSONS_DIR = Path(__file__).resolve().parents[2] / "lessons"


def load_lessons(directory: Path = LESSONS_DIR) -> list[Lesson]:
    """Every NN_slug.toml with its NN_slug.md, in file-name order."""
    paths = sorted(p for p in directory.glob("*.toml") if re.match(r"\d+_", p.name))
    if not paths:
        raise LessonError(f"{directory}: no lesson files (NN_slug.toml)")
    lessons = [load_lesson(p) for p in paths]
    numbers = {lesson.number for lesson in lessons}
    for lesson in lessons:
        for need in lesson.needs:
            if need not in numbers or need >= lesson.number:
                raise LessonError(f"lessons/{lesson.id}.toml: field 'needs': {need} is not an earlier lesson's number")
    return lessons


def load_lesson(toml_path: Path) -> Lesson:
    file = f"{toml_path.parent.name}/{toml_path.name}"
    data = read_toml(toml_path)
    md_path = toml_path.with_suffix(".md")
    if not md_path.exists():
        raise LessonError(f"{file}: its text {md_path.name} is missing")
    return _parse_lesson(Table(file, data), toml_path.stem, read_sections(md_path))


def load_glossary(directory: Path = LESSONS_DIR) -> list[Section]:
    return read_sections(directory / "glossary.md")


def read_sections(path: Path) -> list[Section]:
    """Cut Markdown at '## ' headings; text before the first heading is an untitled section."""
    sections, title, lines = [], "", []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            if title or any(s.strip() for s in lines):
                sections.append(Section(title, "\n".join(lines).strip()))
            title, lines = line[3:].strip(), []
        else:
            lines.append(line)
    sections.append(Section(title, "\n".join(lines).strip()))
    return sections


def _parse_lesson(t: Table, lesson_id: str, sections: list[Section]) -> Lesson:
    title = t.get("title", str)
    minutes = t.get("minutes", int, 10)
    needs = t.get("needs", list, [])
    if minutes < 1 or not all(isinstance(n, int) and not isinstance(n, bool) for n in needs):
        raise t.error("minutes" if minutes < 1 else "needs", "minutes must be >= 1, needs a list of lesson numbers")
    seed = t.get("seed", int, 0)
    start_step = t.get("start_step", int, 0)
    config = t.get("config", dict, {})
    if "model" in config or "seed" in config:
        raise t.error("config", "must not set model or seed: lessons run the default model, seeded by 'seed'")
    try:
        EngineConfig.from_dict(config)
    except ValueError as exc:
        raise t.error("config", str(exc)) from None
    variants = tuple(_parse_variant(v, config) for v in t.tables("variants"))
    names = (BASE, *(v.name for v in variants))
    if len(set(names)) != len(names):
        raise t.error("variants", f"names must be unique and not {BASE!r}")
    workload, request_ids = _parse_workload(t, lesson_id)
    checkpoints = tuple(_parse_checkpoint(c, names, request_ids, start_step) for c in t.tables("checkpoints"))
    ids = [c.id for c in checkpoints]
    if len(set(ids)) != len(ids):
        raise t.error("checkpoints", "ids must be unique")
    watch = tuple(_parse_watch(w, names) for w in t.tables("watch"))
    challenge = _parse_challenge(c, config) if (c := t.table("challenge", None)) else None
    knee = _parse_knee(k, workload, config) if (k := t.table("knee", None)) else None
    claims = tuple(_parse_claim(c, names) for c in t.tables("claims"))
    facts = tuple(_parse_fact(f) for f in t.tables("facts"))
    t.done()
    lesson = Lesson(lesson_id, title, tuple(sections), config, workload, seed, start_step, checkpoints, watch,
                    variants, challenge, knee, minutes, tuple(needs), claims, facts)
    text = " ".join(" ".join(lesson.texts()).split())
    for table, said in [("claims", c.says) for c in claims] + [("facts", f.says) for f in facts]:
        if " ".join(said.split()) not in text:
            raise t.error(table, f"{said!r} is not in the lesson's text")
    return lesson


def _parse_claim(t: Table, variants: tuple[str, ...]) -> Claim:
    variant = t.get("variant", str, BASE)
    if variant not in variants:
        raise t.error("variant", f"unknown variant {variant!r}; the lesson has {', '.join(variants)}")
    claim = Claim(t.get("says", str), t.get("value", str, ""), variant, float(t.get("about", (int, float), 0)),
                  t.get("held_by", str, ""))
    if bool(claim.value) == bool(claim.held_by):
        raise t.error("value", "give an expression (value) or the test that holds the claim (held_by), not both")
    t.done()
    return claim


def _parse_fact(t: Table) -> Fact:
    fact = Fact(t.get("says", str), t.get("source", str))
    if not fact.source.strip():
        raise t.error("source", "say where the fact comes from (a file at a commit, a datasheet, a paper)")
    t.done()
    return fact


def _parse_variant(t: Table, base: dict) -> Variant:
    variant = Variant(t.get("name", str), t.get("label", str), t.get("config", dict))
    try:
        EngineConfig.from_dict({**base, **variant.config})
    except ValueError as exc:
        raise t.error("config", str(exc)) from None
    t.done()
    return variant


def _parse_workload(t: Table, lesson_id: str) -> tuple[WorkloadSource, list[str] | None]:
    """Exactly one of: [[requests]], preset = "name", [generator], [trace]. Returns it and, if known,
    the request ids."""
    given = [k for k in ("requests", "preset", "generator", "trace") if k in t.data]
    if len(given) != 1:
        raise t.error("requests", "give exactly one workload: [[requests]], preset, [generator] or [trace]")
    if given == ["trace"]:
        return WorkloadSource(load=_spec(t, "trace", TraceSpec)), None
    if given == ["preset"]:
        name = t.get("preset", str)
        if name not in PRESETS:
            raise t.error("preset", f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
        return WorkloadSource(preset=name), None
    if given == ["generator"]:
        return WorkloadSource(generator=_spec(t, "generator", GeneratorSpec)), None
    return _parse_requests(t, lesson_id)


def _spec(t: Table, key: str, kind: type):
    """A table of a spec's fields ([generator], [trace]), built and checked by the spec itself."""
    try:
        return kind(**t.table(key).data)
    except (TypeError, ValueError) as exc:
        raise t.error(key, str(exc)) from None


def _parse_requests(t: Table, lesson_id: str) -> tuple[WorkloadSource, list[str]]:
    """The lesson's own [[requests]], with the ids the engine will give them (r0, r1, ...)."""
    items = []
    for r in t.tables("requests"):
        for key in r.data:
            if key not in FIELDS:
                raise r.error(key, f"is not a request field (fields: {', '.join(FIELDS)})")
        r.get("prompt", str)
        try:
            items.append(WorkloadItem(**r.data))
        except WorkloadError as exc:
            raise r.error(exc.field, exc.reason) from None
    if not items:
        raise t.error("requests", "must list at least one request")
    number = lesson_id.split("_", 1)[0]
    source = WorkloadSource(requests=tuple(items), name=f"lesson {int(number) if number.isdigit() else lesson_id}'s "
                            "workload")
    return source, [request_id(i) for i in range(len(items))]


def _parse_checkpoint(t: Table, variants: tuple[str, ...], request_ids: list[str] | None,
                      start_step: int) -> Checkpoint:
    cid = t.get("id", str)
    at_step = t.get("at_step", int)
    if at_step < start_step:
        raise t.error("at_step", f"must be >= start_step ({start_step}); got {at_step}")
    question = t.get("question", str)
    variant = t.get("variant", str, BASE)
    if variant not in variants:
        raise t.error("variant", f"unknown variant {variant!r}; the lesson has {', '.join(variants)}")
    rule = _parse_rule(t.table("rule"), request_ids)
    options = _parse_options(t, rule, request_ids)
    tolerance = float(t.get("tolerance", (int, float), 0.0))
    if tolerance and rule.spec.answer != "number" or not 0 <= tolerance < 1:
        raise t.error("tolerance", f"must be a fraction in [0, 1), for a number answer only; got {tolerance!r}")
    checkpoint = Checkpoint(cid, at_step, question, rule, options, t.get("explain", str, ""), variant, tolerance)
    t.done()
    return checkpoint


def _parse_rule(r: Table, request_ids: list[str] | None) -> Rule:
    """A checkpoint's rule: a known kind, with exactly the request or event it needs."""
    kind = r.get("kind", str)
    if kind not in RULES:
        raise r.error("kind", f"unknown rule {kind!r}; rules: {', '.join(RULES)}")
    spec = RULES[kind]
    request = r.get("request", str, None)
    event = r.get("event", str, None)
    for need, value in (("request", request), ("event", event)):
        if need in spec.needs and value is None:
            raise r.error(need, f"is required by rule {kind!r}")
        if need not in spec.needs and value is not None:
            raise r.error(need, f"is not used by rule {kind!r}")
    if request is not None and request_ids is not None and request not in request_ids:
        raise r.error("request", f"unknown request {request!r}; the workload has {', '.join(request_ids)}")
    if event is not None and event not in EVENT_KINDS:
        raise r.error("event", f"unknown event kind {event!r}; kinds: {', '.join(EVENT_KINDS)}")
    r.done()
    return Rule(kind, request, event)


def _parse_options(t: Table, rule: Rule, request_ids: list[str] | None) -> tuple[str, ...]:
    """What the student picks from: request ids (the workload's, by default), or the choices."""
    answer = rule.spec.answer
    options = tuple(str(o) for o in t.get("options", list, []))
    if answer == "ids" and not options:
        if request_ids is None:
            raise t.error("options", "list the request ids to pick from (the workload is not an explicit list)")
        options = tuple(request_ids)
    if answer == "choice" and len(options) < 2:
        raise t.error("options", f"rule {rule.kind!r} asks for a choice: give at least two options")
    if answer == "number" and options:
        raise t.error("options", f"rule {rule.kind!r} asks for a number, so it takes no options")
    return options


def _parse_watch(t: Table, variants: tuple[str, ...]) -> Watch:
    steps = t.get("steps", list)
    if len(steps) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps) or \
            steps[0] > steps[1]:
        raise t.error("steps", f"must be [first, last] step numbers with first <= last; got {steps!r}")
    variant = t.get("variant", str, None)
    if variant is not None and variant not in variants:
        raise t.error("variant", f"unknown variant {variant!r}; the lesson has {', '.join(variants)}")
    watch = Watch(steps[0], steps[1], t.get("text", str), variant)
    t.done()
    return watch


def _parse_challenge(t: Table, lesson_config: dict) -> ChallengeSpec:
    knobs = tuple(t.get("knobs", list))
    known = {f.name for f in dataclasses.fields(EngineConfig)}
    for knob in knobs:
        if knob not in known:
            raise t.error("knobs", f"unknown knob {knob!r}")
    config = t.get("config", dict, {})
    try:
        EngineConfig.from_dict({**lesson_config, **config})
    except ValueError as exc:
        raise t.error("config", str(exc)) from None
    workload = WorkloadSource(load=_spec(t, "trace", TraceSpec)) if "trace" in t.data else None
    score = t.get("score", str, None)
    if score is not None and score not in METRICS:
        raise t.error("score", f"must be a metric ({', '.join(METRICS)}); got {score!r}")
    targets = [_parse_target(target) for target in t.tables("targets")]
    if not targets:
        raise t.error("targets", "give at least one target")
    t.done()
    return ChallengeSpec(tuple(targets), knobs, config, workload, score)


def _parse_knee(t: Table, workload: WorkloadSource, config: dict) -> KneeQuestion:
    if workload.load is None:
        raise t.error("rates", "a knee question sweeps the arrival rate: the lesson's workload must be a [trace]")
    if config.get("slo_ttft_ms") is None and config.get("slo_tpot_ms") is None:
        raise t.error("attainment", "a knee question needs an SLO in [config] (slo_ttft_ms or slo_tpot_ms)")
    rates = t.get("rates", list)
    if len(rates) < 2 or not all(isinstance(r, int | float) and not isinstance(r, bool) and 0 < r <= 1000
                                 for r in rates):
        raise t.error("rates", f"must list at least two rates in (0, 1000] requests/s; got {rates!r}")
    attainment = float(t.get("attainment", (int, float), 0.9))
    if not 0 < attainment <= 1:
        raise t.error("attainment", f"must be a fraction in (0, 1]; got {attainment!r}")
    knee = KneeQuestion(t.get("question", str), tuple(float(r) for r in sorted(rates)), attainment,
                        t.get("explain", str, ""))
    t.done()
    return knee


def _parse_target(t: Table) -> Target:
    """metric = "ttft_steps" with stat = "p95", or a single-number metric such as "goodput"; max, min or both."""
    metric, stat = t.get("metric", str), t.get("stat", str, None)
    if metric in LATENCY_KEYS and stat is None:
        stat = "p95"
    metric_id = f"{metric}.{stat}" if stat else metric
    if stat is not None and stat not in SUMMARY_STATS:
        raise t.error("stat", f"must be one of {', '.join(SUMMARY_STATS)}; got {stat!r}")
    if metric_id not in METRICS:
        raise t.error("metric", f"must be a latency ({', '.join(LATENCY_KEYS)}) or a metric such as goodput; "
                      f"got {metric!r}")
    bounds = {k: t.get(k, (int, float), None) for k in ("max", "min")}
    if all(v is None for v in bounds.values()):
        raise t.error("max", "give max, min or both")
    t.done()
    return Target(metric_id, *(None if v is None else float(v) for v in bounds.values()))
