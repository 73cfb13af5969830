"""Fleets run to the end and compared: two fleet configs on one load (A/B), or one knob swept.

Every run is a whole FleetRun on the same requests; the fleet is deterministic, so the same
knobs and load give the same table anywhere. Times are modeled on the deployment the replicas
are priced on. Sweep figures reuse the lab's sweep layout (lab/sweep.py) with a fleet's panels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from engine import EngineConfig
from engine.fleet.config import FLEET_KNOB, FleetConfig
from engine.metrics import METRICS
from engine.values import parse
from lab.budgets import FLEET_EVENTS
from lab.fleet.run import FleetLoad, FleetRun, Loader
from lab.sweep import MAX_VALUES, RATE, SweepPoint

# What a fleet is judged by: what it served within the SLO, its tails, and how much prefill it saved.
COLUMNS = tuple(METRICS[m] for m in ("goodput", "request_throughput", "slo_attainment", "ttft_ms.p50", "ttft_ms.p90",
                                     "itl_ms.p90", "tpot_ms.p90", "prefix_cache_hit_rate"))
PANELS = (
    ("Served (requests/s)", [("throughput", "request_throughput"), ("goodput", "goodput")]),
    ("Time to first token (ms)", [("p50", "ttft_ms.p50"), ("p90", "ttft_ms.p90")]),
    ("Inter-token latency p90 (ms)", [("ITL p90", "itl_ms.p90")]),
    ("Prefix reuse", [("cached prompt tokens", "prefix_cache_hit_rate")]),
)
# The knobs a fleet sweep can vary: the fleet's numbers (not its names: a router is compared by A/B) and the rate.
SWEEP_KNOBS = (RATE, "num_replicas", "num_prefill_replicas", *(
    k for k, knob in FLEET_KNOB.items() if knob.type in (int, float) and k not in (
        "num_replicas", "num_prefill_replicas", "router_seed")))


def run_to_end(config: EngineConfig, fleet: FleetConfig, load: FleetLoad, loader: Loader) -> tuple[dict, bool]:
    """The fleet's aggregate metrics after every event (or FLEET_EVENTS), and whether every request finished."""
    run = FleetRun(config, fleet, load, loader)
    run.step(FLEET_EVENTS)
    metrics = run.metrics()
    return metrics["aggregate"], not run.live.has_unfinished_requests()


def row(aggregate: dict) -> dict[str, float | None]:
    return {m.heading: m.value(aggregate) for m in COLUMNS}


def compare(config: EngineConfig, a: FleetConfig, b: FleetConfig, load: FleetLoad, loader: Loader,
            progress: Callable[[int], None] = lambda done: None) -> list[dict]:
    """A and B on the same requests: one row each, with the knobs that tell them apart."""
    rows = []
    for name, fleet in (("A", a), ("B", b)):
        aggregate, finished = run_to_end(config, fleet, load, loader)
        rows.append({"fleet": name, "router": fleet.router, "replicas": fleet.num_replicas,
                     "prefill replicas": fleet.num_prefill_replicas, **row(aggregate), "finished": finished})
        progress(len(rows))
    return rows


def parse_values(knob: str, text: str, fleet: FleetConfig) -> list:
    """A sweep's comma-separated values, each checked with every other knob as it is; ValueError names it."""
    if knob not in SWEEP_KNOBS:
        raise ValueError(f"a fleet sweep can vary {', '.join(SWEEP_KNOBS)}; not {knob!r}")
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not 1 <= len(items) <= MAX_VALUES:
        raise ValueError(f"give 1 to {MAX_VALUES} values of {knob}, separated by commas; got {len(items)}")
    values = []
    for item in items:
        try:
            value = parse(item, float) if knob == RATE else parse(item, FLEET_KNOB[knob].type)
            if knob == RATE:
                if not 0 < value <= 100:
                    raise ValueError("a rate is a number of requests/s in (0, 100]")
            else:
                dataclasses.replace(fleet, **{knob: value})
        except ValueError as exc:
            raise ValueError(f"{knob} = {item!r} cannot be run: {exc}") from None
        if value not in values:
            values.append(value)
    return values


def sweep(config: EngineConfig, fleet: FleetConfig, load: FleetLoad, knob: str, values: list, loader: Loader,
          progress: Callable[[int], None] = lambda done: None) -> list[SweepPoint]:
    """One fleet per value, each run to the end on the same load (a rate sweep redraws it at each rate)."""
    points = []
    for value in values:
        if knob == RATE:
            aggregate, finished = run_to_end(config, fleet, dataclasses.replace(load, rate=value), loader)
        else:
            aggregate, finished = run_to_end(config, dataclasses.replace(fleet, **{knob: value}), load, loader)
        points.append(SweepPoint(value, {"aggregate": aggregate}, finished))
        progress(len(points))
    return points


def sweep_rows(knob: str, points: list[SweepPoint]) -> list[dict]:
    return [{knob: str(p.value), **row(p.metrics["aggregate"]), "finished": p.finished} for p in points]
