"""A scenario: everything a link restores, and the run it stands for.

A scenario holds the lesson, the knobs that differ from the defaults, the
workload (a preset, a generator, a load in time), hand-added requests, the
user's mid-run changes and the step on screen. The engine is deterministic, so
replaying that script rebuilds the run exactly. lab/link/params.py writes a
scenario as query parameters and reads it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine import EngineConfig
from engine.knobs import LINK_KNOBS
from engine.workload import WorkloadItem, WorkloadSource
from lab.budgets import LINK_STEPS, BudgetError
from lab.run import Change, History, Loader, Run

KNOB_PREFIX = "k."
LINK_LIST = WorkloadSource(name="workload from a link")  # what preset=none reads as: no requests of its own
POOL_KNOBS = ("num_gpu_blocks", "num_cpu_blocks")  # what sizes the KV pools, the part a server's budget caps


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
