"""The engine's config, built from the knob table, and a request's sampling parameters.

``EngineConfig`` has one field per row of ``engine.knobs.KNOBS``, with the row's
type and default, and checks every value against its row. A bad value raises
``ValueError`` naming the knob and what it accepts, so the lab can show that
message and keep the previous run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field

from engine.hardware import Deployment
from engine.knobs import DEFAULT_MODEL, KNOB, KNOBS, Knob
from engine.presets import PRESET_RULES

__all__ = ["DEFAULT_MODEL", "EngineConfig", "SamplingParams"]


def _check(ok: bool, knob: str, allowed: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{knob} must be {allowed}; got {value!r}")


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
        _check(isinstance(self.max_tokens, int) and not isinstance(self.max_tokens, bool) and self.max_tokens >= 1,
               "max_tokens", "an integer >= 1", self.max_tokens)
        _check(isinstance(self.temperature, (int, float)) and 0 <= self.temperature <= 5,
               "temperature", "a number in [0, 5]", self.temperature)
        _check(isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1, "top_p", "in (0, 1]", self.top_p)
        if self.seed is not None:
            _check(isinstance(self.seed, int) and not isinstance(self.seed, bool) and self.seed >= 0,
                   "seed", "an integer >= 0", self.seed)
        _check(all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids),
               "stop_token_ids", "a list of token ids", self.stop_token_ids)


class _ConfigRules:
    """What EngineConfig does beyond holding its fields (which come from the knob table)."""

    def __post_init__(self) -> None:
        if isinstance(self.deployment, Deployment):  # kept by name, so configs stay plain data (links, files)
            self.deployment = self.deployment.name
        self.validate()

    ROWS: tuple[Knob, ...] = ()  # the knob table the class was built from (config_class)

    def validate(self) -> None:
        """Each knob against its row, then the rules that tie two knobs together."""
        for knob in self.ROWS:
            knob.check(getattr(self, knob.name))
        if self.deployment is not None:
            try:
                Deployment.parse(self.deployment, self.model)
            except (ValueError, OSError, KeyError) as exc:  # OSError, KeyError: "this@" on an unreadable config
                raise ValueError(f"deployment {self.deployment!r} cannot be priced: {exc}") from None
        if self.slo_admission and (self.slo_ttft_ms is None or self.deployment is None):
            raise ValueError("slo_admission needs slo_ttft_ms (the target it admits by) and a deployment (the "
                             "modeled prefill rate it estimates TTFT with)")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(f"prompt_lookup_min ({self.prompt_lookup_min}) must be at most prompt_lookup_max "
                             f"({self.prompt_lookup_max}): the n-grams looked for run from the longest down")
        if self.async_scheduling:
            self._check_async()
        if self.enable_prefix_caching and self.kv_allocation == "contiguous":
            raise ValueError("enable_prefix_caching needs kv_allocation='paged': a contiguous reservation "
                             "cannot share another request's blocks")

    def _check_async(self) -> None:
        """Async scheduling is vLLM v1's, and vLLM 0.32 refuses it beside CPU n-gram drafts."""
        clash = [f"{name}={value!r}" for name, value, needed in (
            ("step_order", self.step_order, "decode_first"), ("preemption_mode", self.preemption_mode, "recompute"),
            ("speculative_method", self.speculative_method, "none")) if value != needed]
        if clash:
            raise ValueError(f"async_scheduling needs step_order='decode_first', preemption_mode='recompute' and "
                             f"speculative_method='none' (vLLM v1's loop; vLLM 0.32 refuses it with n-gram drafts "
                             f"proposed on the CPU); got {', '.join(clash)}")

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
            KNOB["engine_preset"].check(changes["engine_preset"])
            changes = {**PRESET_RULES[changes["engine_preset"]], **changes}
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EngineConfig:
        """Build from a dict (a lesson file, a URL), rejecting unknown knobs by name."""
        known = {knob.name for knob in cls.ROWS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown knob(s): {', '.join(unknown)}; known knobs: {', '.join(sorted(known))}")
        return cls.for_preset(**data) if "engine_preset" in data else cls(**data)


def config_class(rows: tuple[Knob, ...]) -> type:
    """A config class with one field per row, in the table's order, typed, defaulted and checked by
    its row: adding a knob to the table adds it here."""
    cls = dataclasses.make_dataclass("EngineConfig", [(k.name, k.annotation, field(default=k.default)) for k in rows],
                                     bases=(_ConfigRules,), namespace={"ROWS": rows})
    cls.__module__ = __name__
    cls.__doc__ = "The scheduler's and KV cache's knobs: one field per row of engine.knobs.KNOBS."
    return cls


EngineConfig = config_class(KNOBS)
