"""What one scheduler step did, as plain JSON-serialisable dataclasses.

The lab draws only from these records, so everything a chart shows must be here:
the batch that ran, the budgets it used, the queues after the step, the block map
and every decision with the rule behind it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field

# Event kinds, in the order a request usually meets them.
EVENT_KINDS = ("arrived", "rejected", "kv_received", "admitted", "chunk_scheduled", "blocked", "preempted",
               "swapped_out", "swapped_in", "recompute_started", "evicted", "finished", "idle")
# What kind of work a request contributed to the forward pass.
CHUNK_KINDS = ("prefill", "prefill_chunk", "decode", "recompute_prefill")
# What a request is doing in one step: the kind of work it got, or why it got none. "preempted":
# sent back to wait for a recompute, until it runs again; "stalled": running, but given no tokens;
# "finished": rejected, or gone (a request that finishes in a step also did work in it).
PHASES = (*CHUNK_KINDS, "waiting", "stalled", "preempted", "swapped", "finished")


@dataclass(slots=True)
class ScheduledChunk:
    """One request's share of this step's forward pass: tokens [start, start + num_tokens)."""

    request_id: str
    kind: str
    start: int
    num_tokens: int
    new_token_id: int | None = None  # the last token it sampled this step
    new_token_text: str | None = None  # the text of every token it sampled this step
    # Speculative decoding: the draft tokens among its num_tokens (-1: a placeholder slot), how many of them
    # the model accepted, and every token it appended (the accepted drafts, then the model's own).
    draft_token_ids: list[int] = field(default_factory=list)
    num_accepted: int = 0
    new_token_ids: list[int] = field(default_factory=list)
    # Async scheduling: planned before the step that stopped its request was handed back, so it ran anyway
    # and what it sampled was thrown away.
    discarded: bool = False


@dataclass(slots=True)
class Event:
    """One scheduling decision, with the rule that made it in plain words."""

    kind: str
    request_id: str | None
    reason: str
    data: dict = field(default_factory=dict)


@dataclass(slots=True)
class Budget:
    """How much of each per-step limit the step used, and the KV pool after it."""

    tokens_used: int
    token_budget: int
    decode_tokens: int
    prefill_tokens: int
    seqs_used: int
    seq_cap: int
    gpu_blocks_used: int  # held by requests: the one 'pages in use' every view shows
    gpu_blocks_cached: int  # free but still holding a prefix-cached page, reusable until taken
    gpu_blocks_free: int  # free and empty
    num_gpu_blocks: int
    cpu_blocks_used: int
    num_cpu_blocks: int
    draft_tokens: int = 0  # speculative decoding: draft tokens verified in the step (not in decode or prefill)


@dataclass(slots=True)
class BlockState:
    """One KV page. Free pages are left out of the map; anything absent is free."""

    block_id: int
    device: str  # 'gpu' or 'cpu'
    state: str  # 'used' (owned by a request) or 'cached' (free but still holding a hashed prefix)
    owners: list[str]
    ref_count: int
    prefix_hash: str | None
    first_position: int
    num_tokens: int
    text: str


@dataclass(slots=True)
class RequestView:
    """A request's state after the step, enough to draw its card."""

    request_id: str
    status: str
    priority: int
    arrival_step: int
    num_prompt_tokens: int
    num_output_tokens: int
    num_computed_tokens: int
    max_tokens: int
    num_preemptions: int
    num_blocks: int
    finish_reason: str | None
    output_text: str
    arrival_ms: float | None = None  # an arrival by time, on the modeled clock (None: it arrived by step)
    length_scale: float = 1.0  # its token counts are this fraction of the real request's (engine/pricing.py)
    queued_step: int | None = None  # when it last joined a queue: its arrival, or the step that preempted it
    queued_ms: float | None = None  # the same on the modeled clock (None: unpriced, or it arrived by step)


@dataclass(slots=True)
class StepStats:
    """Gauges and counters after the step; names follow vLLM's metrics where one exists."""

    num_requests_running: int
    num_requests_waiting: int
    num_requests_swapped: int
    num_requests_finished: int
    kv_cache_usage_perc: float
    num_batched_tokens: int
    num_preemptions: int
    num_recomputed_tokens: int
    num_swapped_blocks: int
    # New requests' lookups; a preempted request finding its own pages again is counted apart, as vLLM does.
    prefix_cache_queries: int
    prefix_cache_hits: int
    preempted_prefix_cache_queries: int = 0
    preempted_prefix_cache_hits: int = 0
    num_draft_tokens: int = 0  # speculative decoding: drafts verified so far, and those the model accepted
    num_accepted_tokens: int = 0
    num_discarded_tokens: int = 0  # async scheduling: tokens computed for a request already stopped


@dataclass(slots=True)
class ModeledCost:
    """The step priced on a deployment (engine/hardware.py): modeled, not measured, and the same on
    every run, so records compare with it. Absent when the lab's clock is this machine's wall time."""

    deployment: str  # e.g. "llama-3.1-8b@h100-sxm"
    total_ms: float
    parts: dict[str, float]  # linear, attention, elementwise, communication, overhead, swap
    bound: str  # "memory" or "compute"
    flops: float
    bytes: float
    mfu: float
    mbu: float
    swap_ms: float
    clock_ms: float  # the modeled clock at the step's end
    graph: str = "eager"  # the CUDA graph its first real step replays: "full", "piecewise" or "eager"
    tokens: int = 0  # the tokens that first real step computes
    padded_tokens: int = 0  # its token rows, padded up to the graph's captured size


@dataclass(slots=True)
class StepTimings:
    """Wall times; they differ from run to run, so equality checks leave them out."""

    schedule_ms: float = 0.0
    forward_ms: float = 0.0
    swap_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.schedule_ms + self.forward_ms + self.swap_ms


@dataclass(slots=True)
class StepRecord:
    step: int
    batch: list[ScheduledChunk]
    budget: Budget
    waiting: list[str]
    running: list[str]
    swapped: list[str]
    finished: list[str]
    requests: dict[str, RequestView]
    blocks: list[BlockState]
    events: list[Event]
    stats: StepStats
    timings: StepTimings = field(default_factory=StepTimings)
    modeled: ModeledCost | None = None

    def phases(self) -> dict[str, str]:
        """Each request the step shows, by id, and its phase in this step (PHASES). The one definition
        the timeline and the trace both read: a request in the batch is its chunk's kind; otherwise it
        finished, is swapped out, waits (as "preempted" if it ever was) or runs but got no tokens
        ("stalled"). Built in one pass, so a view reads every request's phase for the cost of one."""
        out = {rid: "stalled" for rid in self.running}
        out.update((rid, "preempted" if self.requests[rid].num_preemptions else "waiting") for rid in self.waiting)
        out.update((rid, "swapped") for rid in self.swapped)
        out.update((rid, "finished") for rid in self.finished)
        out.update((c.request_id, c.kind) for c in self.batch)
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> StepRecord:
        return _build(cls, data)

    def without_timings(self) -> dict:
        """The record minus wall times: what must be identical across reruns."""
        data = self.to_dict()
        data.pop("timings")
        return data


class Unchanged:
    """Hands back the previous step's object wherever one equals it (a page, a card, a queue), so a
    run's records cost memory in proportion to what changed per step, not to the pool and the
    queues. Records are read, never edited, so sharing an object between steps is safe."""

    def __init__(self) -> None:
        self._last: dict[typing.Hashable, typing.Any] = {}

    def __call__(self, values: dict[typing.Hashable, typing.Any]) -> dict[typing.Hashable, typing.Any]:
        last = self._last
        self._last = {key: last[key] if last.get(key) == value else value for key, value in values.items()}
        return self._last


def _build(tp: typing.Any, value: typing.Any, where: str = "") -> typing.Any:
    """Rebuild a (nested) dataclass from its asdict() form, guided by the type hints, checking
    every value's type on the way (a file's "abc" where a count belongs would break a view later).
    ValueError names the field's path, e.g. "budget.tokens_used"."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        _expect(isinstance(value, dict), where or tp.__name__, "an object", value)
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        missing = [n for n in names if n not in value and not _has_default(tp, n)]
        if missing:
            raise ValueError(f"{tp.__name__} is missing field(s): {', '.join(sorted(missing))}")
        return tp(**{k: _build(hints[k], v, f"{where}.{k}" if where else k) for k, v in value.items() if k in names})
    if origin is list:
        _expect(isinstance(value, list), where, "a list", value)
        (item,) = typing.get_args(tp)
        return [_build(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        _expect(isinstance(value, dict), where, "an object", value)
        if tp is dict:
            return value
        _, item = typing.get_args(tp)
        return {k: _build(item, v, f"{where}.{k}") for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _build(inner[0], value, where)
    return _scalar(tp, value, where)


# A JSON scalar's type -> (accepts it?, what it must be).
_SCALARS = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "text"),
}


def _scalar(tp: typing.Any, value: typing.Any, where: str) -> typing.Any:
    if tp in _SCALARS:
        ok, what = _SCALARS[tp]
        _expect(ok(value), where, what, value)
    return float(value) if tp is float else value


def _expect(ok: bool, where: str, what: str, value: typing.Any) -> None:
    if not ok:
        shown = repr(value)
        raise ValueError(f"{where} must be {what}, found {shown if len(shown) <= 40 else shown[:37] + '...'}")


def _has_default(tp: type, name: str) -> bool:
    f = next(f for f in dataclasses.fields(tp) if f.name == name)
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
