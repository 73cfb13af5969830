"""A request and the few numbers the scheduler needs to reason about it."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from engine.config import SamplingParams

ID_PREFIX = "r"


def request_id(index: int) -> str:
    """The id the engine gives the index-th request added to it: r0, r1, ..."""
    return f"{ID_PREFIX}{index}"


def id_order(request_id: str) -> tuple[int, str]:
    """The sort key that lists requests as the engine numbered them: r2 before r10 (ids it was
    given by name come after, in name order)."""
    number = request_id.removeprefix(ID_PREFIX)
    # ASCII digits only: str.isdigit() takes "²", which int() refuses (an id from a visitor's file).
    ascii_number = re.fullmatch(r"[0-9]{1,18}", number) is not None
    return (int(number), "") if request_id.startswith(ID_PREFIX) and ascii_number else (1 << 62, request_id)


class RequestStatus(str, enum.Enum):
    PENDING = "pending"  # added, but its arrival step has not come yet
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    EOS = "eos"
    LENGTH = "length"
    STOP = "stop"
    REJECTED = "rejected"


@dataclass
class Request:
    """One prompt and its generation so far.

    The scheduler only ever asks: how many of this request's tokens are in the KV
    cache (num_computed_tokens), and how many exist (num_tokens)? A fresh prompt,
    the rest of a chunked prompt, a decode and a recompute after preemption are all
    the same question, which is what lets vLLM v1 schedule them in one pass.
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams
    priority: int = 0
    length_scale: float = 1.0  # its token counts are this fraction of the real ones (a deployment prices them whole)
    arrival_step: int = 0
    arrival_index: int = 0  # order of add_request calls: the last tie-breaker
    status: RequestStatus = RequestStatus.PENDING
    output_token_ids: list[int] = field(default_factory=list)
    output_text: str = ""
    num_computed_tokens: int = 0
    finish_reason: FinishReason | None = None
    refusal: str | None = None  # why it was refused on arrival (engine/admission.py)
    hold_kv: bool = False  # a prefill replica's: its pages outlive it, until their copy to a decode replica is made
    # Speculative decoding: the draft tokens proposed after its last step, verified when it is next scheduled.
    spec_token_ids: list[int] = field(default_factory=list)
    # vLLM's is_prefill_chunk: the last chunk it was scheduled left some of its prompt (or recompute) to do.
    is_prefill_chunk: bool = False
    # Async scheduling: tokens a step has sampled for it that the scheduler has not been handed yet (vLLM's
    # num_output_placeholders). The next step is planned as if they were there.
    num_output_placeholders: int = 0

    # Where the current prefill started after a prefix-cache hit, to tell a whole
    # prefill from a chunk of one.
    prefill_start: int = 0
    # The most tokens it has ever had in the KV cache: computing below this mark is redoing
    # work that a recompute preemption threw away.
    peak_computed_tokens: int = 0
    num_preemptions: int = 0

    # Timeline, in steps and engine milliseconds, for the latency metrics.
    arrival_ms: float | None = None
    # When it last joined a queue: its arrival, or the step that preempted it (it waits from there).
    queued_step: int = 0
    queued_ms: float | None = None
    first_scheduled_step: int | None = None
    first_scheduled_ms: float | None = None  # the clock as that step began
    token_steps: list[int] = field(default_factory=list)
    token_ms: list[float] = field(default_factory=list)
    finish_step: int | None = None
    finish_ms: float | None = None

    @property
    def arrival_order(self) -> tuple[int, float, int]:
        """When it reached the engine, the key vLLM's priority queue and victim rule break ties on
        (its arrival_time): the step it joined, its arrival time, and for requests that joined
        together the order they were added. Set when it joins, kept through preemption."""
        return self.arrival_step, self.arrival_ms or 0.0, self.arrival_index

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_ids(self, start: int, end: int) -> list[int]:
        """all_token_ids[start:end] without building the whole list: a decode step needs one token of a
        sequence hundreds long, for every request, every step (bench/RESULTS.md §12)."""
        prompt = len(self.prompt_token_ids)
        if end <= prompt:
            return self.prompt_token_ids[start:end]
        if start >= prompt:
            return self.output_token_ids[start - prompt:end - prompt]
        return self.prompt_token_ids[start:] + self.output_token_ids[:end - prompt]

    @property
    def max_total_tokens(self) -> int:
        """The longest this request can grow: what a contiguous reservation must hold."""
        return self.num_prompt_tokens + self.sampling.max_tokens

    @property
    def is_decoding(self) -> bool:
        """Only the newest generated token is missing from the KV cache."""
        return bool(self.output_token_ids) and self.num_computed_tokens == self.num_tokens - 1

    @property
    def is_finished(self) -> bool:
        return self.status == RequestStatus.FINISHED

    def chunk_kind(self, num_new_tokens: int) -> str:
        """Name the work that computing num_new_tokens more tokens is."""
        if self.is_decoding:
            return "decode"
        if self.num_computed_tokens < self.peak_computed_tokens:
            return "recompute_prefill"
        whole = self.num_computed_tokens == self.prefill_start and \
            self.num_computed_tokens + num_new_tokens == self.num_tokens
        return "prefill" if whole else "prefill_chunk"
