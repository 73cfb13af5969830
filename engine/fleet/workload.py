"""What a fleet serves: requests as token ids arriving in time, from real traces or a generator.

- ``mooncake-conv`` and ``mooncake-synth``: the Mooncake FAST'25 traces (Moonshot AI, Apache-2.0;
  engine/traces/README.md). Each request lists the hash ids of its prompt's 512-token
  blocks; here each id becomes a fixed block of ``block_tokens`` token ids (the same id
  always the same tokens), so requests that share ids share real KV pages, and a
  prefix-aware router has something real to find. Lengths shrink by block_tokens / 512 to
  fit the embedded model; the deployment prices them at full size.
- ``azure-conv`` and ``azure-code``: the Azure trace, through engine/workload/load.py (no
  shared prefixes: its prompts are synthetic and distinct).
- ``rate_requests``: requests drawn at a rate (no shared prefixes);
- ``shared_prefix_requests``: sessions that share a few system prompts, drawn at a rate.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.config import SamplingParams
from engine.limits import MAX_ARRIVAL_MS, MAX_REQUESTS
from engine.values import parse_json
from engine.workload.item import is_number
from engine.workload.load import MAX_TOTAL_TOKENS, RateSpec, TraceSpec
from engine.workload.source import synthetic_prompt

TRACE_DIR = Path(__file__).parents[1] / "traces"
MOONCAKE = {"mooncake-conv": "mooncake_conversation.jsonl", "mooncake-synth": "mooncake_synthetic.jsonl"}
MOONCAKE_BLOCK = 512  # tokens per hash block in the published traces
FLEET_TRACES = (*MOONCAKE, "azure-conv", "azure-code")
MAX_TRACE_ROWS = 100_000  # a trace file's requests: the published ones hold 12,031 and 3,993


@dataclass(frozen=True)
class FleetRequest:
    """One request for a fleet: its prompt as token ids, its output length, and when it arrives."""

    label: str
    token_ids: tuple[int, ...]
    max_tokens: int
    arrival_ms: float
    length_scale: float = 1.0

    def submit(self, fleet) -> str:
        return fleet.add_request(list(self.token_ids), SamplingParams(max_tokens=self.max_tokens, ignore_eos=True),
                                 arrival_ms=self.arrival_ms, length_scale=self.length_scale)


Row = tuple[float, int, int, tuple[int, ...]]  # (timestamp ms, input length, output length, hash ids)


@functools.cache
def mooncake_rows(name: str) -> tuple[Row, ...]:
    """Every request of a shipped Mooncake trace."""
    if name not in MOONCAKE:
        raise ValueError(f"unknown trace {name!r}; Mooncake traces: {', '.join(MOONCAKE)}")
    return read_mooncake((TRACE_DIR / MOONCAKE[name]).read_text(encoding="utf-8"))


def _is_count(v: object, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= 10**9


def _problem(r: object) -> str | None:
    """What is wrong with one trace line's object, or None."""
    if not isinstance(r, dict):
        return "must be a JSON object"
    ts = r.get("timestamp")
    if not (is_number(ts) and 0 <= ts <= MAX_ARRIVAL_MS):
        return f"timestamp must be a number of ms in [0, {MAX_ARRIVAL_MS}]"
    for field in ("input_length", "output_length"):
        if not _is_count(r.get(field), 1):
            return f"{field} must be an integer >= 1"
    hashes = r.get("hash_ids")
    if not (isinstance(hashes, list) and hashes and all(_is_count(h, 0) for h in hashes)):
        return "hash_ids must be a non-empty list of integers >= 0"
    return None


def read_mooncake(text: str) -> tuple[Row, ...]:
    """A Mooncake-format trace (one JSON object a line: timestamp, input_length, output_length,
    hash_ids), checked line by line; ValueError names the line and the field."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            r = parse_json(line)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
        problem = _problem(r)
        if problem:
            raise ValueError(f"line {number}: {problem}")
        rows.append((float(r["timestamp"]), r["input_length"], r["output_length"], tuple(r["hash_ids"])))
        if len(rows) > MAX_TRACE_ROWS:
            raise ValueError(f"more than {MAX_TRACE_ROWS:,} requests: cut the trace first")
    if not rows:
        raise ValueError("no requests in it")
    return tuple(rows)


def hash_block(hash_id: int, block_tokens: int, vocab_size: int) -> list[int]:
    """The token ids that stand for one hash block: seeded by the id, never id 0 (end of text)."""
    return np.random.default_rng([hash_id, block_tokens]).integers(1, vocab_size, size=block_tokens).tolist()


def mooncake_requests(name: str, vocab_size: int, duration_s: float = 60.0, start_s: float = 0.0,
                      rate: float | None = None, block_tokens: int = 16,
                      rows: tuple[Row, ...] | None = None) -> list[FleetRequest]:
    """A window of a Mooncake trace (a shipped one by name, or `rows` read from a file and labelled
    `name`), its own timing or rescaled to `rate` requests/s. Each prompt is its hash blocks' tokens,
    cut to its scaled length and to what fits the model beside its output."""
    if not (isinstance(block_tokens, int) and 1 <= block_tokens <= MOONCAKE_BLOCK):
        raise ValueError(f"block_tokens must be an integer in [1, {MOONCAKE_BLOCK}]; got {block_tokens!r}")
    TraceSpec(rate=rate, duration_s=duration_s, start_s=start_s)  # the same ranges as the Azure trace's
    scale = block_tokens / MOONCAKE_BLOCK
    rows = [(ts / 1000 - start_s, *rest) for ts, *rest in (rows or mooncake_rows(name)) if ts / 1000 >= start_s]
    if rate is None:
        window = [r for r in rows if r[0] < duration_s]
    else:  # as TraceSpec rescales: the next rate x duration_s requests, in their own rhythm, over the duration
        count = max(1, min(round(rate * duration_s), len(rows), MAX_REQUESTS))
        taken = rows[:count + 1]
        stretch = duration_s / max(taken[-1][0] - taken[0][0], 1e-9)
        window = [((at - taken[0][0]) * stretch, *rest) for at, *rest in taken[:count]]
    out = []
    for i, (at, isl, osl, hashes) in enumerate(window[:MAX_REQUESTS]):
        output = min(max(1, round(osl * scale)), MAX_TOTAL_TOKENS // 2)
        prompt = [t for h in hashes for t in hash_block(h, block_tokens, vocab_size)]
        prompt = prompt[:min(max(1, round(isl * scale)), MAX_TOTAL_TOKENS - output)]
        out.append(FleetRequest(f"{name} #{i}", tuple(prompt), output, round(at * 1000, 3), scale))
    return out


def azure_requests(name: str, vocab_size: int, duration_s: float = 60.0, rate: float | None = None,
                   length_scale: float = 0.1) -> list[FleetRequest]:
    """A window of the Azure trace, as engine/workload/load.py shapes it, with synthetic prompts."""
    return _synthetic(TraceSpec(name, rate=rate, duration_s=duration_s, length_scale=length_scale).items(), vocab_size)


def rate_requests(vocab_size: int, rate: float = 4.0, duration_s: float = 60.0, cv: float = 1.0, seed: int = 0,
                  length_scale: float = 0.1) -> list[FleetRequest]:
    """Requests drawn at a rate, as engine/workload/load.py draws them (gamma gaps, lognormal lengths),
    each with its own synthetic prompt: no prefix to share."""
    items = RateSpec(rate=rate, cv=cv, duration_s=duration_s, seed=seed, length_scale=length_scale).items()
    return _synthetic(items, vocab_size)


def _synthetic(items: list, vocab_size: int) -> list[FleetRequest]:
    """Load-in-time WorkloadItems as fleet requests, each prompt the synthetic token ids submit() would build."""
    return [FleetRequest(it.prompt, tuple(synthetic_prompt(it.prompt, it.prompt_tokens, vocab_size)), it.max_tokens,
                         it.arrival_ms, it.length_scale) for it in items]


def shared_prefix_requests(vocab_size: int, rate: float = 4.0, duration_s: float = 60.0, num_prefixes: int = 4,
                           prefix_tokens: int = 128, seed: int = 0, length_scale: float = 0.1) -> list[FleetRequest]:
    """Sessions that share system prompts: each request is one of `num_prefixes` system prompts
    (`prefix_tokens` long) and its own question, at Poisson arrivals; lengths as the rate
    generator draws them (engine/workload/load.py), the question's in the room left."""
    if not (isinstance(num_prefixes, int) and 1 <= num_prefixes <= 1000):
        raise ValueError(f"num_prefixes must be an integer in [1, 1000]; got {num_prefixes!r}")
    if not (isinstance(prefix_tokens, int) and 1 <= prefix_tokens <= MAX_TOTAL_TOKENS // 2):
        raise ValueError(f"prefix_tokens must be an integer in [1, {MAX_TOTAL_TOKENS // 2}]; got {prefix_tokens!r}")
    items = RateSpec(rate=rate, duration_s=duration_s, seed=seed, length_scale=length_scale).items()
    rng = np.random.default_rng(seed)
    prefixes = [synthetic_prompt(f"system prompt {k}", prefix_tokens, vocab_size) for k in range(num_prefixes)]
    out = []
    for it in items:
        question = synthetic_prompt(it.prompt, max(1, min(it.prompt_tokens, MAX_TOTAL_TOKENS - prefix_tokens
                                                              - it.max_tokens)), vocab_size)
        out.append(FleetRequest(it.prompt, tuple(prefixes[int(rng.integers(num_prefixes))] + question),
                                it.max_tokens, it.arrival_ms, it.length_scale))
    return out
