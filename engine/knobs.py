"""The knob table: every engine knob, one row each, and every fact about it in that row.

``EngineConfig`` is built from this table, and everything that shows, reads or
checks a knob reads it here: the engine's validation, the CLI's flags and help,
the sidebar's widgets, the link's parameters, the Sweep and A/B pages, and the
tests that draw random configs. Adding a knob is one row here plus the code that
uses it.

The names mirror vLLM's, so what a student learns here transfers to a real
deployment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = str(Path(__file__).parent / "default_model")

# What a change to a knob of each group does to a running lab (ui/widgets/knobs.py titles them).
GROUPS = ("scheduler", "slo", "pricing", "kv", "model")
LIVE_GROUPS = ("scheduler", "slo", "router")  # read afresh every step (a fleet's router: every arrival),
# so a running engine or fleet can take a new value; the fleet's rows are "router" or "fleet"


@dataclass(frozen=True)
class Knob:
    """One knob: its type and default, what it teaches, which values it takes, and where it may go."""

    name: str
    type: type  # bool, int, float or str
    default: object
    help: str  # one line, for --help and the sidebar's tooltip
    group: str  # one of GROUPS (a fleet knob: 'router' or 'fleet', engine/fleet/config.py)
    optional: bool = False  # None is a value too ('none' in a link or on the command line)
    choices: tuple[str, ...] = ()  # the words a str knob takes; empty: free text
    low: float | None = None  # the range every reader checks: the engine, the link, the widget
    high: float | None = None
    open_low: bool = False  # low itself is not allowed (a target of 0 ms makes no sense)
    open_high: bool = False
    noun: str = ""  # what a number is, in messages: 'a fraction', 'a number of ms' (default by type)
    step: float = 1  # a widget's step
    sweep: str = ""  # the values a sweep suggests, comma-separated; empty: a sweep cannot vary it
    link: bool = True  # may a link set it? (not the model or device: they name parts of the serving machine)
    ab: bool = False  # offered on the A/B page

    @property
    def live(self) -> bool:
        return self.group in LIVE_GROUPS

    @property
    def annotation(self) -> object:
        return self.type | None if self.optional else self.type

    def allowed(self) -> str:
        """What the knob accepts, as messages say it: 'an integer in [1, 1000000]'."""
        if self.choices:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.type is bool:
            text = "True or False"
        elif self.type in (int, float):
            noun = self.noun or ("an integer" if self.type is int else "a number")
            low, high = (_number(v) for v in (self.low, self.high))
            text = (f"{noun} >= {low}" if self.high is None else
                    f"{noun} in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}")
        else:
            text = "text"
        return text + (", or None" if self.optional else "")

    def accepts(self, value: object) -> bool:
        if value is None:
            return self.optional
        if self.choices:
            return value in self.choices
        if self.type is bool:
            return isinstance(value, bool)
        if self.type is str:
            return isinstance(value, str) and value.strip() != ""
        number = isinstance(value, int) if self.type is int else isinstance(value, int | float) and math.isfinite(value)
        return number and not isinstance(value, bool) and self._in_range(value)

    def _in_range(self, value: float) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        below = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return above and below

    def check(self, value: object) -> None:
        if not self.accepts(value):
            raise ValueError(f"{self.name} must be {self.allowed()}; got {value!r}")


def _number(value: float | None) -> str:
    """1000000, 0.5: as a person writes a bound (not 1e+06, not 1.0)."""
    return str(int(value)) if value is not None and float(value).is_integer() else str(value)


def _int(name: str, default: int, low: int, high: int | None, help: str, group: str, **more) -> Knob:
    return Knob(name, int, default, help, group, low=low, high=high, **more)


def _choice(name: str, choices: tuple[str, ...], help: str, group: str, **more) -> Knob:
    return Knob(name, str, choices[0], help, group, choices=choices, **more)


def _flag(name: str, default: bool, help: str, group: str, **more) -> Knob:
    return Knob(name, bool, default, help, group, **more)


# Engine presets live in engine/presets.py; the knob's words are their names, listed there too.
ENGINE_PRESETS = ("vllm_v1", "vllm_v0", "sglang", "trtllm_no_evict", "trtllm_max_util")

KNOBS: tuple[Knob, ...] = (  # in the order the CLI's help, the link and the config's dict list them
    Knob("model", str, DEFAULT_MODEL, "local model folder (or cached hub id) of a decoder-only causal LM", "model",
         link=False),
    _choice("device", ("auto", "cpu", "cuda"), "'auto', 'cpu' or 'cuda'", "model", link=False),
    _choice("dtype", ("float32", "float16", "bfloat16"), "'float32', 'float16' or 'bfloat16'", "model"),
    _int("seed", 0, 0, 2**31 - 1, "seed for sampling requests that set no seed of their own", "model"),
    Knob("max_model_len", int, None, "longest prompt plus output a request may have (default: the model's limit)",
         "model", optional=True, low=2, high=1_000_000, step=64),
    _int("block_size", 16, 1, 256, "tokens per KV page", "kv", sweep="4, 8, 16, 32"),
    _int("num_gpu_blocks", 64, 1, 1_000_000, "pages in the KV pool: the memory the scheduler must fit every "
         "running request into", "kv", step=4, sweep="16, 24, 32, 48, 64", ab=True),
    _int("num_cpu_blocks", 64, 0, 1_000_000, "pages of host memory that swap preemption copies KV pages into", "kv",
         step=4, sweep="0, 16, 64"),
    _int("max_num_batched_tokens", 256, 1, 1_000_000, "token budget: most tokens (prefill + decode) in one forward "
         "pass", "scheduler", step=16, sweep="16, 32, 64, 128, 256", ab=True),
    _int("max_num_seqs", 16, 1, 100_000, "sequence cap: most requests in the running batch", "scheduler",
         sweep="1, 2, 4, 8, 16", ab=True),
    _flag("enable_chunked_prefill", True, "split long prompts across steps to fit the token budget", "scheduler",
          sweep="false, true", ab=True),
    _int("long_prefill_token_threshold", 0, 0, 1_000_000, "with chunked prefill, the largest chunk one request may "
         "take per step (0: no cap)", "scheduler", step=8, sweep="0, 8, 16, 32"),
    _choice("step_order", ("decode_first", "prefill_first"), "'decode_first' (vLLM v1: decodes and prefill chunks "
            "share a step) or 'prefill_first' (vLLM v0 without chunked prefill, SGLang: prefill-only steps whenever "
            "new prompts fit)", "scheduler", sweep="decode_first, prefill_first", ab=True),
    _choice("scheduling_policy", ("fcfs", "priority"), "'fcfs' (arrival order) or 'priority' (lower priority value "
            "served first)", "scheduler", sweep="fcfs, priority"),
    _choice("preemption_mode", ("recompute", "swap"), "what a preempted request loses: 'recompute' (drop its KV, "
            "recompute later) or 'swap' (copy its KV pages to CPU memory)", "scheduler", sweep="recompute, swap",
            ab=True),
    _choice("victim_rule", ("policy", "fewest_generated"), "who is preempted: 'policy' (follows scheduling_policy, "
            "as vLLM) or 'fewest_generated' (SGLang's retraction order)", "scheduler",
            sweep="policy, fewest_generated"),
    Knob("watermark", float, 0.0, "fraction of the pool kept free when admitting, so running requests can grow",
         "scheduler", low=0.0, high=0.99, noun="a fraction", step=0.01, sweep="0, 0.05, 0.1, 0.2"),
    _flag("preempt_on_admission", False, "under the priority policy, a waiting request may evict lower-priority "
          "running ones (vLLM v0; v1 only lets it jump the queue)", "scheduler"),
    _choice("admission_reserve", ("prompt", "output_estimate", "max_tokens"), "what must fit to admit: 'prompt' "
            "(its whole sequence, vLLM), 'output_estimate' (plus a share of remaining output, SGLang) or "
            "'max_tokens' (all at full length, TensorRT-LLM GUARANTEED_NO_EVICT)", "scheduler"),
    Knob("max_num_queued_reqs", int, None, "queue limit: a request arriving when this many are already in "
         "flight (waiting or running) is refused at once, as vLLM's server answers 503 (none: no limit)",
         "scheduler", optional=True, low=1, high=1_000_000, noun="a number of requests",
         sweep="none, 8, 16, 32"),
    Knob("max_num_queued_tokens", int, None, "queue limit: a request arriving when the prompts of requests "
         "still before their first token already hold this many tokens is refused at once, as vLLM's server "
         "answers 503 (none: no limit)", "scheduler", optional=True, low=1, high=100_000_000,
         noun="a number of tokens", step=64, sweep="none, 256, 512, 1024"),
    _flag("slo_admission", False, "the lab's SLO admission rule: refuse an arriving request whose estimated "
          "TTFT (the prompt tokens queued ahead of it and its own, at the deployment's modeled prefill rate) "
          "misses slo_ttft_ms; needs slo_ttft_ms and a deployment", "scheduler", ab=True),
    _choice("speculative_method", ("none", "ngram"), "speculative decoding: 'none', or 'ngram' (vLLM's prompt "
            "lookup: draft the tokens that followed the last matching n-gram of the request's own text, verify "
            "them in the next forward pass)", "model", sweep="none, ngram", ab=True),
    _int("num_speculative_tokens", 3, 1, 16, "with speculative decoding, the most draft tokens a request may "
         "verify in one step (vLLM's num_speculative_tokens)", "model", sweep="1, 2, 3, 5"),
    _int("prompt_lookup_min", 2, 1, 16, "with ngram speculation, the shortest n-gram that may match "
         "(vLLM's prompt_lookup_min; its default is 5)", "model"),
    _int("prompt_lookup_max", 3, 1, 16, "with ngram speculation, the longest n-gram it looks for first "
         "(vLLM's prompt_lookup_max; its default is 5)", "model"),
    _flag("async_scheduling", False, "plan step n+1 while step n runs (vLLM's AsyncScheduler, on by default in "
          "vLLM 0.32): the host's work hides behind the GPU's, but a step's tokens, stops and freed pages reach "
          "the scheduler one step later", "model", sweep="false, true", ab=True),
    _choice("engine_preset", ENGINE_PRESETS, "a named engine's rules set together: " + ", ".join(ENGINE_PRESETS)
            + " (knobs given beside it override it)", "scheduler", ab=True),
    _flag("enable_prefix_caching", False, "let requests share KV pages of equal prompt prefixes", "kv",
          sweep="false, true", ab=True),
    _choice("kv_allocation", ("paged", "contiguous"), "'paged' (a page at a time, anywhere) or 'contiguous' (one "
            "run sized for the longest possible output, reserved at admission)", "kv", sweep="paged, contiguous",
            ab=True),
    Knob("deployment", str, None, "price every step as it would run on a deployment, model@[N x]gpu[+link] (e.g. "
         "llama-3.1-8b@h100-sxm, llama-3.1-70b@4xh100-sxm+pcie-gen4, this@l4 for the engine's own model): the clock "
         "becomes modeled ms; none: this machine's wall time", "pricing", optional=True,
         sweep="llama-3.1-8b@h100-sxm, llama-3.1-8b@a100-80gb, llama-3.1-8b@l4", ab=True),
    Knob("slo_ttft_ms", float, None, "SLO: time to first token each request should meet, in ms (none: no target); "
         "judged, never scheduled by", "slo", optional=True, low=0.0, high=1e6, open_low=True,
         noun="a number of ms", step=50.0),
    Knob("slo_tpot_ms", float, None, "SLO: time per output token after the first, in ms (none: no target)", "slo",
         optional=True, low=0.0, high=1e5, open_low=True, noun="a number of ms", step=5.0),
    Knob("slo_percentile", float, 90.0, "the run meets its SLO when this percentage of finished requests meet every "
         "target (90: a p90 SLO)", "slo", low=1.0, high=100.0, noun="a percentage"),
)
KNOB = {knob.name: knob for knob in KNOBS}
LIVE_KNOBS = frozenset(k.name for k in KNOBS if k.live)
LINK_KNOBS = tuple(k.name for k in KNOBS if k.link)
# A sweep offers the live rules first: they are what a student tunes on a running server.
SWEEP_KNOBS = {k.name: k.sweep for k in sorted(KNOBS, key=lambda k: not k.live) if k.sweep}
AB_KNOBS = tuple(k.name for k in KNOBS if k.ab)
