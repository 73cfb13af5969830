"""A whole lab scenario as URL query parameters, so a link reproduces what its sender saw.

A link holds the lesson, the knobs that differ from the defaults, the workload
(a preset's name, or a generator's seed and settings), hand-added requests and
the step on screen, as a flat str -> str dict that reads well in the address bar:

    ?lesson=4&k.num_gpu_blocks=24&k.preemption_mode=swap&seed=3&gen.rate=2&req.0=ROMEO:&req.0.max_tokens=8&step=12

Keys:
    lesson               lesson id
    k.<knob>             an EngineConfig knob (not model or device, which name the server's machine),
                         relative to a base config: the lesson's, or the lab's defaults
    preset               a workload preset from engine.workload.PRESETS, or none: only the req.<i> requests
    seed, gen.requests, gen.rate, gen.prompt, gen.output, gen.priorities
                         a generated workload (any of them present means one); ranges read "8-96"
    req.<i>              the prompt of hand-added request i; req.<i>.<field> its other WorkloadItem fields;
                         req.<i>.at the step it was added just before (absent: it joins the workload at step 0)
    at<s>.<knob>         a live knob (engine.config.LIVE_KNOBS) set just before step s, mid-run
    step                 the step on screen (absent: before the first step)

Values are spelled as a person would type them: true/false, none, 0.1, 8-96.
Links come from anywhere, so decoding never raises: each bad parameter is dropped
(its default stays) and named in a warning saying why.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from engine import EngineConfig
from engine.config import LIVE_KNOBS
from engine.load import LengthDist, RateSpec, TraceSpec
from engine.workload import PRESETS, GeneratorSpec, WorkloadItem, WorkloadSource
from lab.budgets import LINK_STEPS, BudgetError
from lab.run import Change, History, Loader, Run

KNOB_PREFIX = "k."
REQUEST_PREFIX = "req."
NO_WORKLOAD = "none"  # preset=none: the link's own requests are the whole workload
LINK_LIST = WorkloadSource(name="workload from a link")  # what preset=none reads as: no requests of its own
# The model and device name things on the machine serving the lab, not part of a scenario.
LINK_KNOBS = tuple(f.name for f in dataclasses.fields(EngineConfig) if f.name not in ("model", "device"))
# GeneratorSpec field -> its parameter name.
GENERATOR_PARAMS = {"seed": "seed", "num_requests": "gen.requests", "arrival_rate": "gen.rate",
                    "prompt_tokens": "gen.prompt", "output_tokens": "gen.output", "priorities": "gen.priorities"}
MAX_STEP = 100_000
POOL_KNOBS = ("num_gpu_blocks", "num_cpu_blocks")  # what sizes the KV pools, the part a server's budget caps
_LESSON_ID = re.compile(r"[\w.-]{1,64}")
_LIVE_KNOB_KEY = re.compile(r"at(\d{1,9})\.(\w+)")

_KNOB_TYPES = typing.get_type_hints(EngineConfig)
_ITEM_TYPES = typing.get_type_hints(WorkloadItem)
_ITEM_DEFAULTS = {f.name: f.default for f in dataclasses.fields(WorkloadItem) if f.name != "prompt"}
_SPEC_TYPES = typing.get_type_hints(GeneratorSpec)
# A load in time: trace=<name> with trace.<field>, or load.<field> for requests drawn at a rate.
_LOADS = {"trace.": TraceSpec, "load.": RateSpec}
_SPEC_DEFAULTS = GeneratorSpec()


@dataclass
class Scenario:
    """Everything a link restores. Defaults mean 'whatever the lab starts with'."""

    lesson: str | None = None
    knobs: dict[str, object] = field(default_factory=dict)  # only knobs that differ from the defaults
    # A preset or a generator (seed included), or an empty list (preset=none: only the requests below);
    # None: the lesson's or the lab's own.
    workload: WorkloadSource | None = None
    requests: list[WorkloadItem] = field(default_factory=list)  # added by hand, after the workload's
    step: int | None = None  # the step on screen; None: before the first step
    # What the user changed mid-run, as lab.run.Run files it, so a link replays the run exactly:
    # live knobs set just before a step, and the step each hand-added request was added before
    # (index into requests; a request not listed here joins the workload before step 0).
    live_knobs: dict[int, dict[str, object]] = field(default_factory=dict)
    added_at: dict[int, int] = field(default_factory=dict)


def changed_knobs(config: EngineConfig, defaults: EngineConfig | None = None) -> dict[str, object]:
    """The knobs a link must carry: those that differ from the defaults."""
    base = (defaults or EngineConfig()).to_dict()
    return {k: v for k, v in config.to_dict().items() if k in LINK_KNOBS and v != base[k]}


def scenario_config(scenario: Scenario, defaults: EngineConfig | None = None) -> EngineConfig:
    """The engine config the scenario describes."""
    return dataclasses.replace(defaults or EngineConfig(), **scenario.knobs)


def scenario_workload(scenario: Scenario, default: Sequence[WorkloadItem] = ()) -> list[WorkloadItem]:
    """The requests to submit: the preset's or generator's (default: the lesson's or the lab's
    own workload, when the link names none), then the hand-added ones not added mid-run
    (those are in scenario_changes)."""
    items = list(default) if scenario.workload is None else scenario.workload.items()
    return items + [item for i, item in enumerate(scenario.requests) if i not in scenario.added_at]


def scenario_changes(scenario: Scenario) -> dict[int, tuple[dict[str, object], list[WorkloadItem]]]:
    """What the user did just before each step: the live knobs set, then the requests added (link order)."""
    changes: dict[int, tuple[dict[str, object], list[WorkloadItem]]] = {}
    for step, knobs in scenario.live_knobs.items():
        changes.setdefault(step, ({}, []))[0].update(knobs)
    for i in sorted(scenario.added_at):
        changes.setdefault(scenario.added_at[i], ({}, []))[1].append(scenario.requests[i])
    return dict(sorted(changes.items()))


def scenario_of(run: History, base: EngineConfig, source: WorkloadSource, lesson: str | None = None) -> Scenario:
    """The run as a link's scenario. base: the config its knobs are relative to (the lesson's, or
    the lab's defaults); source: where its workload came from (in a lesson, the lesson's).

    The workload is named by its source (a lesson, a preset, a generator) where the run's
    workload starts with the source's requests; anything else is listed request by request."""
    named = source.items() if lesson is not None or source.named else []
    if run.workload[:len(named)] != named:
        named = []
    workload = LINK_LIST if not named else None if lesson is not None else source
    requests = run.workload[len(named):]
    added_at = {}
    for step, change in sorted(run.changes.items()):
        for item in change.requests:
            added_at[len(requests)] = step
            requests.append(item)
    live = {step: dict(change.knobs) for step, change in run.changes.items() if change.knobs}
    return Scenario(lesson=lesson, knobs=changed_knobs(run.config, base), workload=workload, requests=requests,
                    step=run.cursor if run.cursor >= 0 else None, live_knobs=live, added_at=added_at)


def open_scenario(scenario: Scenario, base: EngineConfig, default: Sequence[WorkloadItem],
                  load: Loader) -> tuple[Run, list[str]]:
    """A run rebuilt from a scenario: its config and workload, then its mid-run changes replayed
    up to its step. Returns notes on what did not fit; ValueError if the run cannot be built."""
    notes = []
    try:
        run = Run(scenario_config(scenario, base), scenario_workload(scenario, default), load=load)
    except BudgetError as exc:  # a pool too big for the server: keep the base's pool, open the rest
        pool = {k: v for k, v in scenario.knobs.items() if k not in POOL_KNOBS}
        if pool == scenario.knobs:
            raise
        notes.append(f"{', '.join(KNOB_PREFIX + k for k in POOL_KNOBS if k in scenario.knobs)}: {exc}; "
                     "the pool kept its default size")
        scenario = dataclasses.replace(scenario, knobs=pool)
        run = Run(scenario_config(scenario, base), scenario_workload(scenario, default), load=load)
    changes = {step: Change(dict(knobs), list(items)) for step, (knobs, items) in scenario_changes(scenario).items()}
    if any(step > LINK_STEPS for step in changes):
        notes.append(f"the link changes the run after step {LINK_STEPS:,}; a link may replay at most {LINK_STEPS:,} "
                     "steps on this server, so those changes were left out")
        changes = {step: change for step, change in changes.items() if step <= LINK_STEPS}
    notes += run.follow(changes)
    if scenario.step is not None and scenario.step >= LINK_STEPS:
        notes.append(f"link parameter step={scenario.step}: a link may replay at most {LINK_STEPS:,} steps on this "
                     f"server, so it opens at step {LINK_STEPS - 1:,}; press Run to go further")
        scenario = dataclasses.replace(scenario, step=LINK_STEPS - 1)
    if scenario.step is not None:
        run.step(scenario.step + 1 - run.next_step)
        run.seek(scenario.step)
        if run.cursor != scenario.step:
            notes.append(f"link parameter step={scenario.step}: the run ends at step {run.cursor}, shown instead")
    return run, notes


# ---- encoding -----------------------------------------------------------------------------------


def _text(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return f"{value[0]}-{value[1]}"
    return repr(value) if isinstance(value, float) else str(value)


def encode_scenario(scenario: Scenario, defaults: EngineConfig | None = None) -> dict[str, str]:
    """The query parameters for a scenario, leaving out whatever is at its default.

    defaults: the config the knobs are relative to: the lesson's, in a lesson."""
    base = (defaults or EngineConfig()).to_dict()
    params: dict[str, str] = {}
    if scenario.lesson is not None:
        params["lesson"] = scenario.lesson
    for knob in LINK_KNOBS:  # in the config's order, so equal scenarios give equal links
        if knob in scenario.knobs and scenario.knobs[knob] != base[knob]:
            params[KNOB_PREFIX + knob] = _text(scenario.knobs[knob])
    params |= _workload_params(scenario.workload)
    for i, item in enumerate(scenario.requests):
        params |= _request_params(i, item, scenario.added_at.get(i))
    for step, knobs in sorted(scenario.live_knobs.items()):
        params |= {f"at{step}.{knob}": _text(knobs[knob]) for knob in LINK_KNOBS if knob in knobs}
    if scenario.step is not None:
        params["step"] = str(scenario.step)
    return params


def _length_text(dist: LengthDist) -> str:
    return f"{dist.kind}:{dist.a:g}:{dist.b:g}"


def _load_params(load: TraceSpec | RateSpec) -> dict[str, str]:
    """The fields that differ from the spec's defaults (a trace always names itself)."""
    prefix = next(p for p, cls in _LOADS.items() if isinstance(load, cls))
    default = type(load)()
    params = {"trace": load.name} if isinstance(load, TraceSpec) else {}
    for f in dataclasses.fields(load):
        value = getattr(load, f.name)
        if f.name != "name" and value != getattr(default, f.name):
            params[prefix + f.name] = _length_text(value) if isinstance(value, LengthDist) else _text(value)
    return params or {"load.rate": _text(load.rate)}


def _workload_params(source: WorkloadSource | None) -> dict[str, str]:
    if source is None:
        return {}
    if source.load is not None:
        return _load_params(source.load)
    if source.generator is None:
        return {"preset": source.preset or NO_WORKLOAD}
    params = {"seed": str(source.generator.seed)}  # always present: it is what marks a generated workload
    for name, key in GENERATOR_PARAMS.items():
        value = getattr(source.generator, name)
        if name != "seed" and value != getattr(_SPEC_DEFAULTS, name):
            params[key] = _text(value)
    return params


def _request_params(i: int, item: WorkloadItem, added_at: int | None) -> dict[str, str]:
    params = {f"{REQUEST_PREFIX}{i}": item.prompt}
    for name, default in _ITEM_DEFAULTS.items():
        if getattr(item, name) != default:
            params[f"{REQUEST_PREFIX}{i}.{name}"] = _text(getattr(item, name))
    if added_at is not None:
        params[f"{REQUEST_PREFIX}{i}.at"] = str(added_at)
    return params


# ---- decoding -----------------------------------------------------------------------------------


def _length_parts(text: str) -> tuple[str, float, float]:
    """"lognormal:1000:0.8" -> its LengthDist fields."""
    kind, *numbers = text.split(":")
    if len(numbers) not in (1, 2):
        raise ValueError(f"a length reads kind:a[:b], e.g. lognormal:1000:0.8; got {text!r}")
    return kind, *(_float(n) for n in numbers)


def _parse(text: str, tp: object) -> object:
    """Read one value as type tp; ValueError says what was expected."""
    text = text.strip()
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):  # int | None
        return None if text.lower() == "none" else _parse(text, next(a for a in args if a is not type(None)))
    if typing.get_origin(tp) is tuple:
        match = re.fullmatch(r"([+-]?\d+)-([+-]?\d+)", text)
        if not match:
            raise ValueError(f"expected a range like 8-96, got {text!r}")
        return int(match[1]), int(match[2])
    return _PARSERS.get(tp, str)(text)


def _bool(text: str) -> bool:
    flags = {"true": True, "false": False, "1": True, "0": False, "on": True, "off": False}
    if text.lower() not in flags:
        raise ValueError(f"expected true or false, got {text!r}")
    return flags[text.lower()]


def _int(text: str) -> int:
    if not re.fullmatch(r"[+-]?\d{1,18}", text):
        raise ValueError(f"expected an integer, got {text!r}")
    return int(text)


def _float(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or len(text) > 32:
        raise ValueError(f"expected a number, got {text!r}")
    return number


_PARSERS = {bool: _bool, int: _int, float: _float}


def parse_knob(knob: str, text: str) -> object:
    """One knob's value as a person types it (true, none, 0.1); ValueError says what was expected."""
    return _parse(text, _KNOB_TYPES[knob])


class _Decoder:
    """Collects the scenario and one warning per parameter it could not use."""

    def __init__(self, params: Mapping[str, str | list[str]]):
        # A repeated key arrives as a list; the last one wins, as in the browser's own reading.
        self.params = {k: (v[-1] if v else "") if isinstance(v, list) else v for k, v in params.items()}
        self.used: set[str] = set()
        self.warnings: list[str] = []

    def take(self, key: str) -> str | None:
        self.used.add(key)
        return self.params.get(key)

    def warn(self, key: str, why: str) -> None:
        value = self.params.get(key, "")
        shown = value if len(value) <= 40 else value[:37] + "..."
        self.warnings.append(f"link parameter {key}={shown!r} ignored: {why}")

    def lesson(self, lessons: Collection[str] | None) -> str | None:
        value = self.take("lesson")
        if value is None:
            return None
        if lessons is not None and value not in lessons:
            self.warn("lesson", f"no such lesson (lessons: {', '.join(sorted(lessons))})")
        elif lessons is None and not _LESSON_ID.fullmatch(value):
            self.warn("lesson", "a lesson id is 1-64 letters, digits, '.', '_' or '-'")
        else:
            return value
        return None

    def knobs(self, base: EngineConfig) -> dict[str, object]:
        knobs: dict[str, object] = {}
        for key in [k for k in self.params if k.startswith(KNOB_PREFIX)]:
            knob, value = key[len(KNOB_PREFIX):], self.take(key)
            if knob in ("model", "device"):
                self.warn(key, f"the {knob} cannot be set from a link: it names a part of the machine serving "
                          "the lab")
                continue
            if knob not in LINK_KNOBS:
                self.warn(key, f"unknown knob {knob!r} (knobs: {', '.join(LINK_KNOBS)})")
                continue
            try:
                parsed = parse_knob(knob, value)
                # Validate with the knobs accepted so far, so a clash between two knobs is caught too.
                dataclasses.replace(base, **knobs, **{knob: parsed})
            except ValueError as exc:
                self.warn(key, str(exc))
                continue
            if parsed != getattr(base, knob):
                knobs[knob] = parsed
        return {k: knobs[k] for k in LINK_KNOBS if k in knobs}

    def _load(self) -> WorkloadSource | None:
        """A trace (trace=name, trace.<field>) or a load at a rate (load.<field>), if the link gives one."""
        for prefix, cls in _LOADS.items():
            keys = [k for k in self.params if k.startswith(prefix)] + (["trace"] if cls is TraceSpec and
                                                                        "trace" in self.params else [])
            if not keys:
                continue
            hints, values = typing.get_type_hints(cls), {}
            for key in keys:
                name = "name" if key == "trace" else key[len(prefix):]
                text = self.take(key)
                try:
                    if name not in hints:
                        raise ValueError(f"unknown field (fields: {', '.join(hints)})")
                    value = LengthDist(*_length_parts(text)) if hints[name] is LengthDist else _parse(text, hints[name])
                    cls(**{**values, name: value})  # validates with the fields read so far
                except (ValueError, TypeError) as exc:
                    self.warn(key, str(exc))
                    continue
                values[name] = value
            return WorkloadSource(load=cls(**values))
        return None

    def workload(self) -> WorkloadSource | None:
        load = self._load()
        if load is not None:
            return load
        preset = self.take("preset")
        given = [key for key in GENERATOR_PARAMS.values() if key in self.params]
        if preset is not None:
            for key in given:
                self.take(key)
                self.warn(key, "the link also names a preset, which is used instead of a generated workload")
            if preset == NO_WORKLOAD:
                return LINK_LIST
            if preset in PRESETS:
                return WorkloadSource(preset=preset)
            self.warn("preset", f"no such preset (presets: {', '.join(PRESETS)}, or {NO_WORKLOAD})")
            return None
        if not given:
            return None
        values = {}
        for name, key in GENERATOR_PARAMS.items():
            if key not in self.params:
                continue
            try:
                value = _parse(self.take(key), _SPEC_TYPES[name])
                dataclasses.replace(_SPEC_DEFAULTS, **{name: value})  # validates that one field
            except ValueError as exc:
                self.warn(key, str(exc))
                continue
            values[name] = value
        return WorkloadSource(generator=GeneratorSpec(**values))

    def live_knobs(self, base: EngineConfig) -> dict[int, dict[str, object]]:
        changes: dict[int, dict[str, object]] = {}
        for key in self.params:
            match = _LIVE_KNOB_KEY.fullmatch(key)
            if not match:
                continue
            step, knob, value = int(match[1]), match[2], self.take(key)
            if knob not in LIVE_KNOBS:
                self.warn(key, f"only a live knob can change mid-run (live knobs: {', '.join(sorted(LIVE_KNOBS))})")
                continue
            if step > MAX_STEP:
                self.warn(key, f"the step must be in [0, {MAX_STEP}]")
                continue
            try:
                parsed = parse_knob(knob, value)
                dataclasses.replace(base, **{knob: parsed})  # validates
            except ValueError as exc:
                self.warn(key, str(exc))
                continue
            changes.setdefault(step, {})[knob] = parsed
        return {s: {k: changes[s][k] for k in LINK_KNOBS if k in changes[s]} for s in sorted(changes)}

    def requests(self) -> tuple[list[WorkloadItem], dict[int, int]]:
        """The hand-added requests, and the step each one added mid-run was added before."""
        pattern = re.compile(re.escape(REQUEST_PREFIX) + r"(\d{1,9})(?:\.(\w+))?")
        fields_of: dict[int, dict[str, str]] = {}
        for key in self.params:
            match = pattern.fullmatch(key)
            if match:
                self.used.add(key)
                fields_of.setdefault(int(match[1]), {})[match[2] or "prompt"] = key
        items, added_at = [], {}
        for index in sorted(fields_of):
            keys = fields_of[index]
            if "prompt" not in keys:
                for key in keys.values():
                    self.warn(key, f"there is no {REQUEST_PREFIX}{index} giving that request's prompt")
                continue
            at = self._added_at(keys.pop("at", None))
            item = self._request(dict(keys))
            if item is not None:
                if at is not None:
                    added_at[len(items)] = at
                items.append(item)
        return items, added_at

    def _added_at(self, key: str | None) -> int | None:
        if key is None:
            return None
        try:
            step = _parse(self.params[key], int)
        except ValueError as exc:
            self.warn(key, str(exc))
            return None
        if not 0 <= step <= MAX_STEP:
            self.warn(key, f"the step must be in [0, {MAX_STEP}]")
            return None
        return step

    def _request(self, keys: dict[str, str]) -> WorkloadItem | None:
        """One hand-added request from its keys (field name -> parameter name)."""
        prompt_key = keys.pop("prompt")
        values = {}
        for name, key in sorted(keys.items()):
            if name not in _ITEM_DEFAULTS:
                self.warn(key, f"unknown request field {name!r} (fields: {', '.join(_ITEM_DEFAULTS)})")
                continue
            try:
                value = _parse(self.params[key], _ITEM_TYPES[name])
                WorkloadItem("x", **{name: value})  # validates that one field
            except ValueError as exc:  # WorkloadError is a ValueError
                self.warn(key, str(exc))
                continue
            values[name] = value
        try:
            return WorkloadItem(self.params[prompt_key], **values)
        except ValueError as exc:
            self.warn(prompt_key, str(exc))
            return None

    def step(self) -> int | None:
        value = self.take("step")
        if value is None:
            return None
        try:
            step = _parse(value, int)
        except ValueError as exc:
            self.warn("step", str(exc))
            return None
        if not 0 <= step <= MAX_STEP:
            self.warn("step", f"the step must be in [0, {MAX_STEP}]")
            return None
        return step


def decode_scenario(params: Mapping[str, str | list[str]], defaults: EngineConfig | None = None,
                    lessons: Mapping[str, EngineConfig] | Collection[str] | None = None) -> tuple[Scenario, list[str]]:
    """Read a scenario from query parameters (e.g. st.query_params.to_dict()).

    Never raises on what a link holds: each bad parameter keeps its default and adds a
    warning naming it and why. lessons, if given, are the valid lesson ids; a mapping
    also gives each lesson's config, which its link's knobs are relative to (as
    encode_scenario wrote them), in place of defaults."""
    d = _Decoder(params)
    lesson = d.lesson(lessons)
    base = lessons[lesson] if isinstance(lessons, Mapping) and lesson is not None else defaults or EngineConfig()
    requests, added_at = d.requests()
    scenario = Scenario(lesson=lesson, knobs=d.knobs(base), workload=d.workload(), requests=requests,
                        step=d.step(), live_knobs=d.live_knobs(base), added_at=added_at)
    for key in d.params:
        if key not in d.used:
            d.warn(key, "unknown parameter")
    return scenario, d.warnings
