"""Turn a run's StepRecords into files a user can keep, share or open elsewhere.

Everything here reads only the records (plus the config and workload that made
them), never a live engine, so a run loaded back from a file exports the same
way as one just computed. Four formats, one job each:

* JSONL: the run itself, to load back and replay step by step.
* Chrome trace: one track per request in Perfetto or chrome://tracing.
* CSV: per-request latency metrics, for a spreadsheet.
* HTML: the charts, as one standalone page.
"""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine import EngineConfig, StepRecord
from engine.metrics import COUNTER_KEYS, aggregate_metrics, request_metrics
from engine.records import ScheduledChunk
from engine.request import FinishReason
from engine.workload import WorkloadItem

if TYPE_CHECKING:
    import plotly.graph_objects as go

RUN_FORMAT = "scheduler-loop-lab/run"
RUN_FORMAT_VERSION = 1


# ---- the run as JSONL ---------------------------------------------------------------------------


@dataclass
class SavedRun:
    """What a run file holds: enough to replay every step, and to rerun it live."""

    config: EngineConfig
    workload: list[WorkloadItem]
    seed: int | None
    records: list[StepRecord]


def dump_run(run: SavedRun) -> str:
    """A header line (format, version, config, workload, seed), then one record per line.

    One record per line keeps a long run streamable and lets an error message point
    at the step that is broken."""
    header = {"format": RUN_FORMAT, "version": RUN_FORMAT_VERSION, "config": run.config.to_dict(),
              "workload": [asdict(item) for item in run.workload], "seed": run.seed}
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
    return {"config": config, "workload": items, "seed": seed}


def _json_object(n: int, line: str, what: str) -> dict:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {n}: {what} is not valid JSON ({exc.msg} at column {exc.colno})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"line {n}: {what} must be a JSON object, found {type(data).__name__}")
    return data


# ---- metrics from records -----------------------------------------------------------------------


def step_clock(records: list[StepRecord]) -> list[tuple[float, float]]:
    """Each step's (start, end) on the engine clock in ms: the running sum of step wall times.

    Summed in the engine's own order, so the values equal the engine's clock_ms exactly."""
    spans, clock = [], 0.0
    for rec in records:
        start = clock
        clock += rec.timings.total_ms
        spans.append((start, clock))
    return spans


@dataclass
class _Timeline:
    """The attributes engine.metrics.request_metrics reads from a Request, rebuilt from the
    records, so the latency formulas live once, in the engine, for live runs and replays alike."""

    request_id: str
    arrival_step: int
    num_prompt_tokens: int
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None
    arrival_ms: float | None = None
    first_scheduled_step: int | None = None
    finish_step: int | None = None
    finish_ms: float | None = None

    def __post_init__(self) -> None:
        self.output_token_ids: list[int] = []
        self.token_steps: list[int] = []
        self.token_ms: list[float] = []


def _timelines(records: list[StepRecord]) -> list[_Timeline]:
    for i, rec in enumerate(records):
        if rec.step != i:
            raise ValueError(f"metrics need the whole run from step 0; record {i} is step {rec.step}")
    clock = step_clock(records)
    seen: dict[str, _Timeline] = {}
    for rec, (start, end) in zip(records, clock, strict=True):
        for rid, view in rec.requests.items():
            t = seen.setdefault(rid, _Timeline(rid, view.arrival_step, view.num_prompt_tokens))
            t.num_preemptions = view.num_preemptions
            t.finish_reason = FinishReason(view.finish_reason) if view.finish_reason else None
        for e in rec.events:
            if e.kind == "arrived":
                seen[e.request_id].arrival_ms = start
            elif e.kind in ("finished", "rejected"):
                seen[e.request_id].finish_step = rec.step
                seen[e.request_id].finish_ms = end if e.kind == "finished" else start
        for chunk in rec.batch:
            t = seen[chunk.request_id]
            if t.first_scheduled_step is None:
                t.first_scheduled_step = rec.step
            if chunk.new_token_id is not None:
                t.output_token_ids.append(chunk.new_token_id)
                t.token_steps.append(rec.step)
                t.token_ms.append(end)
    return sorted(seen.values(), key=lambda t: _add_order(t.request_id))


def _add_order(request_id: str) -> tuple[int, str]:
    """The engine numbers its ids r0, r1, ... in add_request order: list requests as it does."""
    number = request_id[1:]
    return (int(number), "") if request_id[:1] == "r" and number.isdigit() else (1 << 62, request_id)


def run_metrics(records: list[StepRecord]) -> dict:
    """engine.metrics() computed from the records alone, so a replayed run has metrics too.

    Same keys and values as the engine's (a request that had not arrived by the last
    record is absent), plus what only the step history shows: peak KV usage and
    throughput per step. kv_cache_usage_perc is the records' rounded value."""
    per_request = [request_metrics(t) for t in _timelines(records)]  # duck-typed: a _Timeline reads as a Request
    clock_ms = step_clock(records)[-1][1] if records else 0.0

    def final(name: str) -> float:  # a gauge or counter after the last step (all 0 before the first)
        return getattr(records[-1].stats, name) if records else 0

    counters = {k: final(k) for k in COUNTER_KEYS}
    gauges = {k: final(k) for k in ("num_requests_finished", "num_requests_running", "num_requests_waiting",
                                    "num_requests_swapped", "kv_cache_usage_perc")}
    aggregate = aggregate_metrics(per_request, len(records), clock_ms, gauges, counters)
    aggregate["throughput_tokens_per_step"] = aggregate["generation_tokens"] / len(records) if records else 0.0
    aggregate["peak_kv_cache_usage_perc"] = max((r.stats.kv_cache_usage_perc for r in records), default=0.0)
    return {"aggregate": aggregate, "requests": per_request}


# ---- per-request metrics as CSV -----------------------------------------------------------------

CSV_COLUMNS = ("request_id", "finish_reason", "num_prompt_tokens", "num_generation_tokens", "num_preemptions",
               "queue_time_steps", "ttft_steps", "ttft_ms", "itl_steps_mean", "itl_steps_max", "itl_ms_mean",
               "itl_ms_max", "e2e_steps", "e2e_ms")


def metrics_csv(metrics: dict) -> str:
    """One row per request from run_metrics() (or engine.metrics()). A request has one ITL per
    generated token after the first, so a row gives their mean and max; a blank cell means
    the value does not exist yet (no token, not finished)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for m in metrics["requests"]:
        row = dict(m)
        for key in ("itl_steps", "itl_ms"):
            gaps = m.get(key) or []
            row[f"{key}_mean"] = float(np.mean(gaps)) if gaps else None
            row[f"{key}_max"] = max(gaps) if gaps else None
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in CSV_COLUMNS})
    return out.getvalue()


# ---- Chrome trace -------------------------------------------------------------------------------

# With no wall times in the records (all zero), each step is drawn as this many µs, so the
# timeline's "1 ms" reads as "1 step".
STEP_US = 1000.0
# Phases that run over several steps are drawn as one slice; each prefill chunk keeps its own.
_MERGED = ("waiting", "stalled", "decode", "preempted", "swapped")
_PID = 1


def _phase(rid: str, rec: StepRecord, chunks: dict[str, ScheduledChunk], was_preempted: set[str]) \
        -> tuple[str, dict] | None:
    """What the request was doing during this step, with the args shown when the slice is clicked."""
    chunk = chunks.get(rid)
    if chunk is not None:
        name = {"prefill": "prefill", "prefill_chunk": "prefill chunk", "decode": "decode",
                "recompute_prefill": "recompute"}[chunk.kind]
        return name, {"tokens": f"{chunk.start}-{chunk.start + chunk.num_tokens - 1}"}
    if rid in rec.swapped:
        return "swapped", {}
    if rid in rec.waiting:
        return ("preempted" if rid in was_preempted else "waiting"), {}
    if rid in rec.running:
        return "stalled", {}  # running, but this step gave it no tokens
    return None


def chrome_trace(records: list[StepRecord], config: EngineConfig | None = None, clock: str = "auto") -> dict:
    """The run in Trace Event Format (open the JSON in ui.perfetto.dev or chrome://tracing).

    One track (tid) per request with a complete ('X') slice per phase: waiting, prefill
    (each chunk its own slice), decode, recompute, preempted (waiting to be recomputed),
    swapped, stalled (running but given no tokens); an instant ('i') per preemption and
    rejection; counters ('C') for KV pages and the batch; a 'steps' track with one slice per step.

    clock: 'ms' places each step at its engine time (the cumulative step wall times, as
    the ms metrics use); 'steps' gives every step STEP_US µs; 'auto' uses ms when the
    records carry wall times."""
    if clock not in ("auto", "ms", "steps"):
        raise ValueError(f"clock must be 'auto', 'ms' or 'steps'; got {clock!r}")
    use_ms = clock == "ms" or (clock == "auto" and any(r.timings.total_ms > 0 for r in records))
    spans = ([(a * 1000, b * 1000) for a, b in step_clock(records)] if use_ms
             else [(r.step * STEP_US, (r.step + 1) * STEP_US) for r in records])

    tids: dict[str, int] = {}
    events: list[dict] = []
    open_slices: dict[str, dict] = {}  # request id -> its current slice, still growing
    was_preempted: set[str] = set()
    for rec, (start, end) in zip(records, spans, strict=True):
        events.append({"name": f"step {rec.step}", "cat": "step", "ph": "X", "ts": start, "dur": end - start,
                       "pid": _PID, "tid": 0, "args": {"tokens": rec.budget.tokens_used, "seqs": rec.budget.seqs_used,
                                                        "ms": rec.timings.total_ms}})
        events.append({"name": "KV pages", "ph": "C", "ts": start, "pid": _PID,
                       "args": {"used": rec.budget.gpu_blocks_used, "cached": rec.budget.gpu_blocks_cached}})
        events.append({"name": "batch", "ph": "C", "ts": start, "pid": _PID,
                       "args": {"seqs": rec.budget.seqs_used, "tokens": rec.budget.tokens_used}})
        for rid in rec.requests:
            tids.setdefault(rid, len(tids) + 1)
        for e in rec.events:
            if e.kind in ("preempted", "rejected"):
                events.append({"name": e.kind, "cat": "decision", "ph": "i", "s": "t", "ts": start, "pid": _PID,
                               "tid": tids[e.request_id], "args": {"reason": e.reason, **e.data}})
            if e.kind == "preempted":
                was_preempted.add(e.request_id)
        chunks = {c.request_id: c for c in rec.batch}
        was_preempted -= set(chunks)
        for rid in rec.requests:
            phase = _phase(rid, rec, chunks, was_preempted)
            current = open_slices.get(rid)
            if current and phase and phase[0] == current["name"] and phase[0] in _MERGED:
                current["dur"] = end - current["ts"]
                current["args"]["last_step"] = rec.step
                continue
            open_slices.pop(rid, None)
            if phase:
                name, args = phase
                open_slices[rid] = {"name": name, "cat": "phase", "ph": "X", "ts": start, "dur": end - start,
                                    "pid": _PID, "tid": tids[rid],
                                    "args": {"first_step": rec.step, "last_step": rec.step, **args}}
                events.append(open_slices[rid])

    meta = [{"name": "process_name", "ph": "M", "pid": _PID, "args": {"name": "Scheduler Loop Lab run"}},
            {"name": "thread_name", "ph": "M", "pid": _PID, "tid": 0, "args": {"name": "steps"}},
            {"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": 0, "args": {"sort_index": 0}}]
    for rid, tid in tids.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": rid}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": tid, "args": {"sort_index": tid}})
    other = {"clock": "engine ms" if use_ms else f"steps ({STEP_US:g} us each)"}
    if config is not None:
        other["config"] = config.to_dict()
    return {"traceEvents": meta + events, "displayTimeUnit": "ms", "otherData": other}


def chrome_trace_json(records: list[StepRecord], config: EngineConfig | None = None, clock: str = "auto") -> str:
    """chrome_trace as the text of a .json file."""
    return json.dumps(chrome_trace(records, config, clock))


# ---- charts as HTML -----------------------------------------------------------------------------


def figures_html(figures: list[go.Figure], title: str = "Scheduler Loop Lab") -> str:
    """One standalone HTML page with every figure. plotly.js is inlined once (with the first
    figure) so the page works offline, e.g. on a lecture-hall laptop."""
    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate(figures)]
    body = "\n".join(f"<div class='figure'>{p}</div>" for p in parts)
    safe_title = html.escape(title)
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{safe_title}</title></head>\n"
            f"<body><h1>{safe_title}</h1>\n{body}\n</body></html>\n")
