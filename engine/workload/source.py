"""Where a run's requests come from, and how they are added to an engine."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from engine.config import SamplingParams
from engine.workload.generator import GeneratorSpec, generate_workload
from engine.workload.item import WorkloadError, WorkloadItem, shown
from engine.workload.load import RateSpec, TraceSpec
from engine.workload.presets import PRESETS


@dataclass(frozen=True)
class WorkloadSource:
    """Where a run's requests come from: a preset, a generator, or a list of requests (a file, a
    lesson's own, a link's). The one definition the lab's sidebar, its links, its lessons and the
    CLI read, for both the requests and what to call them.

    A preset or a generator is named by a link instead of listed; a list is listed."""

    preset: str | None = None
    generator: GeneratorSpec | None = None
    load: TraceSpec | RateSpec | None = None  # a real trace, or requests at a rate (engine/workload/load.py)
    requests: tuple[WorkloadItem, ...] = ()
    name: str = ""  # what a list is called: "file trace.jsonl", "lesson 3"

    def __post_init__(self) -> None:
        if self.preset is not None and self.preset not in PRESETS:
            raise WorkloadError(f"unknown preset {self.preset!r}; presets: {', '.join(PRESETS)}")
        if sum(x is not None for x in (self.preset, self.generator, self.load)) > 1:
            raise WorkloadError("a workload comes from one of a preset, a generator or a load, not several")
        object.__setattr__(self, "requests", tuple(self.requests))

    @property
    def named(self) -> bool:
        """A preset or a generator: a few words rebuild it, so a link names it instead of listing it."""
        return self.preset is not None or self.generator is not None or self.load is not None

    def items(self) -> list[WorkloadItem]:
        if self.preset is not None:
            return PRESETS[self.preset]()
        if self.generator is not None:
            return generate_workload(self.generator)
        if self.load is not None:
            return self.load.items()
        return list(self.requests)

    @property
    def label(self) -> str:
        if self.preset is not None:
            return f"preset {self.preset}"
        if self.generator is not None:
            return f"generated workload (seed {self.generator.seed})"
        if self.load is not None:
            return self.load.label
        return self.name or "workload"


def synthetic_prompt(label: str, num_tokens: int, vocab_size: int) -> list[int]:
    """Token ids standing in for a real prompt of that length: seeded by the label, so the same
    item always gets the same ids, and never id 0 (the default model's end-of-text)."""
    rng = np.random.default_rng(zlib.crc32(label.encode("utf-8")))
    return (rng.integers(1, vocab_size, size=num_tokens)).tolist()


def stop_token_ids(engine, item: WorkloadItem, number: int) -> list[int]:
    """The item's stop token as the model's token id: it must be exactly one token of the model."""
    if item.stop_token is None:
        return []
    ids = engine.loaded.tokenizer.encode(item.stop_token, add_special_tokens=False)
    if len(ids) != 1:
        raise WorkloadError(f"request {number}: stop_token {shown(item.stop_token)} is {len(ids)} tokens of this "
                            "model, not one", field="stop_token")
    return ids


def submit(engine, items: list[WorkloadItem]) -> list[str]:
    """Add every item to the engine as a request; returns their ids in item order."""
    ids = []
    for number, item in enumerate(items, start=1):
        params = SamplingParams(max_tokens=item.max_tokens, temperature=item.temperature,
                                ignore_eos=item.ignore_eos, stop_token_ids=stop_token_ids(engine, item, number))
        prompt = item.prompt if item.prompt_tokens is None else \
            synthetic_prompt(item.prompt, item.prompt_tokens, engine.loaded.vocab_size)
        try:
            ids.append(engine.add_request(prompt, params, priority=item.priority,
                                          arrival_step=item.arrival_step, arrival_ms=item.arrival_ms,
                                          length_scale=item.length_scale))
        except ValueError as exc:
            raise WorkloadError(f"request {number} could not be added: {exc}") from exc
    return ids
