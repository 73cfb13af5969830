"""Lessons: prose beside the live engine, and predict-then-reveal checkpoints it grades.

A lesson is two files in ``lessons/``: ``NN_slug.md`` (the text, cut into sections
at ``## `` headings) and ``NN_slug.toml`` (the scenario: engine knobs, workload,
hints on what to watch, checkpoints). A checkpoint never stores its answer. It names
a rule, such as "the requests preempted in this step", that reads the answer off the
engine's own StepRecord. So the lesson stays true to whatever the engine really does,
and an engine change that breaks a lesson's story fails ``tests/test_lessons.py``
instead of misleading a student.

The TOML file, field by field (a bad one raises LessonError naming file and field)::

    title = "..."              seed = 0              start_step = 0
    [config]                   EngineConfig knobs, except model and seed
    [[requests]]               WorkloadItem fields (ids r0, r1, ... in this order), or instead
                               preset = "chat_mix" or a [generator] table of GeneratorSpec fields
    [[variants]]               name, label, config = {knob overrides}: the same workload, other knobs
    [[watch]]                  steps = [first, last], text, variant (optional)
    [[checkpoints]]            id, at_step, question, rule = {kind, request?, event?}, options?,
                               explain?, variant?  (see RULES for the kinds)
    [challenge]                knobs = [...], [[challenge.targets]] metric, stat, max

TOML is read with ``tomllib`` (Python 3.11+); on Python 3.10 the ``tomli`` backport
stands in for it, and without either, loading says so.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import DEFAULT_MODEL, Engine, EngineConfig, LoadedModel, StepRecord, load_model
from engine.records import EVENT_KINDS
from engine.workload import FIELDS, PRESETS, GeneratorSpec, WorkloadError, WorkloadItem, generate_workload, submit

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

LESSONS_DIR = Path(__file__).resolve().parents[1] / "lessons"
BASE = "base"  # the variant every lesson has: its own config, unchanged

# A checkpoint's answer: request ids (sorted list), a number or one of its options.
Answer = list[str] | int | float | str


class LessonError(ValueError):
    """A lesson file is malformed; the message names the file and the field."""


class AnswerError(ValueError):
    """A student's answer cannot be read as the kind the question asks for."""


# ---- rules: how a checkpoint reads its answer off a StepRecord ---------------------------------


@dataclass(frozen=True)
class Rule:
    """A declarative rule, e.g. {kind = "chunk_tokens", request = "r2"}."""

    kind: str
    request: str | None = None
    event: str | None = None

    @property
    def spec(self) -> RuleKind:
        return RULES[self.kind]

    def describe(self) -> str:
        return self.spec.text.format(request=self.request, event=self.event)

    def read(self, record: StepRecord) -> Answer:
        return self.spec.read(record, self)


@dataclass(frozen=True)
class RuleKind:
    answer: str  # 'ids', 'number' or 'choice'
    text: str  # the rule in words; {request} and {event} are filled in
    read: Callable[[StepRecord, Rule], Answer]
    events: tuple[str, ...] = ()  # event kinds whose reasons explain the answer
    needs: tuple[str, ...] = ()  # fields the rule must name: 'request', 'event'


def _ids(record: StepRecord, kind: str) -> list[str]:
    return sort_ids({e.request_id for e in record.events if e.kind == kind and e.request_id})


def _chunk(record: StepRecord, request: str | None):
    return next((c for c in record.batch if c.request_id == request), None)


def _blocked_limit(record: StepRecord, rule: Rule) -> str:
    limits = [e.data.get("limit") for e in record.events if e.kind == "blocked" and e.request_id == rule.request]
    return limits[0] if limits else "not blocked"


def _prefix_hit(record: StepRecord, rule: Rule) -> int:
    hits = [e.data["prefix_hit_tokens"] for e in record.events if e.kind == "admitted" and e.request_id == rule.request]
    return hits[0] if hits else 0


RULES: dict[str, RuleKind] = {
    "admitted_ids": RuleKind(
        "ids", "the requests with an 'admitted' event in this step: they left the waiting queue for the batch",
        lambda rec, rule: _ids(rec, "admitted"), events=("admitted", "blocked")),
    "preempted_ids": RuleKind(
        "ids", "the requests with a 'preempted' event in this step",
        lambda rec, rule: _ids(rec, "preempted"), events=("preempted", "swapped_out")),
    "scheduled_ids": RuleKind(
        "ids", "the requests with tokens in this step's forward pass (the batch)",
        lambda rec, rule: sort_ids({c.request_id for c in rec.batch}), events=("admitted", "blocked", "preempted")),
    "blocked_limit": RuleKind(
        "choice", "the limit named by {request}'s 'blocked' event in this step ('token_budget', 'seq_cap' or "
        "'blocks'), or 'not blocked' if it has none",
        _blocked_limit, events=("blocked", "admitted"), needs=("request",)),
    "tokens_used": RuleKind(
        "number", "the number of tokens in this step's forward pass (budget.tokens_used)",
        lambda rec, rule: rec.budget.tokens_used),
    "decode_tokens": RuleKind(
        "number", "the number of decode tokens in this step's forward pass (budget.decode_tokens)",
        lambda rec, rule: rec.budget.decode_tokens),
    "chunk_tokens": RuleKind(
        "number", "how many of {request}'s tokens this step's forward pass computes (0 if it is not in the batch)",
        lambda rec, rule: c.num_tokens if (c := _chunk(rec, rule.request)) else 0,
        events=("admitted", "chunk_scheduled", "blocked"), needs=("request",)),
    "chunk_kind": RuleKind(
        "choice", "the kind of work {request} does in this step's batch: 'prefill', 'prefill_chunk', 'decode', "
        "'recompute_prefill', or 'none' if it is not in the batch",
        lambda rec, rule: c.kind if (c := _chunk(rec, rule.request)) else "none",
        events=("admitted", "chunk_scheduled", "blocked", "recompute_started"), needs=("request",)),
    "blocks_swapped": RuleKind(
        "number", "the KV pages copied between GPU and CPU memory in this step (swapped_out plus swapped_in)",
        lambda rec, rule: sum(len(e.data.get("blocks", ())) for e in rec.events
                              if e.kind in ("swapped_out", "swapped_in")),
        events=("preempted", "swapped_out", "swapped_in")),
    "recomputed_tokens": RuleKind(
        "number", "the tokens this step computes again because a preemption dropped their KV pages "
        "(its 'recompute_prefill' work)",
        lambda rec, rule: sum(c.num_tokens for c in rec.batch if c.kind == "recompute_prefill"),
        events=("recompute_started", "admitted")),
    "event_count": RuleKind(
        "number", "the number of '{event}' events in this step",
        lambda rec, rule: sum(e.kind == rule.event for e in rec.events), needs=("event",)),
    "prefix_hit_tokens": RuleKind(
        "number", "the prompt tokens of {request} served from the prefix cache when it was admitted in this step",
        _prefix_hit, events=("admitted",), needs=("request",)),
    "shared_blocks": RuleKind(
        "number", "the GPU pages more than one request points to after this step (ref_count above 1)",
        lambda rec, rule: sum(b.device == "gpu" and b.ref_count > 1 for b in rec.blocks), events=("admitted",)),
    "request_blocks": RuleKind(
        "number", "the KV pages {request} holds after this step",
        lambda rec, rule: v.num_blocks if (v := rec.requests.get(rule.request)) else 0,
        events=("admitted", "blocked"), needs=("request",)),
}


# ---- checkpoints and grading -------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A question asked BEFORE step ``at_step`` runs (the history ends at at_step - 1)."""

    id: str
    at_step: int
    question: str
    rule: Rule
    options: tuple[str, ...] = ()  # the choices, or the request ids to pick from
    explain: str = ""  # the lesson's own words on why, shown after the reveal
    variant: str = BASE

    @property
    def kind(self) -> str:
        """'ids' (a set of request ids), 'number' or 'choice' (one of the options)."""
        return self.rule.spec.answer

    def answer_from(self, record: StepRecord) -> Answer:
        """The right answer, read off the engine's record of step at_step."""
        if record.step != self.at_step:
            raise ValueError(f"checkpoint {self.id!r} is about step {self.at_step}, not step {record.step}")
        return self.rule.read(record)

    def parse(self, value: Any) -> Answer:
        """Read a student's answer (text, a number, a list of ids) as this question's kind."""
        if self.kind == "ids":
            items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
            ids = sort_ids({str(i).strip() for i in items})
            unknown = [i for i in ids if self.options and i not in self.options]
            if unknown:
                raise AnswerError(f"unknown request id(s) {', '.join(unknown)}; pick from {', '.join(self.options)}")
            return ids
        if self.kind == "number":
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise AnswerError(f"the answer must be a number; got {value!r}") from None
            return int(number) if number.is_integer() else number
        if str(value) not in self.options:
            raise AnswerError(f"the answer must be one of {', '.join(self.options)}; got {value!r}")
        return str(value)


@dataclass
class Grade:
    correct: bool
    right_answer: Answer
    explanation: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def sort_ids(ids: set[str] | list[str]) -> list[str]:
    """Request ids in natural order: r2 before r10."""
    return sorted(ids, key=lambda i: (len(i), i))


def format_answer(answer: Answer) -> str:
    if isinstance(answer, list):
        return ", ".join(answer) if answer else "none"
    return str(answer)


def grade(checkpoint: Checkpoint, record: StepRecord, user_answer: Any) -> Grade:
    """Compare the student's answer with the engine's; raises AnswerError if it cannot be read."""
    right = checkpoint.answer_from(record)
    given = checkpoint.parse(user_answer)
    correct = given == right
    verdict = "Right" if correct else f"Not quite: you said {format_answer(given)}"
    lines = [f"{verdict}. The engine's answer: {format_answer(right)}.",
             f"Rule: {checkpoint.rule.describe()}.", f"Step {record.step} ran {describe_batch(record)}."]
    rule = checkpoint.rule
    lines += [f"- {e.kind} {e.request_id or ''}: {e.reason}".replace("  ", " ") for e in record.events
              if e.kind in rule.spec.events and (rule.request is None or e.request_id == rule.request)]
    if checkpoint.explain:
        lines.append(checkpoint.explain)
    return Grade(correct, right, "\n".join(lines))


def describe_batch(record: StepRecord) -> str:
    b = record.budget
    if not record.batch:
        return "no forward pass (idle)"
    work = ", ".join(f"{c.request_id} {c.kind} ({c.num_tokens} token{'s' * (c.num_tokens != 1)})"
                     for c in record.batch)
    return (f"{work}: {b.tokens_used} of {b.token_budget} budget tokens, {b.seqs_used} of {b.seq_cap} seats, "
            f"{b.gpu_blocks_used} of {b.num_gpu_blocks} KV pages in use after it")


# ---- the tuning challenge ----------------------------------------------------------------------

METRICS = ("ttft_steps", "ttft_ms", "itl_steps", "itl_ms", "e2e_steps", "e2e_ms", "queue_time_steps")
STATS = ("mean", "p50", "p95", "max")


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
        actual = agg[t.metric][t.stat]
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


# ---- lessons -----------------------------------------------------------------------------------


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


Workload = list[dict] | str | GeneratorSpec  # explicit requests, a preset name, or a generator


@dataclass(frozen=True)
class Lesson:
    """One lesson: its text, the scenario it runs, and the questions it asks along the way."""

    id: str  # the file stem, e.g. "04_kv_cache_full"; file names order the lessons
    title: str
    sections: tuple[Section, ...]
    config: dict  # EngineConfig keyword arguments (never the model: lessons are written for the default one)
    workload: Workload
    seed: int
    start_step: int  # the app runs steps before this one without stopping
    checkpoints: tuple[Checkpoint, ...]
    watch: tuple[Watch, ...] = ()
    variants: tuple[Variant, ...] = ()
    challenge: ChallengeSpec | None = None

    @property
    def variant_names(self) -> tuple[str, ...]:
        return (BASE, *(v.name for v in self.variants))

    def engine_config(self, variant: str = BASE, model: str = DEFAULT_MODEL, **changes) -> EngineConfig:
        """The lesson's knobs, the variant's on top, then any of the student's changes."""
        overrides = {} if variant == BASE else self._variant(variant).config
        return EngineConfig.from_dict({**self.config, **overrides, "seed": self.seed, "model": model, **changes})

    def workload_items(self) -> list[WorkloadItem]:
        if isinstance(self.workload, str):
            return PRESETS[self.workload]()
        if isinstance(self.workload, GeneratorSpec):
            return generate_workload(self.workload)
        return [WorkloadItem(**item) for item in self.workload]

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
    engine = Engine(config, loaded=loaded or load_model(config.model, config.device, config.dtype))
    submit(engine, lesson.workload_items())
    return engine


# ---- progress ----------------------------------------------------------------------------------


@dataclass
class LessonProgress:
    """A student's answers in one lesson: plain data, so st.session_state can hold it as a dict."""

    lesson_id: str
    answers: dict[str, Answer] = field(default_factory=dict)
    grades: dict[str, Grade] = field(default_factory=dict)
    challenge: ChallengeResult | None = None

    def record(self, checkpoint: Checkpoint, answer: Any, result: Grade) -> None:
        self.answers[checkpoint.id] = checkpoint.parse(answer)
        self.grades[checkpoint.id] = result

    def score(self) -> tuple[int, int]:
        """(correct, answered)."""
        return sum(g.correct for g in self.grades.values()), len(self.grades)

    def restart(self) -> None:
        self.answers.clear()
        self.grades.clear()
        self.challenge = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LessonProgress:
        challenge = data.get("challenge")
        return cls(data["lesson_id"], dict(data.get("answers", {})),
                   {k: Grade(**g) for k, g in data.get("grades", {}).items()},
                   ChallengeResult(challenge["passed"], [TargetResult(**r) for r in challenge["results"]],
                                   challenge["message"]) if challenge else None)


# ---- loading -----------------------------------------------------------------------------------

_REQUIRED = object()
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table",
               list: "an array"}


@dataclass
class _Table:
    """One TOML table being read; every complaint names the file and the dotted field."""

    file: str
    data: dict
    path: str = ""
    seen: set[str] = field(default_factory=set)

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, problem: str) -> LessonError:
        return LessonError(f"{self.file}: field '{self.name(key)}': {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _REQUIRED) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is _REQUIRED:
                raise self.error(key, "is required")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # TOML true is a Python int too; only accept it where a bool is asked for.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join(_TYPE_NAMES[k] for k in kinds)
            raise self.error(key, f"must be {wanted}; got {value!r}")
        return value

    def table(self, key: str, default: Any = _REQUIRED) -> _Table | None:
        value = self.get(key, dict, default)
        return None if value is None else _Table(self.file, value, self.name(key))

    def tables(self, key: str) -> list[_Table]:
        items = self.get(key, list, [])
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.error(f"{key}[{i}]", f"must be a table; got {item!r}")
        return [_Table(self.file, item, self.name(f"{key}[{i}]")) for i, item in enumerate(items)]

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise self.error(unknown[0], "is not a known field" + (f" (known: {', '.join(sorted(self.seen))})"
                                                                   if self.seen else ""))


def load_lessons(directory: Path = LESSONS_DIR) -> list[Lesson]:
    """Every NN_slug.toml with its NN_slug.md, in file-name order."""
    paths = sorted(p for p in directory.glob("*.toml") if re.match(r"\d+_", p.name))
    if not paths:
        raise LessonError(f"{directory}: no lesson files (NN_slug.toml)")
    return [load_lesson(p) for p in paths]


def load_lesson(toml_path: Path) -> Lesson:
    file = f"{toml_path.parent.name}/{toml_path.name}"
    if tomllib is None:
        raise LessonError(f"{file}: reading lessons needs Python 3.11+ (tomllib) or the 'tomli' package")
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LessonError(f"{file}: cannot be read: {exc}") from None
    md_path = toml_path.with_suffix(".md")
    if not md_path.exists():
        raise LessonError(f"{file}: its text {md_path.name} is missing")
    return _parse_lesson(_Table(file, data), toml_path.stem, read_sections(md_path))


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


def _parse_lesson(t: _Table, lesson_id: str, sections: list[Section]) -> Lesson:
    title = t.get("title", str)
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
    workload, request_ids = _parse_workload(t)
    checkpoints = tuple(_parse_checkpoint(c, names, request_ids, start_step) for c in t.tables("checkpoints"))
    ids = [c.id for c in checkpoints]
    if len(set(ids)) != len(ids):
        raise t.error("checkpoints", "ids must be unique")
    watch = tuple(_parse_watch(w, names) for w in t.tables("watch"))
    challenge = _parse_challenge(c) if (c := t.table("challenge", None)) else None
    t.done()
    return Lesson(lesson_id, title, tuple(sections), config, workload, seed, start_step, checkpoints, watch,
                  variants, challenge)


def _parse_variant(t: _Table, base: dict) -> Variant:
    variant = Variant(t.get("name", str), t.get("label", str), t.get("config", dict))
    try:
        EngineConfig.from_dict({**base, **variant.config})
    except ValueError as exc:
        raise t.error("config", str(exc)) from None
    t.done()
    return variant


def _parse_workload(t: _Table) -> tuple[Workload, list[str] | None]:
    """Exactly one of: [[requests]], preset = "name", [generator]. Returns it and, if known, the request ids."""
    given = [k for k in ("requests", "preset", "generator") if k in t.data]
    if len(given) != 1:
        raise t.error("requests", "give exactly one workload: [[requests]], preset or [generator]")
    if given == ["preset"]:
        name = t.get("preset", str)
        if name not in PRESETS:
            raise t.error("preset", f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
        return name, None
    if given == ["generator"]:
        g = t.table("generator")
        try:
            spec = GeneratorSpec(**g.data)
        except (TypeError, ValueError) as exc:
            raise t.error("generator", str(exc)) from None
        return spec, None
    items = []
    for r in t.tables("requests"):
        for key in r.data:
            if key not in FIELDS:
                raise r.error(key, f"is not a request field (fields: {', '.join(FIELDS)})")
        r.get("prompt", str)
        try:
            WorkloadItem(**r.data)
        except WorkloadError as exc:
            raise r.error(exc.field, exc.reason) from None
        items.append(dict(r.data))
    if not items:
        raise t.error("requests", "must list at least one request")
    return items, [f"r{i}" for i in range(len(items))]


def _parse_checkpoint(t: _Table, variants: tuple[str, ...], request_ids: list[str] | None,
                      start_step: int) -> Checkpoint:
    cid = t.get("id", str)
    at_step = t.get("at_step", int)
    if at_step < start_step:
        raise t.error("at_step", f"must be >= start_step ({start_step}); got {at_step}")
    question = t.get("question", str)
    variant = t.get("variant", str, BASE)
    if variant not in variants:
        raise t.error("variant", f"unknown variant {variant!r}; the lesson has {', '.join(variants)}")
    r = t.table("rule")
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
    options = tuple(str(o) for o in t.get("options", list, []))
    if spec.answer == "ids" and not options:
        if request_ids is None:
            raise t.error("options", "list the request ids to pick from (the workload is not an explicit list)")
        options = tuple(request_ids)
    if spec.answer == "choice" and len(options) < 2:
        raise t.error("options", f"rule {kind!r} asks for a choice: give at least two options")
    if spec.answer == "number" and options:
        raise t.error("options", f"rule {kind!r} asks for a number, so it takes no options")
    checkpoint = Checkpoint(cid, at_step, question, Rule(kind, request, event), options, t.get("explain", str, ""),
                            variant)
    t.done()
    return checkpoint


def _parse_watch(t: _Table, variants: tuple[str, ...]) -> Watch:
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


def _parse_challenge(t: _Table) -> ChallengeSpec:
    knobs = tuple(t.get("knobs", list))
    known = {f.name for f in dataclasses.fields(EngineConfig)}
    for knob in knobs:
        if knob not in known:
            raise t.error("knobs", f"unknown knob {knob!r}")
    targets = []
    for target in t.tables("targets"):
        metric, stat = target.get("metric", str), target.get("stat", str, "p95")
        if metric not in METRICS:
            raise target.error("metric", f"must be one of {', '.join(METRICS)}; got {metric!r}")
        if stat not in STATS:
            raise target.error("stat", f"must be one of {', '.join(STATS)}; got {stat!r}")
        targets.append(Target(metric, stat, float(target.get("max", (int, float)))))
        target.done()
    if not targets:
        raise t.error("targets", "give at least one target")
    t.done()
    return ChallengeSpec(tuple(targets), knobs)
