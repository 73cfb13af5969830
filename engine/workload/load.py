"""Load as production meets it: a real trace, or requests drawn at a rate, arriving in time.

Both give WorkloadItems that arrive by time (arrival_ms, on a deployment's modeled clock)
with synthetic prompts of the given token counts (prompt_tokens: the lengths are real,
the token ids are not). Real prompts (median about 1,000 tokens) are longer than the
embedded model's 512 positions, so lengths are multiplied by length_scale and clipped to
fit; each item's length_scale tells the deployment model to price it at full size.

    TraceSpec("azure-conv", rate=4.0, duration_s=60)   # the trace's lengths, arrivals rescaled to 4 req/s
    RateSpec(rate=4.0, cv=2.0, duration_s=60)          # gamma arrivals (cv 1: Poisson), lognormal lengths
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.limits import MAX_PROMPT_TOKENS, MAX_REQUESTS
from engine.workload.item import WorkloadItem

TRACE_DIR = Path(__file__).parents[1] / "traces"
# Azure LLM inference trace 2023, Microsoft, CC-BY 4.0 (engine/traces/README.md).
TRACES = {"azure-conv": "conversation.csv", "azure-code": "code.csv"}
MAX_TOTAL_TOKENS = 480  # prompt plus output after scaling: fits the embedded model's 512 positions
DEFAULT_SCALE = 0.1


@functools.cache
def trace_rows(name: str) -> tuple[tuple[float, int, int], ...]:
    """(arrival s, prompt tokens, output tokens) of every request in a shipped trace."""
    if name not in TRACES:
        raise ValueError(f"unknown trace {name!r}; traces: {', '.join(TRACES)}")
    with (TRACE_DIR / TRACES[name]).open(encoding="utf-8", newline="") as f:
        return tuple((float(r["arrived_at"]), int(r["num_prefill_tokens"]), int(r["num_decode_tokens"]))
                     for r in csv.DictReader(f))


def _scaled(prompt: int, output: int, scale: float) -> tuple[int, int]:
    """Lengths times scale (at least 1 each), clipped so prompt plus output fits the model."""
    o = min(max(1, round(output * scale)), MAX_TOTAL_TOKENS // 2)
    return min(max(1, round(prompt * scale)), MAX_TOTAL_TOKENS - o), o


def _item(i: int, label: str, arrival_s: float, lengths: tuple[int, int], scale: float) -> WorkloadItem:
    prompt, output = lengths
    return WorkloadItem(f"{label} #{i}", max_tokens=output, prompt_tokens=prompt, ignore_eos=True,
                        arrival_ms=round(arrival_s * 1000, 3), length_scale=scale)


def _check(ok: bool, name: str, must: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{name} must be {must}; got {value!r}")


@dataclass(frozen=True)
class TraceSpec:
    """A window of a real trace: its own timing, or rescaled to a rate (requests/s)."""

    name: str = "azure-conv"
    rate: float | None = None  # None: the trace's own arrival times
    duration_s: float = 60.0
    start_s: float = 0.0  # where in the trace the window starts
    length_scale: float = DEFAULT_SCALE

    def __post_init__(self) -> None:
        _check(self.name in TRACES, "trace", f"one of {', '.join(TRACES)}", self.name)
        _check(self.rate is None or (isinstance(self.rate, int | float) and 0 < self.rate <= 1000), "rate",
               "a number of requests/s in (0, 1000]", self.rate)
        _check(isinstance(self.duration_s, int | float) and 0 < self.duration_s <= 3600, "duration_s",
               "a number of seconds in (0, 3600]", self.duration_s)
        _check(isinstance(self.start_s, int | float) and 0 <= self.start_s < 3600, "start_s",
               "a number of seconds in [0, 3600)", self.start_s)
        _check(isinstance(self.length_scale, int | float) and 0 < self.length_scale <= 1, "length_scale",
               "a fraction in (0, 1]", self.length_scale)

    def items(self) -> list[WorkloadItem]:
        """The window's requests. Rescaled to a rate, the next rate x duration_s requests are spread
        over the duration in their own rhythm (its bursts and lulls kept, its average set)."""
        rows = [r for r in trace_rows(self.name) if r[0] >= self.start_s]
        if self.rate is None:
            window = [(t - self.start_s, p, o) for t, p, o in rows if t - self.start_s < self.duration_s]
        else:
            count = max(1, min(round(self.rate * self.duration_s), len(rows), MAX_REQUESTS))
            taken = rows[:count + 1]  # one more: the gap after the last request belongs to the window too
            stretch = self.duration_s / max(taken[-1][0] - taken[0][0], 1e-9)
            window = [((t - taken[0][0]) * stretch, p, o) for t, p, o in taken[:count]]
        return [_item(i, self.name, at, _scaled(p, o, self.length_scale), self.length_scale)
                for i, (at, p, o) in enumerate(window[:MAX_REQUESTS])]

    @property
    def label(self) -> str:
        rate = "its own timing" if self.rate is None else f"{self.rate:g} req/s"
        return f"trace {self.name} ({rate}, {self.duration_s:g} s, lengths x{self.length_scale:g})"


@dataclass(frozen=True)
class LengthDist:
    """Token counts: fixed (a), uniform in [a, b], or lognormal with median a and log-spread b."""

    kind: str = "lognormal"
    a: float = 1000.0
    b: float = 0.8

    def __post_init__(self) -> None:
        _check(self.kind in ("fixed", "uniform", "lognormal"), "length kind", "fixed, uniform or lognormal",
               self.kind)
        _check(isinstance(self.a, int | float) and 1 <= self.a <= MAX_PROMPT_TOKENS, "length a",
               f"a number of tokens in [1, {MAX_PROMPT_TOKENS}]", self.a)
        if self.kind == "uniform":
            _check(isinstance(self.b, int | float) and self.a <= self.b <= MAX_PROMPT_TOKENS, "length b",
                   f"a number in [a, {MAX_PROMPT_TOKENS}]", self.b)
        if self.kind == "lognormal":
            _check(isinstance(self.b, int | float) and 0 <= self.b <= 3, "length spread", "in [0, 3]", self.b)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.a)
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, n)
        return rng.lognormal(math.log(self.a), self.b, n)


@dataclass(frozen=True)
class RateSpec:
    """Requests drawn at a rate: gamma inter-arrival gaps with mean 1/rate and coefficient of
    variation cv (1: a Poisson process; above 1: bursts), over a duration; seeded."""

    rate: float = 4.0
    cv: float = 1.0
    duration_s: float = 60.0
    prompt: LengthDist = field(default_factory=LengthDist)
    output: LengthDist = field(default_factory=lambda: LengthDist("lognormal", 130.0, 0.9))
    length_scale: float = DEFAULT_SCALE
    seed: int = 0

    def __post_init__(self) -> None:
        _check(isinstance(self.rate, int | float) and 0 < self.rate <= 1000, "rate",
               "a number of requests/s in (0, 1000]", self.rate)
        _check(isinstance(self.cv, int | float) and 0.05 <= self.cv <= 10, "cv", "a number in [0.05, 10]", self.cv)
        _check(isinstance(self.duration_s, int | float) and 0 < self.duration_s <= 3600, "duration_s",
               "a number of seconds in (0, 3600]", self.duration_s)
        _check(isinstance(self.length_scale, int | float) and 0 < self.length_scale <= 1, "length_scale",
               "a fraction in (0, 1]", self.length_scale)
        _check(isinstance(self.seed, int) and self.seed >= 0, "seed", "an integer >= 0", self.seed)

    def arrivals_s(self) -> np.ndarray:
        """Arrival times in seconds, within the duration."""
        rng = np.random.default_rng(self.seed)
        shape = 1 / self.cv ** 2  # a gamma's cv is 1/sqrt(shape); its mean is shape * scale
        expected = int(self.rate * self.duration_s * 1.5 + 20)
        times = np.cumsum(rng.gamma(shape, 1 / (self.rate * shape), expected))
        return times[times < self.duration_s][:MAX_REQUESTS]

    def items(self) -> list[WorkloadItem]:
        arrivals = self.arrivals_s()
        rng = np.random.default_rng([self.seed, 1])
        prompts, outputs = self.prompt.draw(rng, len(arrivals)), self.output.draw(rng, len(arrivals))
        return [_item(i, "rate", float(t), _scaled(int(round(p)), int(round(o)), self.length_scale), self.length_scale)
                for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs, strict=True))]

    @property
    def label(self) -> str:
        return (f"{self.rate:g} req/s (cv {self.cv:g}, {self.duration_s:g} s, lengths x{self.length_scale:g}, "
                f"seed {self.seed})")
