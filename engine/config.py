"""Every knob of the engine, validated in one place.

The names mirror vLLM's so that what a student learns here transfers to a real
deployment. A bad value raises ``ValueError`` naming the knob and what it accepts,
so the lab can show that message and keep the previous run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from engine.hardware import Deployment

DEFAULT_MODEL = str(Path(__file__).parent / "default_model")

STEP_ORDERS = ("decode_first", "prefill_first")
SCHEDULING_POLICIES = ("fcfs", "priority")
PREEMPTION_MODES = ("recompute", "swap")
VICTIM_RULES = ("policy", "fewest_generated")
ADMISSION_RESERVES = ("prompt", "output_estimate", "max_tokens")
KV_ALLOCATIONS = ("paged", "contiguous")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "float16", "bfloat16")
# Knobs the scheduler reads afresh every step, so a running engine can take a new value.
# The rest shape the model, the KV pool or the allocator, and need a fresh engine.
LIVE_KNOBS = frozenset({"max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill",
                        "long_prefill_token_threshold", "step_order", "scheduling_policy", "preemption_mode",
                        "victim_rule", "watermark", "preempt_on_admission", "admission_reserve", "engine_preset",
                        "slo_ttft_ms", "slo_tpot_ms", "slo_percentile"})
SLO_KNOBS = ("slo_ttft_ms", "slo_tpot_ms", "slo_percentile")  # judged by, never scheduled by

# The rules each engine follows; engine_preset sets them together, and any knob given beside it
# overrides its preset's value. What each preset approximates is in the README ("Engine presets").
PRESET_RULES: dict[str, dict[str, object]] = {
    # vllm/v1/core/sched/scheduler.py (vLLM 0.32): one token budget, running requests first, chunked
    # prefill on, recompute preemption, a waiting request never evicts a running one.
    "vllm_v1": dict(step_order="decode_first", enable_chunked_prefill=True, preemption_mode="recompute",
                    victim_rule="policy", watermark=0.0, preempt_on_admission=False, admission_reserve="prompt"),
    # vllm/core/scheduler.py (v0 without chunked prefill): prefill-only steps, a 1% watermark, swap
    # (v0 swapped multi-sequence groups; one-sequence requests recomputed unless preemption_mode said
    # swap), and under priority a waiting request preempts lower-priority running ones.
    "vllm_v0": dict(step_order="prefill_first", enable_chunked_prefill=False, preemption_mode="swap",
                    victim_rule="policy", watermark=0.01, preempt_on_admission=True, admission_reserve="prompt"),
    # sglang/srt/managers/scheduler.py + schedule_policy.py: prefill batches first (chunked), admission
    # charges running requests new_token_ratio x their remaining output, retraction of the fewest-generated.
    "sglang": dict(step_order="prefill_first", enable_chunked_prefill=True, preemption_mode="recompute",
                   victim_rule="fewest_generated", watermark=0.0, preempt_on_admission=False,
                   admission_reserve="output_estimate"),
    # TensorRT-LLM capacity scheduler, GUARANTEED_NO_EVICT (its default): admit only what can run to
    # max_tokens beside every running request's own max_tokens, so nothing is ever evicted.
    "trtllm_no_evict": dict(step_order="decode_first", enable_chunked_prefill=False, preemption_mode="recompute",
                            victim_rule="policy", watermark=0.0, preempt_on_admission=False,
                            admission_reserve="max_tokens"),
    # TensorRT-LLM MAX_UTILIZATION: admit on today's need and pause (evict, recompute later) the newest
    # request when the KV cache runs out.
    "trtllm_max_util": dict(step_order="decode_first", enable_chunked_prefill=False, preemption_mode="recompute",
                            victim_rule="policy", watermark=0.0, preempt_on_admission=False,
                            admission_reserve="prompt"),
}
ENGINE_PRESETS = tuple(PRESET_RULES)
# Where each preset's rules come from, in the engines' own sources.
PRESET_SOURCES = {
    "vllm_v1": "vLLM 0.32: vllm/v1/core/sched/scheduler.py, vllm/v1/core/kv_cache_manager.py, block_pool.py",
    "vllm_v0": "vLLM v0: vllm/core/scheduler.py, vllm/core/block_manager.py",
    "sglang": "SGLang: sglang/srt/managers/scheduler.py, schedule_policy.py (PrefillAdder), schedule_batch.py",
    "trtllm_no_evict": "TensorRT-LLM: CapacitySchedulerPolicy.GUARANTEED_NO_EVICT (batch_manager capacity scheduler)",
    "trtllm_max_util": "TensorRT-LLM: CapacitySchedulerPolicy.MAX_UTILIZATION (batch_manager capacity scheduler)",
}
# The knobs that take one of a few words, and the words: the engine checks them, the lab lists them.
KNOB_CHOICES: dict[str, tuple[str, ...]] = {
    "device": DEVICES, "dtype": DTYPES, "step_order": STEP_ORDERS, "scheduling_policy": SCHEDULING_POLICIES,
    "preemption_mode": PREEMPTION_MODES, "victim_rule": VICTIM_RULES, "admission_reserve": ADMISSION_RESERVES,
    "engine_preset": ENGINE_PRESETS, "kv_allocation": KV_ALLOCATIONS}


def _check(ok: bool, knob: str, allowed: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{knob} must be {allowed}; got {value!r}")


def _check_int(knob: str, value: object, low: int, high: int | None = None) -> None:
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    is_int = isinstance(value, int) and not isinstance(value, bool)
    _check(is_int and value >= low and (high is None or value <= high), knob, allowed, value)


def _check_choice(knob: str, value: object, choices: tuple[str, ...]) -> None:
    _check(value in choices, knob, "one of " + ", ".join(repr(c) for c in choices), value)


@dataclass
class SamplingParams:
    """How one request picks its tokens. temperature 0 means greedy."""

    max_tokens: int = 32
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        _check_int("max_tokens", self.max_tokens, 1)
        _check(isinstance(self.temperature, (int, float)) and 0 <= self.temperature <= 5,
               "temperature", "a number in [0, 5]", self.temperature)
        _check(isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1, "top_p", "in (0, 1]", self.top_p)
        if self.seed is not None:
            _check_int("seed", self.seed, 0)
        _check(all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids),
               "stop_token_ids", "a list of token ids", self.stop_token_ids)


@dataclass
class EngineConfig:
    """The scheduler's and KV cache's knobs; see each field's comment for what it teaches."""

    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "float32"
    seed: int = 0
    # Longest prompt plus output a request may have; None takes the model's limit.
    max_model_len: int | None = None

    # The KV budget: the pool holds num_gpu_blocks pages of block_size tokens each.
    block_size: int = 16
    num_gpu_blocks: int = 64
    # Host-memory pool that swap preemption copies pages into.
    num_cpu_blocks: int = 64

    # Per-step limits: tokens in one forward pass and requests in the running batch.
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 16

    enable_chunked_prefill: bool = True
    # With chunking on, caps one request's chunk so a long prompt cannot take the whole budget (0: no cap).
    long_prefill_token_threshold: int = 0

    step_order: str = "decode_first"
    scheduling_policy: str = "fcfs"
    preemption_mode: str = "recompute"
    # 'policy' follows scheduling_policy (vLLM v1); 'fewest_generated' is SGLang's retraction order.
    victim_rule: str = "policy"
    # Fraction of the pool kept free when admitting waiting requests, so running ones can grow.
    watermark: float = 0.0
    # Under the priority policy, may a waiting request evict lower-priority running ones (vLLM v0)?
    preempt_on_admission: bool = False
    # What must fit before a waiting request is admitted: 'prompt' (its whole current sequence, vLLM),
    # 'output_estimate' (plus a share of everyone's remaining output, SGLang) or 'max_tokens' (everyone
    # at full length, TensorRT-LLM's GUARANTEED_NO_EVICT).
    admission_reserve: str = "prompt"
    engine_preset: str = "vllm_v1"
    enable_prefix_caching: bool = False
    kv_allocation: str = "paged"
    # None: the clock is this machine's wall time. Else a deployment every step is priced on
    # (engine/hardware.py), e.g. "llama-3.1-8b@h100-sxm"; "this@h100-sxm" prices the engine's own model.
    deployment: str | Deployment | None = None
    # Service-level objectives: the engine never schedules by them, the metrics judge each request by
    # them (engine.metrics.Slo), so they are live and travel with the config (links, CLI, lessons).
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    slo_percentile: float = 90.0

    def __post_init__(self) -> None:
        if isinstance(self.deployment, Deployment):  # kept by name, so configs stay plain data (links, files)
            self.deployment = self.deployment.name
        self.validate()

    def validate(self) -> None:
        _check(isinstance(self.model, str) and self.model.strip() != "", "model", "a local folder or hub id",
               self.model)
        for knob, choices in KNOB_CHOICES.items():
            _check_choice(knob, getattr(self, knob), choices)
        _check_int("seed", self.seed, 0)
        if self.max_model_len is not None:
            _check_int("max_model_len", self.max_model_len, 2)
        _check_int("block_size", self.block_size, 1, 256)
        _check_int("num_gpu_blocks", self.num_gpu_blocks, 1, 1_000_000)
        _check_int("num_cpu_blocks", self.num_cpu_blocks, 0, 1_000_000)
        _check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1, 1_000_000)
        _check_int("max_num_seqs", self.max_num_seqs, 1, 100_000)
        _check(isinstance(self.enable_chunked_prefill, bool), "enable_chunked_prefill", "True or False",
               self.enable_chunked_prefill)
        _check_int("long_prefill_token_threshold", self.long_prefill_token_threshold, 0)
        _check(isinstance(self.watermark, (int, float)) and 0 <= self.watermark < 1, "watermark",
               "a fraction in [0, 1)", self.watermark)
        _check(isinstance(self.preempt_on_admission, bool), "preempt_on_admission", "True or False",
               self.preempt_on_admission)
        _check(isinstance(self.enable_prefix_caching, bool), "enable_prefix_caching", "True or False",
               self.enable_prefix_caching)
        for knob in ("slo_ttft_ms", "slo_tpot_ms"):
            value = getattr(self, knob)
            _check(value is None or (isinstance(value, int | float) and not isinstance(value, bool)
                                     and math.isfinite(value) and value > 0), knob, "a positive number of ms, or None",
                   value)
        _check(isinstance(self.slo_percentile, int | float) and not isinstance(self.slo_percentile, bool)
               and 0 < self.slo_percentile <= 100, "slo_percentile", "a percentage in (0, 100]", self.slo_percentile)
        if self.deployment is not None:
            _check(isinstance(self.deployment, str), "deployment", "a name like llama-3.1-8b@h100-sxm, or None",
                   self.deployment)
            try:
                Deployment.parse(self.deployment, self.model)
            except (ValueError, OSError, KeyError) as exc:  # OSError, KeyError: "this@" on an unreadable config
                raise ValueError(f"deployment {self.deployment!r} cannot be priced: {exc}") from None
        if self.enable_prefix_caching and self.kv_allocation == "contiguous":
            raise ValueError("enable_prefix_caching needs kv_allocation='paged': a contiguous reservation "
                             "cannot share another request's blocks")

    @property
    def watermark_blocks(self) -> int:
        """Rounded down, as both vLLM versions do: a 1% watermark keeps no page free in a pool under 100."""
        return math.floor(self.watermark * self.num_gpu_blocks)

    @classmethod
    def for_preset(cls, engine_preset: str = "vllm_v1", **knobs) -> EngineConfig:
        """The config of one engine's rules, with any knob given overriding its preset's value."""
        return cls().with_changes(engine_preset=engine_preset, **knobs)

    def with_changes(self, **changes) -> EngineConfig:
        """This config with changes applied; a new engine_preset brings its rules (other changes win)."""
        if "engine_preset" in changes:
            preset = changes["engine_preset"]
            _check_choice("engine_preset", preset, ENGINE_PRESETS)
            changes = {**PRESET_RULES[preset], **changes}
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EngineConfig:
        """Build from a dict (a lesson file, a URL), rejecting unknown knobs by name."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown knob(s): {', '.join(unknown)}; known knobs: {', '.join(sorted(known))}")
        return cls.for_preset(**data) if "engine_preset" in data else cls(**data)


# One line per knob, shared by the CLI's --help and the lab's tooltips.
KNOB_HELP = {
    "model": "local model folder (or cached hub id) of a decoder-only causal LM",
    "device": "'auto', 'cpu' or 'cuda'",
    "dtype": "'float32', 'float16' or 'bfloat16'",
    "seed": "seed for sampling requests that set no seed of their own",
    "max_model_len": "longest prompt plus output a request may have (default: the model's limit)",
    "block_size": "tokens per KV page",
    "num_gpu_blocks": "pages in the KV pool: the memory the scheduler must fit every running request into",
    "num_cpu_blocks": "pages of host memory that swap preemption copies KV pages into",
    "max_num_batched_tokens": "token budget: most tokens (prefill + decode) in one forward pass",
    "max_num_seqs": "sequence cap: most requests in the running batch",
    "enable_chunked_prefill": "split long prompts across steps to fit the token budget",
    "long_prefill_token_threshold": "with chunked prefill, the largest chunk one request may take per step (0: no cap)",
    "step_order": "'decode_first' (vLLM v1: decodes and prefill chunks share a step) or 'prefill_first' "
                  "(vLLM v0 without chunked prefill, SGLang: prefill-only steps whenever new prompts fit)",
    "scheduling_policy": "'fcfs' (arrival order) or 'priority' (lower priority value served first)",
    "preemption_mode": "what a preempted request loses: 'recompute' (drop its KV, recompute later) or 'swap' "
                       "(copy its KV pages to CPU memory)",
    "victim_rule": "who is preempted: 'policy' (follows scheduling_policy, as vLLM) or 'fewest_generated' "
                   "(SGLang's retraction order)",
    "watermark": "fraction of the pool kept free when admitting, so running requests can grow",
    "preempt_on_admission": "under the priority policy, a waiting request may evict lower-priority running ones "
                            "(vLLM v0; v1 only lets it jump the queue)",
    "admission_reserve": "what must fit to admit: 'prompt' (its whole sequence, vLLM), 'output_estimate' (plus a "
                         "share of remaining output, SGLang) or 'max_tokens' (all at full length, TensorRT-LLM "
                         "GUARANTEED_NO_EVICT)",
    "engine_preset": "a named engine's rules set together: " + ", ".join(PRESET_RULES) + " (knobs given beside it "
                     "override it)",
    "enable_prefix_caching": "let requests share KV pages of equal prompt prefixes",
    "deployment": "price every step as it would run on a deployment, model@[N x]gpu[+link] (e.g. "
                  "llama-3.1-8b@h100-sxm, llama-3.1-70b@4xh100-sxm+pcie-gen4, this@l4 for the engine's own model): "
                  "the clock becomes modeled ms; none: this machine's wall time",
    "slo_ttft_ms": "SLO: time to first token each request should meet, in ms (none: no target); judged, never "
                   "scheduled by",
    "slo_tpot_ms": "SLO: time per output token after the first, in ms (none: no target)",
    "slo_percentile": "the run meets its SLO when this percentage of finished requests meet every target "
                      "(90: a p90 SLO)",
    "kv_allocation": "'paged' (a page at a time, anywhere) or 'contiguous' (one run sized for the longest "
                     "possible output, reserved at admission)",
}
