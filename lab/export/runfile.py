"""The run as a JSONL file: a header (format, version, config, workload, seed, changes), then one
record a line.

A file holds the records themselves, so it replays without the model (lab/recording.py),
and the whole script (the config at step 0, the workload, and the knobs set and requests added
before later steps), so Continue live can rebuild the run on the engine. Files written before
'changes' was added still open: they had none.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from engine import EngineConfig, StepRecord
from engine.knobs import LIVE_KNOBS
from engine.records import CHUNK_KINDS, EVENT_KINDS
from engine.request import RequestStatus
from engine.values import parse_json
from engine.workload import WorkloadItem
from lab.run import Change

RUN_FORMAT = "scheduler-loop-lab/run"
RUN_FORMAT_VERSION = 1
STATUSES = tuple(s.value for s in RequestStatus)


@dataclass
class SavedRun:
    """What a run file holds: enough to replay every step, and to rerun it live."""

    config: EngineConfig
    workload: list[WorkloadItem]
    seed: int | None
    records: list[StepRecord]
    changes: dict[int, Change] = field(default_factory=dict)  # step -> what was done just before it


def dump_run(run: SavedRun) -> str:
    """A header line (format, version, config, workload, seed), then one record per line.

    One record per line keeps a long run streamable and lets an error message point
    at the step that is broken."""
    header = {"format": RUN_FORMAT, "version": RUN_FORMAT_VERSION, "config": run.config.to_dict(),
              "workload": [asdict(item) for item in run.workload], "seed": run.seed,
              "changes": {str(step): {"knobs": c.knobs, "requests": [asdict(i) for i in c.requests]}
                          for step, c in sorted(run.changes.items())}}
    lines = [json.dumps(header)] + [json.dumps(r.to_dict()) for r in run.records]
    return "\n".join(lines) + "\n"


def load_run(text: str) -> SavedRun:
    """Parse what dump_run wrote. A bad file raises ValueError naming the line and the problem."""
    # Split on "\n" only, as the workload reader does: str.splitlines() would also split
    # inside a string holding a raw U+2028 (legal in JSON).
    lines = [(n, line) for n, line in enumerate(text.removeprefix("\ufeff").split("\n"), 1) if line.strip()]
    if not lines:
        raise ValueError("the run file is empty")
    header = _header(*lines[0])
    records = []
    for n, line in lines[1:]:
        data = _json_object(n, line, "a step record")
        try:
            record = StepRecord.from_dict(data)
        except (ValueError, TypeError, AttributeError) as exc:  # from_dict walks whatever JSON it is given
            raise ValueError(f"line {n}: not a valid step record: {exc}") from exc
        if record.step != len(records):
            raise ValueError(f"line {n}: expected step {len(records)}, found step {record.step!r} "
                             "(a run file holds every step from 0, in order)")
        problem = _inconsistent(record, header["config"])
        if problem:
            raise ValueError(f"line {n}: step {record.step} {problem}")
        records.append(record)
    return SavedRun(records=records, **header)


def _header(n: int, line: str) -> dict:
    data = _json_object(n, line, "the header")
    if data.get("format") != RUN_FORMAT:
        raise ValueError(f"line {n}: not a Scheduler Loop Lab run file (the header's 'format' should be "
                         f"{RUN_FORMAT!r}, found {data.get('format')!r})")
    if data.get("version") != RUN_FORMAT_VERSION:
        raise ValueError(f"line {n}: this run file has format version {data.get('version')!r}, and this lab "
                         f"reads version {RUN_FORMAT_VERSION}; export it again with this version of the lab")
    if not isinstance(data.get("config"), dict):
        raise ValueError(f"line {n}: the header's 'config' must be an object of engine knobs")
    try:
        config = EngineConfig.from_dict(data["config"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"line {n}: bad engine config in the header: {exc}") from exc
    workload = data.get("workload")
    if not isinstance(workload, list):
        raise ValueError(f"line {n}: the header's 'workload' must be a list of requests")
    items = []
    for i, item in enumerate(workload):
        try:
            items.append(WorkloadItem(**item))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"line {n}: workload request {i}: {exc}") from exc
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"line {n}: the header's 'seed' must be an integer or null; found {seed!r}")
    return {"config": config, "workload": items, "seed": seed, "changes": _changes(n, data.get("changes", {}))}


def _inconsistent(record: StepRecord, config: EngineConfig) -> str | None:
    """What in a well-typed record no engine could have written under the header's config (every
    view trusts these: a batch names known requests, kinds are the engine's own, the pool is the
    config's), or None."""
    known = record.requests
    ids = [c.request_id for c in record.batch] + record.waiting + record.running + record.swapped + record.finished \
        + [e.request_id for e in record.events if e.request_id is not None]
    checks = (
        (next((i for i in ids if i not in known), None), "names request {!r}, which its requests do not list"),
        (next((c.kind for c in record.batch if c.kind not in CHUNK_KINDS), None), "has a chunk of unknown kind {!r}"),
        (next((e.kind for e in record.events if e.kind not in EVENT_KINDS), None), "has an event of unknown kind {!r}"),
        (next((v.status for v in known.values() if v.status not in STATUSES), None), "has a request status {!r}"),
        (next((rid for rid, v in known.items() if rid != v.request_id), None), "files request {!r} under another id"),
        (next((b.block_id for b in record.blocks if not 0 <= b.block_id < _pool(config, b.device)
               or b.state not in ("used", "cached")), None), "has page {!r} outside the config's pools"),
        (record.budget.num_gpu_blocks if record.budget.num_gpu_blocks != config.num_gpu_blocks else None,
         "has a pool of {!r} pages, not the header's num_gpu_blocks"),
        (record.modeled.deployment if record.modeled and record.modeled.deployment != config.deployment else None,
         "is priced on {!r}, not on the header's deployment"),
    )
    return next((what.format(found) for found, what in checks if found is not None), None)


def _pool(config: EngineConfig, device: str) -> int:
    return {"gpu": config.num_gpu_blocks, "cpu": config.num_cpu_blocks}.get(device, 0)


def _changes(n: int, data: object) -> dict[int, Change]:
    """The header's mid-run changes: {"<step>": {"knobs": {...}, "requests": [...]}}."""
    if not isinstance(data, dict):
        raise ValueError(f"line {n}: the header's 'changes' must be an object of step -> change")
    changes = {}
    for step, change in data.items():
        where = f"line {n}: the change before step {step!r}"
        if not (isinstance(step, str) and re.fullmatch(r"[0-9]{1,9}", step)) or not isinstance(change, dict):
            raise ValueError(f"{where}: a step number mapping to {{knobs, requests}} is expected")
        knobs, requests = change.get("knobs", {}), change.get("requests", [])
        if not isinstance(knobs, dict) or not isinstance(requests, list):
            raise ValueError(f"{where}: 'knobs' must be an object and 'requests' a list")
        if set(knobs) - LIVE_KNOBS:
            raise ValueError(f"{where}: {', '.join(map(repr, sorted(set(knobs) - LIVE_KNOBS)))} is not a knob that can "
                             "change mid-run")
        try:
            items = [WorkloadItem(**item) for item in requests]
            EngineConfig().with_changes(**knobs)  # names a bad value
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from exc
        changes[int(step)] = Change(dict(knobs), items)
    return changes


def _json_object(n: int, line: str, what: str) -> dict:
    try:
        data = parse_json(line)
    except ValueError as exc:
        raise ValueError(f"line {n}: {what} is {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"line {n}: {what} must be a JSON object, found {type(data).__name__}")
    return data


def saved_run(run) -> SavedRun:
    """A run (lab.run.History) as a file holds it: its script and its records."""
    return SavedRun(run.config, list(run.workload), run.config.seed, list(run.records), dict(run.changes))
