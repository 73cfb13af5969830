"""A fleet scenario as query parameters and back, from one table (PARAMS).

    ?page=fleet&f.router=llmd&f.num_replicas=4&k.num_gpu_blocks=48&load=mooncake-synth&load.rate=3&event=120
    &at40.f.prefix_cache_scorer_weight=0    (a live fleet knob set just before event 40)

A fleet's scenario is its knobs at event 0, its load, its script of live changes and the
event on screen; the fleet is deterministic, so running the script to that event reproduces
it exactly.
Each row names its parameter, the value's type and where the value lives; ``encode``
and ``decode`` are one loop over the rows in two directions, writing only values that
differ from the page's defaults. Links come from anywhere: decoding never raises, and
each bad parameter keeps its default and is named in a warning.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine import EngineConfig
from engine.fleet.config import FLEET_KNOBS, LIVE_FLEET_KNOBS, FleetConfig
from engine.knobs import KNOB, Knob
from engine.values import parse, spell
from lab.budgets import FLEET_EVENTS
from lab.fleet.run import FLEET_DEPLOYMENT, FleetLoad, FleetRun

ENGINE_KNOBS = ("num_gpu_blocks", "block_size", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs",
                "deployment", "slo_ttft_ms", "slo_tpot_ms")  # each replica's, as the Fleet page offers them
EVENT_PARAM = "event"
CHANGE_KEY = re.compile(r"at([0-9]{1,9})\.f\.(\w+)")  # at<event>.f.<knob>: a live knob set just before that event


@dataclass(frozen=True)
class Row:
    """One parameter: `part` is where its value lives ('engine', 'fleet' or 'load'), `name` its field there."""

    key: str
    part: str
    name: str
    knob: Knob | None = None  # the knob that checks it (engine and fleet rows)
    hint: object = None  # the type a load field parses as

    def parse(self, text: str) -> object:
        if self.knob is not None:
            value = parse(text, self.knob.annotation)
            self.knob.check(value)
            return value
        return parse(text, self.hint)


PARAMS: tuple[Row, ...] = (
    *(Row(f"k.{name}", "engine", name, KNOB[name]) for name in ENGINE_KNOBS),
    *(Row(f"f.{knob.name}", "fleet", knob.name, knob) for knob in FLEET_KNOBS),
    Row("load", "load", "trace", hint=str),
    Row("load.duration_s", "load", "duration_s", hint=float),
    Row("load.start_s", "load", "start_s", hint=float),
    Row("load.rate", "load", "rate", hint=float | None),
)
FLEET_ROW = {row.name: row for row in PARAMS if row.part == "fleet"}  # a live change reads as its f. row


@dataclass
class FleetScenario:
    """What a fleet link holds."""

    engine: dict[str, object] = field(default_factory=dict)  # each replica's knobs off the engine's defaults
    fleet: FleetConfig = field(default_factory=FleetConfig)
    load: FleetLoad = field(default_factory=FleetLoad)
    event: int = -1  # the event on screen (-1: none run yet)
    changes: dict[int, dict[str, object]] = field(default_factory=dict)  # event -> live fleet knobs set before it


# The Fleet page's first fleet: four replicas behind Dynamo's KV router, with prefix caching on (what a
# KV-aware router reads), serving ten seconds of the Mooncake conversation trace, judged by lesson 12's
# SLO (first token within 1,000 ms, 100 ms per later token: a choice, not a measurement).
DEFAULTS = FleetScenario(engine={"enable_prefix_caching": True, "slo_ttft_ms": 1000.0, "slo_tpot_ms": 100.0},
                         fleet=FleetConfig(num_replicas=4))


def scenario_of(run: FleetRun) -> FleetScenario:
    """The scenario that reproduces a fleet run at the event on screen."""
    engine = {n: getattr(run.config, n) for n in ENGINE_KNOBS if getattr(run.config, n) != KNOB[n].default}
    if engine.get("deployment") == FLEET_DEPLOYMENT:
        del engine["deployment"]  # the fleet's own default clock
    return FleetScenario(engine, run.fleet, run.load, run.cursor, {i: dict(c) for i, c in run.changes.items()})


def _parts(scenario: FleetScenario) -> dict[str, dict[str, object]]:
    engine = {n: scenario.engine.get(n, KNOB[n].default) for n in ENGINE_KNOBS}  # in full: a default may differ
    return {"engine": engine, "fleet": dataclasses.asdict(scenario.fleet),
            "load": dataclasses.asdict(scenario.load)}


def encode(scenario: FleetScenario, defaults: FleetScenario) -> dict[str, str]:
    """The parameters that differ from the defaults, and the event on screen."""
    mine, base = _parts(scenario), _parts(defaults)
    params = {row.key: spell(mine[row.part][row.name]) for row in PARAMS
              if row.name in mine[row.part] and mine[row.part][row.name] != base[row.part].get(row.name)}
    for index, knobs in sorted(scenario.changes.items()):
        params.update({f"at{index}.f.{k.name}": spell(knobs[k.name]) for k in FLEET_KNOBS if k.name in knobs})
    if scenario.event >= 0:
        params[EVENT_PARAM] = str(scenario.event)
    return params


def decode(params: Mapping[str, str], defaults: FleetScenario, base: EngineConfig) -> tuple[FleetScenario, list[str]]:
    """The scenario a link names, and one warning per parameter it could not use."""
    warnings: list[str] = []
    values: dict[str, dict[str, object]] = {"engine": dict(defaults.engine), "fleet": {}, "load": {}}
    keys: dict[str, list[str]] = {"engine": [], "fleet": [], "load": []}  # the parameters read into each part
    known = {row.key: row for row in PARAMS}
    changes: dict[int, dict[str, object]] = {}
    for key, text in params.items():
        if key == EVENT_PARAM:
            continue
        if CHANGE_KEY.fullmatch(key):
            _change(key, text, changes, warnings)
            continue
        row = known.get(key)
        if row is None:
            warnings.append(f"{key}: not a fleet parameter")
            continue
        try:
            values[row.part][row.name] = row.parse(text)
            keys[row.part].append(key)
        except ValueError as exc:
            warnings.append(f"{key}={text[:40]!r}: {exc}")
    engine = _build(lambda **v: (base.with_changes(**v), v)[1], values["engine"], dict(defaults.engine),
                    keys["engine"], warnings)
    fleet = _build(lambda **v: dataclasses.replace(defaults.fleet, **v), values["fleet"], defaults.fleet,
                   keys["fleet"], warnings)
    load = _build(lambda **v: dataclasses.replace(defaults.load, **v), values["load"], defaults.load,
                  keys["load"], warnings)
    return FleetScenario(engine, fleet, load, _event(params.get(EVENT_PARAM), warnings),
                         {i: changes[i] for i in sorted(changes)}), warnings


def _change(key: str, text: str, changes: dict[int, dict[str, object]], warnings: list[str]) -> None:
    """One at<event>.f.<knob> parameter, into the script, or named in a warning."""
    index, name = CHANGE_KEY.fullmatch(key).groups()
    if name not in LIVE_FLEET_KNOBS:
        warnings.append(f"{key}: only a live fleet knob can change mid-run ({', '.join(sorted(LIVE_FLEET_KNOBS))})")
    elif int(index) >= FLEET_EVENTS:
        warnings.append(f"{key}: the event must be in [0, {FLEET_EVENTS - 1}]")
    else:
        try:
            changes.setdefault(int(index), {})[name] = FLEET_ROW[name].parse(text)
        except ValueError as exc:
            warnings.append(f"{key}={text[:40]!r}: {exc}")


def _build(make, values: dict, default, keys: list[str], warnings: list[str]):
    """What the values make together, or the default (with a warning naming their keys) if they do not fit."""
    try:
        return make(**values)
    except ValueError as exc:
        warnings.append(f"{', '.join(keys)}: {exc}")
        return default


def _event(text: str | None, warnings: list[str]) -> int:
    if text is None:
        return -1
    if not re.fullmatch(r"[0-9]{1,9}", text) or int(text) >= FLEET_EVENTS:  # isdigit() takes '²', int() does not
        warnings.append(f"{EVENT_PARAM}={text[:20]!r}: must be an event number in [0, {FLEET_EVENTS - 1}]")
        return -1
    return int(text)
