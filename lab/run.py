"""One browser session's run, and time travel over it.

A run is fully determined by its *script*: the engine config at step 0, the
workload submitted before step 0, and the changes the user made between steps
(live knob changes, requests added by hand), each filed under the step it
applied before. The engine is deterministic, so replaying the script rebuilds the
exact engine at any step. That is how time travel works:

* every StepRecord is kept, so looking at a past step costs nothing (``seek``);
* changing anything, or stepping, while looking at a past step *branches*: the
  records after it are dropped, an engine is rebuilt by replaying the script up
  to it, and the run continues from there.

``History`` is what the views read: the records and the step on screen. ``Run``
is a History with an engine behind it; a saved run (lab/recording.py) is one
without. Neither knows Streamlit, so lessons, the A/B page and the tests drive
them directly. The API, in full:

    run = Run(config, workload)          # a fresh engine at step 0 (ValueError on a bad config)
    run.records, run.cursor, run.record  # history, the step on screen (-1: none yet), its record
    run.step(n) / run.back() / run.seek(i)
    run.set_knobs(**knobs) -> bool       # live knobs apply from the next step; others restart (True)
    run.add_request(item)                # joins at the next step (or its own, later, arrival step)
    run.reset(config, workload)          # start again at step 0
    run.release()                        # drop the engine; the next use replays the script
    run.config_next(), run.items(), run.change_before(step), run.done, run.at_latest
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from engine import Engine, EngineConfig, LoadedModel, StepRecord, load_model
from engine.admission import never_fits
from engine.knobs import LIVE_KNOBS
from engine.records import Event
from engine.workload import WorkloadItem, submit
from lab.budgets import check_workload, engine_for, lab_model

Loader = Callable[[str, str, str], LoadedModel]


def default_config(**knobs) -> EngineConfig:
    """The lab's starting knobs. LAB_MODEL points the lab at another model folder (tests use a tiny one)."""
    return EngineConfig(model=lab_model(), **knobs)


@dataclass
class Change:
    """What the user did between two steps: live knobs set and requests added by hand."""

    knobs: dict[str, object] = field(default_factory=dict)
    requests: list[WorkloadItem] = field(default_factory=list)


class ReplayError(RuntimeError):
    """Replaying the script did not reproduce a stored step: the engine is not deterministic."""


class History:
    """A run's script and records, and the step on screen: everything the views read."""

    def __init__(self, config: EngineConfig, workload: list[WorkloadItem], records: list[StepRecord] = ()):
        self.config = config  # the knobs at step 0; later live changes live in self.changes
        self.workload = list(workload)
        self.changes: dict[int, Change] = {}  # step -> what was done just before that step ran
        self.records: list[StepRecord] = list(records)
        self.cursor = -1  # index of the record on screen; -1 before the first step

    @property
    def record(self) -> StepRecord | None:
        return self.records[self.cursor] if self.cursor >= 0 else None

    @property
    def next_step(self) -> int:
        """The step that Step would run from here."""
        return self.cursor + 1

    @property
    def at_latest(self) -> bool:
        return self.cursor == len(self.records) - 1

    def config_next(self) -> EngineConfig:
        """The knobs the next step from the cursor runs with: step 0's plus every change up to it."""
        knobs = {}
        for step in sorted(s for s in self.changes if s <= self.next_step):
            knobs.update(self.changes[step].knobs)
        return self.config.with_changes(**knobs)

    def change_before(self, step: int) -> Change | None:
        return self.changes.get(step)

    def items(self) -> list[WorkloadItem]:
        """The whole workload: the initial one, then requests added by hand (with the step they joined at)."""
        added = [item for step in sorted(self.changes) for item in self.changes[step].requests]
        return self.workload + added

    # ---- moving through history -------------------------------------------------------------

    @property
    def refused(self) -> list:
        """Requests refused before step 0 when nothing at all can run: a recording has none to report."""
        return []

    def prompt_tokens(self) -> dict[str, int]:
        """Each request's prompt length in tokens, as far as the records show it."""
        return {rid: view.num_prompt_tokens for record in self.records for rid, view in record.requests.items()}

    def seek(self, index: int) -> None:
        """Show a recorded step (-1: before the first). Looking changes nothing."""
        self.cursor = max(-1, min(index, len(self.records) - 1))

    def back(self) -> None:
        self.seek(self.cursor - 1)


class Run(History):
    """A History with a live engine: stepping runs it, changing it branches the history."""

    def __init__(self, config: EngineConfig, workload: list[WorkloadItem], load: Loader = load_model):
        super().__init__(config, workload)
        self._load = load
        self._engine: Engine | None = self._replay(0)

    @property
    def engine(self) -> Engine:
        """The live engine, after the last recorded step; rebuilt by replaying the script after release()."""
        if self._engine is None:
            self._engine = self._replay(len(self.records))
        return self._engine

    def release(self) -> None:
        """Let go of the engine and its KV pool (a closed tab's run, on a shared server). The records
        stay, so the run looks the same; the next step rebuilds the engine from the script."""
        self._engine = None

    @property
    def done(self) -> bool:
        """At the end of history with nothing left to serve (or nothing that could ever be served):
        stepping further would only idle, or refuse."""
        return self.at_latest and (not self.engine.has_unfinished_requests() or bool(self.refused))

    @property
    def refused(self) -> list[Event]:
        """Before step 0, when no request can ever run under these knobs: each one's refusal, with
        its reason (the engine refuses each as it arrives; said here, no step is wasted on it)."""
        if self.records:
            return []
        engine = self.engine
        why = {rid: never_fits(engine.config, engine.scheduler, engine.max_model_len, req)
               for rid, req in engine.requests.items()}
        if not why or not all(why.values()):
            return []
        return [Event("rejected", rid, reason, {"rule": "never_fits"}) for rid, reason in why.items()]

    def prompt_tokens(self) -> dict[str, int]:
        """Each submitted request's prompt length in tokens, before it has even arrived."""
        return {rid: req.num_prompt_tokens for rid, req in self.engine.requests.items()}

    def step(self, n: int = 1) -> list[StepRecord]:
        """Run up to n engine steps from the cursor (branching if it is in the past); stops early when done."""
        self._branch()
        new = []
        try:
            while len(new) < n and self.engine.has_unfinished_requests():
                new.append(self.engine.step())
        except BaseException:
            # A step that fails part-way may leave requests scheduled and pages taken with no
            # record of it: drop that engine, so the next use replays the records into a fresh one.
            self._engine = None
            raise
        finally:  # the steps that did complete are kept either way
            self.records += new
            self.cursor = len(self.records) - 1
        return new

    # ---- changing the run -------------------------------------------------------------------

    def set_knobs(self, **knobs) -> bool:
        """Apply knob changes from the next step. Live knobs join the script; any other knob restarts
        the run at step 0 with the same workload (returns True). A bad value raises ValueError and
        leaves the run as it was."""
        current = self.config_next()
        target = current.with_changes(**knobs)  # validates; a preset expands into its rules, filed one by one
        knobs = {k: getattr(target, k) for k in current.to_dict() if getattr(current, k) != getattr(target, k)}
        if not knobs:
            return False
        if not set(knobs) <= LIVE_KNOBS:
            self.reset(target, self.items())
            return True
        engine = self._engine_at_cursor()
        engine.update_config(**knobs)  # validates before changing anything
        self._commit_branch(engine)
        self.changes.setdefault(self.next_step, Change()).knobs.update(knobs)
        return False

    def follow(self, changes: dict[int, Change]) -> list[str]:
        """Step through a script of mid-run changes (a link's, a run file's), making each just before
        its step; returns notes on the ones that came after the run had ended (made at its end)."""
        notes = []
        for step, change in sorted(changes.items()):
            if step > self.next_step:
                self.step(step - self.next_step)
            if step != self.next_step:
                notes.append(f"the run had finished before step {step}, so the changes made there apply "
                             f"before step {self.next_step}")
            if change.knobs:
                self.set_knobs(**change.knobs)
            for item in change.requests:
                self.add_request(item)
        return notes

    def add_request(self, item: WorkloadItem) -> str:
        """Add one request before the next step; returns its id. A bad request raises ValueError."""
        item = dataclasses.replace(item, arrival_step=max(item.arrival_step, self.next_step))
        engine = self._engine_at_cursor()
        check_workload([*self.items(), item], engine.max_model_len)
        (request_id,) = submit(engine, [item])
        self._commit_branch(engine)
        self.changes.setdefault(self.next_step, Change()).requests.append(item)
        return request_id

    def reset(self, config: EngineConfig | None = None, workload: list[WorkloadItem] | None = None) -> None:
        """Start again at step 0 (the new engine is built first, so a bad config changes nothing)."""
        fresh = Run(config or self.config, self.workload if workload is None else workload, self._load)
        self.__dict__.update(fresh.__dict__)

    # ---- replay -----------------------------------------------------------------------------

    def _replay(self, num_steps: int) -> Engine:
        """A fresh engine after num_steps steps of the script, with the changes due before the next
        step applied. Checks the last replayed step against the stored record."""
        loaded = self._load(self.config.model, self.config.device, self.config.dtype)
        engine = engine_for(dataclasses.replace(self.config), loaded)  # a copy: live changes mutate it
        check_workload(self.items(), engine.max_model_len)
        submit(engine, self.workload)
        for step in range(num_steps + 1):
            change = self.changes.get(step)
            if change:
                if change.knobs:
                    engine.update_config(**change.knobs)
                submit(engine, change.requests)
            if step == num_steps:
                break
            record = engine.step()
            if step == num_steps - 1 and record.without_timings() != self.records[step].without_timings():
                raise ReplayError(f"replaying the run did not reproduce step {step}")
        return engine

    def _engine_at_cursor(self) -> Engine:
        """The engine as it stands after the step on screen: the live one, or a replay of the past."""
        return self.engine if self.at_latest else self._replay(self.next_step)

    def _commit_branch(self, engine: Engine) -> None:
        """Make engine the live one, forgetting the recorded future past the cursor."""
        if engine is self._engine:
            return
        del self.records[self.next_step:]
        self.changes = {s: c for s, c in self.changes.items() if s <= self.next_step}
        self._engine = engine

    def _branch(self) -> None:
        self._commit_branch(self._engine_at_cursor())
