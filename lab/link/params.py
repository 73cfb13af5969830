"""A scenario as query parameters and back, driven by one table of parameters (PARAMS).

    ?lesson=4&k.num_gpu_blocks=24&k.preemption_mode=swap&seed=3&gen.rate=2&req.0=ROMEO:&req.0.max_tokens=8&step=12

Each row of PARAMS owns some of the link's keys and some of the scenario's fields,
and knows both directions: ``encode`` writes its fields as parameters (leaving out
defaults), ``decode`` reads its parameters back. ``encode_scenario`` and
``decode_scenario`` are the same loop over the table, in two directions, so a key
cannot be written one way and read another.

Values are spelled as a person would type them (engine.values: true/false, none,
0.1, 8-96). Links come from anywhere, so decoding never raises: each bad parameter
is dropped (its default stays) and named in a warning saying why.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from engine import EngineConfig
from engine.knobs import KNOB, LINK_KNOBS, LIVE_KNOBS
from engine.limits import MAX_STEPS
from engine.values import parse, parse_float, spell
from engine.workload import PRESETS, GeneratorSpec, WorkloadItem, WorkloadSource
from engine.workload.item import ITEM_TYPES
from engine.workload.load import LengthDist, RateSpec, TraceSpec
from lab.link.scenario import KNOB_PREFIX, LINK_LIST, Scenario

REQUEST_PREFIX = "req."
NO_WORKLOAD = "none"  # preset=none: the link's own requests are the whole workload
# GeneratorSpec field -> its parameter name.
GENERATOR_PARAMS = {"seed": "seed", "num_requests": "gen.requests", "arrival_rate": "gen.rate",
                    "prompt_tokens": "gen.prompt", "output_tokens": "gen.output", "priorities": "gen.priorities"}
_LESSON_ID = re.compile(r"[\w.-]{1,64}")
_LIVE_KNOB_KEY = re.compile(r"at(\d{1,9})\.(\w+)")
_REQUEST_KEY = re.compile(re.escape(REQUEST_PREFIX) + r"(\d{1,9})(?:\.(\w+))?")
_ITEM_DEFAULTS = {f.name: f.default for f in dataclasses.fields(WorkloadItem) if f.name != "prompt"}
_SPEC_TYPES = typing.get_type_hints(GeneratorSpec)
_SPEC_DEFAULTS = GeneratorSpec()
# A load in time: trace=<name> with trace.<field>, or load.<field> for requests drawn at a rate.
_LOADS = {"trace.": TraceSpec, "load.": RateSpec}


@dataclass
class Context:
    """What a link is read against: the config its knobs are relative to (the lesson's, or the
    lab's defaults), and the lessons a link may name."""

    base: EngineConfig
    lessons: Mapping[str, EngineConfig] | Collection[str] | None = None

    def base_for(self, lesson: str | None) -> EngineConfig:
        return self.lessons[lesson] if isinstance(self.lessons, Mapping) and lesson is not None else self.base


class Reader:
    """The link's parameters, which of them were read, and one warning per parameter not used."""

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

    def value(self, key: str, hint: object, check=lambda value: None) -> tuple[bool, object]:
        """(True, value) for a parameter read as hint and passed by check; (False, None) after a warning."""
        try:
            value = parse(self.take(key), hint)
            check(value)
        except (ValueError, TypeError) as exc:  # WorkloadError is a ValueError
            self.warn(key, str(exc))
            return False, None
        return True, value

    def step(self, key: str) -> int | None:
        def in_range(step: int) -> None:
            if not 0 <= step <= MAX_STEPS:
                raise ValueError(f"the step must be in [0, {MAX_STEPS}]")
        ok, step = self.value(key, int, in_range)
        return step if ok else None


# ---- the rows -----------------------------------------------------------------------------------


class LessonParam:
    """lesson=<id>: the lesson the link opens."""

    def encode(self, s: Scenario, base: EngineConfig) -> dict[str, str]:
        return {} if s.lesson is None else {"lesson": s.lesson}

    def decode(self, r: Reader, ctx: Context, s: Scenario) -> dict:
        value, lessons = r.take("lesson"), ctx.lessons
        if value is None:
            return {}
        if lessons is not None and value not in lessons:
            r.warn("lesson", f"no such lesson (lessons: {', '.join(sorted(lessons))})")
        elif lessons is None and not _LESSON_ID.fullmatch(value):
            r.warn("lesson", "a lesson id is 1-64 letters, digits, '.', '_' or '-'")
        else:
            return {"lesson": value}
        return {}


class KnobParams:
    """k.<knob>=<value>: a knob that differs from the base config (not the model or device, which
    name parts of the machine serving the lab)."""

    def encode(self, s: Scenario, base: EngineConfig) -> dict[str, str]:
        return {KNOB_PREFIX + k: spell(s.knobs[k]) for k in LINK_KNOBS  # in the table's order: equal links
                if k in s.knobs and s.knobs[k] != getattr(base, k)}

    def decode(self, r: Reader, ctx: Context, s: Scenario) -> dict:
        base, alone = ctx.base_for(s.lesson), {}
        for key in [k for k in r.params if k.startswith(KNOB_PREFIX)]:
            knob = key[len(KNOB_PREFIX):]
            if knob in KNOB and not KNOB[knob].link:
                r.take(key)
                r.warn(key, f"the {knob} cannot be set from a link: it names a part of the machine serving the lab")
                continue
            if knob not in LINK_KNOBS:
                r.take(key)
                r.warn(key, f"unknown knob {knob!r} (knobs: {', '.join(LINK_KNOBS)})")
                continue
            ok, value = r.value(key, KNOB[knob].annotation, KNOB[knob].check)
            if ok:
                alone[knob] = (key, value)
        # Then together, in the table's order: a knob is taken if it fits those taken so far with the ones
        # still to come (slo_admission needs the slo_ttft_ms and deployment after it), or at least those
        # taken so far (then the later knob it clashes with is the one refused, by name).
        knobs: dict[str, object] = {}
        order = [k for k in LINK_KNOBS if k in alone]
        for i, knob in enumerate(order):
            key, value = alone[knob]
            later = {k: alone[k][1] for k in order[i + 1:]}
            try:
                dataclasses.replace(base, **knobs, **{knob: value}, **later)
            except ValueError:
                try:
                    dataclasses.replace(base, **knobs, **{knob: value})
                except ValueError as exc:
                    r.warn(key, str(exc))
                    continue
            if value != getattr(base, knob):
                knobs[knob] = value
        return {"knobs": knobs}


def _length_text(dist: LengthDist) -> str:
    return f"{dist.kind}:{dist.a:g}:{dist.b:g}"


def _length(text: str) -> LengthDist:
    """"lognormal:1000:0.8" -> a LengthDist."""
    kind, *numbers = text.split(":")
    if len(numbers) not in (1, 2):
        raise ValueError(f"a length reads kind:a[:b], e.g. lognormal:1000:0.8; got {text!r}")
    return LengthDist(kind, *(parse_float(n) for n in numbers))


class WorkloadParams:
    """The workload, one of: trace=<name> with trace.<field>; load.<field> (requests drawn at a
    rate); preset=<name> (or none: only the req.<i> requests); seed with gen.<field> (a generator)."""

    def encode(self, s: Scenario, base: EngineConfig) -> dict[str, str]:
        source = s.workload
        if source is None:
            return {}
        if source.load is not None:
            return self._encode_load(source.load)
        if source.generator is None:
            return {"preset": source.preset or NO_WORKLOAD}
        params = {"seed": str(source.generator.seed)}  # always present: it is what marks a generated workload
        for name, key in GENERATOR_PARAMS.items():
            value = getattr(source.generator, name)
            if name != "seed" and value != getattr(_SPEC_DEFAULTS, name):
                params[key] = spell(value)
        return params

    @staticmethod
    def _encode_load(load: TraceSpec | RateSpec) -> dict[str, str]:
        """The fields that differ from the spec's defaults (a trace always names itself)."""
        prefix = next(p for p, cls in _LOADS.items() if isinstance(load, cls))
        default = type(load)()
        params = {"trace": load.name} if isinstance(load, TraceSpec) else {}
        for f in dataclasses.fields(load):
            value = getattr(load, f.name)
            if f.name != "name" and value != getattr(default, f.name):
                params[prefix + f.name] = _length_text(value) if isinstance(value, LengthDist) else spell(value)
        return params or {"load.rate": spell(load.rate)}

    def decode(self, r: Reader, ctx: Context, s: Scenario) -> dict:
        source = self._decode_load(r) or self._decode_preset(r) or self._decode_generator(r)
        return {"workload": source}

    @staticmethod
    def _decode_load(r: Reader) -> WorkloadSource | None:
        for prefix, cls in _LOADS.items():
            keys = [k for k in r.params if k.startswith(prefix)] + (["trace"] if cls is TraceSpec and
                                                                     "trace" in r.params else [])
            if not keys:
                continue
            hints, values = typing.get_type_hints(cls), {}
            for key in keys:
                name = "name" if key == "trace" else key[len(prefix):]
                if name not in hints:
                    r.take(key)
                    r.warn(key, f"unknown field (fields: {', '.join(hints)})")
                    continue
                hint = hints[name]
                ok, value = (r.value(key, str, lambda v: None) if hint is LengthDist else r.value(key, hint))
                if not ok:
                    continue
                try:
                    value = _length(value) if hint is LengthDist else value
                    cls(**{**values, name: value})  # validates with the fields read so far
                except (ValueError, TypeError) as exc:
                    r.warn(key, str(exc))
                    continue
                values[name] = value
            return WorkloadSource(load=cls(**values))
        return None

    @staticmethod
    def _decode_preset(r: Reader) -> WorkloadSource | None:
        preset = r.take("preset")
        if preset is None:
            return None
        for key in GENERATOR_PARAMS.values():
            if key in r.params:
                r.take(key)
                r.warn(key, "the link also names a preset, which is used instead of a generated workload")
        if preset == NO_WORKLOAD:
            return LINK_LIST
        if preset in PRESETS:
            return WorkloadSource(preset=preset)
        r.warn("preset", f"no such preset (presets: {', '.join(PRESETS)}, or {NO_WORKLOAD})")
        return None

    @staticmethod
    def _decode_generator(r: Reader) -> WorkloadSource | None:
        if "preset" in r.params or not any(key in r.params for key in GENERATOR_PARAMS.values()):
            return None
        values = {}
        for name, key in GENERATOR_PARAMS.items():
            if key in r.params:
                ok, value = r.value(key, _SPEC_TYPES[name],
                                    lambda v, name=name: dataclasses.replace(_SPEC_DEFAULTS, **{name: v}))
                if ok:
                    values[name] = value
        return WorkloadSource(generator=GeneratorSpec(**values))


class RequestParams:
    """req.<i>=<prompt>: a hand-added request; req.<i>.<field> its other WorkloadItem fields;
    req.<i>.at the step it was added just before (absent: it joins the workload at step 0)."""

    def encode(self, s: Scenario, base: EngineConfig) -> dict[str, str]:
        params = {}
        for i, item in enumerate(s.requests):
            params[f"{REQUEST_PREFIX}{i}"] = item.prompt
            for name, default in _ITEM_DEFAULTS.items():
                if getattr(item, name) != default:
                    params[f"{REQUEST_PREFIX}{i}.{name}"] = spell(getattr(item, name))
            if i in s.added_at:
                params[f"{REQUEST_PREFIX}{i}.at"] = str(s.added_at[i])
        return params

    def decode(self, r: Reader, ctx: Context, s: Scenario) -> dict:
        fields_of: dict[int, dict[str, str]] = {}
        for key in r.params:
            if match := _REQUEST_KEY.fullmatch(key):
                r.used.add(key)
                fields_of.setdefault(int(match[1]), {})[match[2] or "prompt"] = key
        items, added_at = [], {}
        for index in sorted(fields_of):
            keys = fields_of[index]
            if "prompt" not in keys:
                for key in keys.values():
                    r.warn(key, f"there is no {REQUEST_PREFIX}{index} giving that request's prompt")
                continue
            at = r.step(keys.pop("at")) if "at" in keys else None
            item = self._request(r, keys)
            if item is not None:
                if at is not None:
                    added_at[len(items)] = at
                items.append(item)
        return {"requests": items, "added_at": added_at}

    @staticmethod
    def _request(r: Reader, keys: dict[str, str]) -> WorkloadItem | None:
        """One hand-added request from its keys (field name -> parameter name)."""
        prompt_key = keys.pop("prompt")
        values = {}
        for name, key in sorted(keys.items()):
            if name not in _ITEM_DEFAULTS:
                r.warn(key, f"unknown request field {name!r} (fields: {', '.join(_ITEM_DEFAULTS)})")
                continue
            ok, value = r.value(key, ITEM_TYPES[name], lambda v, name=name: WorkloadItem("x", **{name: v}))
            if ok:
                values[name] = value
        try:
            return WorkloadItem(r.params[prompt_key], **values)
        except ValueError as exc:
            r.warn(prompt_key, str(exc))
            return None


class LiveKnobParams:
    """at<s>.<knob>=<value>: a live knob set just before step s, mid-run."""

    def encode(self, s: Scenario, base: EngineConfig) -> dict[str, str]:
        return {f"at{step}.{knob}": spell(knobs[knob])
                for step, knobs in sorted(s.live_knobs.items()) for knob in LINK_KNOBS if knob in knobs}

    def decode(self, r: Reader, ctx: Context, s: Scenario) -> dict:
        base, changes = ctx.base_for(s.lesson), {}
        for key in list(r.params):
            match = _LIVE_KNOB_KEY.fullmatch(key)
            if not match:
                continue
            step, knob = int(match[1]), match[2]
            if knob not in LIVE_KNOBS:
                r.take(key)
                r.warn(key, f"only a live knob can change mid-run (live knobs: {', '.join(sorted(LIVE_KNOBS))})")
                continue
            if step > MAX_STEPS:
                r.take(key)
                r.warn(key, f"the step must be in [0, {MAX_STEPS}]")
                continue
            ok, value = r.value(key, KNOB[knob].annotation,
                                lambda v, knob=knob: dataclasses.replace(base, **{knob: v}))
            if ok:
                changes.setdefault(step, {})[knob] = value
        return {"live_knobs": {s: {k: changes[s][k] for k in LINK_KNOBS if k in changes[s]} for s in sorted(changes)}}


class StepParam:
    """step=<s>: the step on screen (absent: before the first step)."""

    def encode(self, s: Scenario, base: EngineConfig) -> dict[str, str]:
        return {} if s.step is None else {"step": str(s.step)}

    def decode(self, r: Reader, ctx: Context, s: Scenario) -> dict:
        return {"step": r.step("step") if "step" in r.params else None}


# The lesson comes first: the knobs it names are read against its config.
PARAMS = (LessonParam(), KnobParams(), WorkloadParams(), RequestParams(), LiveKnobParams(), StepParam())


def encode_scenario(scenario: Scenario, defaults: EngineConfig | None = None) -> dict[str, str]:
    """The query parameters for a scenario, leaving out whatever is at its default.

    defaults: the config the knobs are relative to: the lesson's, in a lesson."""
    base = defaults or EngineConfig()
    params: dict[str, str] = {}
    for row in PARAMS:
        params |= row.encode(scenario, base)
    return params


def decode_scenario(params: Mapping[str, str | list[str]], defaults: EngineConfig | None = None,
                    lessons: Mapping[str, EngineConfig] | Collection[str] | None = None) -> tuple[Scenario, list[str]]:
    """Read a scenario from query parameters (e.g. st.query_params.to_dict()).

    Never raises on what a link holds: each bad parameter keeps its default and adds a
    warning naming it and why. lessons, if given, are the valid lesson ids; a mapping
    also gives each lesson's config, which its link's knobs are relative to (as
    encode_scenario wrote them), in place of defaults."""
    r, ctx, scenario = Reader(params), Context(defaults or EngineConfig(), lessons), Scenario()
    for row in PARAMS:
        scenario = dataclasses.replace(scenario, **row.decode(r, ctx, scenario))
    for key in r.params:
        if key not in r.used:
            r.warn(key, "unknown parameter")
    return scenario, r.warnings
