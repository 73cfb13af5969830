"""Disaggregated serving's hand-off: a prompt prefilled on one replica and decoded on another.

The prefill replica finishes a request after its first token but holds its pages
(hold_kv) until the fleet has copied them out (release); the decode replica takes
pages for it (receive), waits for the copy (kv_arrived), and then schedules it as
a decode. engine/fleet/ drives both sides; this is the engine's half of it.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.block_manager import BlockManager
from engine.config import EngineConfig, SamplingParams
from engine.request import Request, RequestStatus
from engine.scheduler import Scheduler


class Handoff:
    """The Engine's methods for a request whose KV moves between replicas (mixed into Engine)."""

    config: EngineConfig
    blocks: BlockManager
    scheduler: Scheduler
    requests: dict[str, Request]
    step_index: int
    clock_ms: float
    next_step_ms: Callable[[], float | None]

    def receive(self, prefilled: Request, params: SamplingParams) -> tuple[list[int], int] | None:
        """Take pages for a request prefilled on another replica (`prefilled`, which sampled its first token
        there; `params`, its own sampling): its cached prefix here, and new pages for the rest of its
        prompt, which the caller fills by copying the prefill replica's pages. Returns (the block table,
        how many leading pages were cached here already), or None if the pool has no room now (nothing
        is taken). It runs once kv_arrived says the copy is done; its latencies count from its arrival."""
        rid, prompt = prefilled.request_id, prefilled.prompt_token_ids
        req = Request(rid, list(prompt), params, length_scale=prefilled.length_scale, arrival_step=self.step_index,
                      arrival_index=len(self.requests))
        req.output_token_ids, req.output_text = list(prefilled.output_token_ids), prefilled.output_text
        req.arrival_ms, req.first_scheduled_ms = prefilled.arrival_ms, prefilled.first_scheduled_ms
        req.first_scheduled_step = self.step_index  # (steps count on each engine apart; the ms span both)
        req.token_ms, req.token_steps = list(prefilled.token_ms), [self.step_index]
        req.queued_step, req.queued_ms = self.step_index, prefilled.token_ms[-1]
        hit = self.blocks.find_prefix_hit(req)
        # Pages for the prompt and for its first decode step's token: a received request never waits
        # for a page it cannot get (its decode replica could fill up with those, and none could run).
        if not self.blocks.allocate(req, req.num_tokens - len(hit) * self.config.block_size, hit):
            self.blocks.forget(req)
            return None
        req.num_computed_tokens = req.peak_computed_tokens = req.prefill_start = len(prompt)
        req.status = RequestStatus.WAITING
        self.requests[rid] = req
        self.scheduler.incoming[rid] = req
        return self.blocks.block_table(rid), len(hit)

    def kv_arrived(self, request_id: str, at_ms: float) -> None:
        """The copy into a received request's pages was done at at_ms: it may be scheduled from the next
        step (an idle engine's clock moves on to that time)."""
        if self.next_step_ms() is None:
            self.clock_ms = max(self.clock_ms, at_ms)
        self.scheduler.received.append(self.scheduler.incoming.pop(request_id))

    def wait_until(self, at_ms: float) -> None:
        """An engine that could schedule nothing (its waiting requests blocked by pages another replica
        is still copying out) waits: its clock moves on to when something changed."""
        self.clock_ms = max(self.clock_ms, at_ms)

    def release(self, request_id: str) -> list[int]:
        """A held request's pages, once copied elsewhere, go back to the pool; returns what they were."""
        table = list(self.blocks.block_table(request_id))
        self.scheduler.release(request_id)
        return table
