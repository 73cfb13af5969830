"""Admission control at the door: the rules that refuse an arriving request at once, before it queues.

The scheduler decides who runs among the requests it holds; these rules decide whether a request
is taken at all. Refusing early is kinder than serving late: a client told "busy" (vLLM's server
answers HTTP 503) can retry elsewhere, while one left in a long queue only learns it waited.

- ``never_fits``: under these knobs it could never run (too long for max_model_len, for the pool or,
  with chunked prefill off, for the token budget); refused rather than left to wait forever.
- ``max_num_queued_reqs`` and ``max_num_queued_tokens`` are vLLM 0.32's queue limits, checked as its
  API server checks them (``AsyncLLM.check_admission``): the first counts requests in flight (waiting
  or running) and refuses when one more would exceed it; the second counts the prompt tokens of
  requests that have not yet produced their first token (the whole prompt, however much of it is
  computed: the server is not told of a prefill's progress) and refuses once that reaches the limit.
- ``slo_admission`` is the lab's own rule, in no engine the lab names: refuse a request whose
  estimated time to first token already misses ``slo_ttft_ms``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.config import EngineConfig
from engine.hardware import Deployment
from engine.pricing import Work, graph_shape, real_steps
from engine.request import Request
from engine.scheduler import Scheduler


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused at the door: the rule (a knob's name) and the sentence the lab shows."""

    rule: str
    reason: str


def in_flight(sched: Scheduler) -> list[Request]:
    """Requests taken and not finished: what vLLM's server counts as unfinished."""
    return [*sched.waiting, *sched.running, *sched.swapped, *sched.incoming.values(), *sched.received]


def queued_prompt_tokens(sched: Scheduler) -> int:
    """The prompt tokens of requests in flight that have no token yet, each counted whole."""
    return sum(r.num_prompt_tokens for r in in_flight(sched) if not r.output_token_ids)


def never_fits(config: EngineConfig, sched: Scheduler, max_model_len: int, req: Request) -> str | None:
    """Why the request could never be served under these knobs (None if it could): it is refused
    when it arrives, instead of waiting forever."""
    total = req.max_total_tokens
    if total > max_model_len:
        return f"can never fit: prompt plus max_tokens is {total} tokens, max_model_len is {max_model_len}"
    pages = sched.blocks.blocks_needed(total)
    usable = config.num_gpu_blocks - config.watermark_blocks
    if pages > usable:
        # After a recompute preemption it must be re-admitted at full length, watermark and all.
        return (f"can never fit: at full length it needs {pages} KV pages, and the pool has {usable} "
                f"to admit into ({config.num_gpu_blocks} minus {config.watermark_blocks} kept "
                "free by the watermark)")
    slots = usable * config.block_size
    if config.admission_reserve == "output_estimate" and total + config.block_size >= slots:
        return (f"can never fit: SGLang's admission wants its {total} tokens plus a spare page of "
                f"{config.block_size} below the pool's {slots} token slots")
    if not config.enable_chunked_prefill and total > config.max_num_batched_tokens:
        return (f"can never fit: with chunked prefill off, its prompt (and any recompute of prompt plus "
                f"output, up to {total} tokens) must run in one step of max_num_batched_tokens="
                f"{config.max_num_batched_tokens}")
    return None


def refusal(config: EngineConfig, sched: Scheduler, deployment: Deployment | None, max_model_len: int,
            req: Request) -> Refusal | None:
    """The first rule that refuses req as it arrives, or None: it may queue."""
    why = never_fits(config, sched, max_model_len, req)
    if why:
        return Refusal("never_fits", why)
    limit = config.max_num_queued_reqs
    if limit is not None and (flying := len(in_flight(sched))) + 1 > limit:
        return Refusal("max_num_queued_reqs", f"refused at the door (HTTP 503 in vLLM): {flying} requests already "
                       f"in flight, and max_num_queued_reqs={limit}")
    limit = config.max_num_queued_tokens
    if limit is not None and (queued := queued_prompt_tokens(sched)) >= limit:
        return Refusal("max_num_queued_tokens", f"refused at the door (HTTP 503 in vLLM): requests before their "
                       f"first token already hold {queued} prompt tokens, and max_num_queued_tokens={limit}")
    if config.slo_admission:
        estimate = TtftEstimate.of(config, sched, deployment, req)
        if estimate.ms > config.slo_ttft_ms:
            return Refusal("slo_admission", f"refused by the lab's SLO admission rule: {estimate}, over "
                           f"slo_ttft_ms={config.slo_ttft_ms:g}")
    return None


@dataclass(frozen=True)
class TtftEstimate:
    """How long a request would wait for its first token if admitted now, as the lab's rule reckons it:
    every prompt token queued ahead of it, and its own, prefilled at the rate of steps like this one.

    Each step gives the prompts what the running decodes leave of the token budget, and costs what such a
    step costs on the deployment (modeled). It is an estimate: it ignores prefix-cache hits, preemptions
    and the requests that will arrive behind it yet be served first under the priority policy."""

    tokens: int  # prompt tokens to prefill before its first token, its own included
    steps: int
    step_ms: float
    deployment: str

    @property
    def ms(self) -> float:
        return self.steps * self.step_ms

    def __str__(self) -> str:
        return (f"estimated TTFT {self.ms:.0f} ms ({self.tokens} prompt tokens to prefill before its first token, "
                f"its own included: {self.steps} steps of {self.step_ms:.1f} ms on {self.deployment}, modeled)")

    @classmethod
    def of(cls, config: EngineConfig, sched: Scheduler, deployment: Deployment, req: Request) -> TtftEstimate:
        ahead = [r for r in [*sched.waiting, *sched.running] if not r.is_decoding]  # prompts and recomputes
        if config.scheduling_policy == "priority":  # only those it cannot overtake
            ahead = [r for r in ahead if r.priority <= req.priority]
        tokens = req.num_prompt_tokens + sum(r.num_tokens - r.num_computed_tokens for r in ahead)
        decodes = [r for r in sched.running if r.is_decoding]
        share = max(1, config.max_num_batched_tokens - len(decodes))
        steps = math.ceil(tokens / share)
        work = [Work(min(share, tokens), 0, req.length_scale)]
        work += [Work(1, r.num_computed_tokens, r.length_scale, decode=True) for r in decodes]
        graphs, query_len = graph_shape(config, deployment.gpu)
        cost = real_steps(deployment, work, graph_sizes=graphs, query_len=query_len)
        return cls(tokens, steps, cost.total_ms, deployment.name)
