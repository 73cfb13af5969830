"""The StepRecord of a step: the engine's state after it, as the lab draws it.

Records share every card, page and queue that did not change since the step
before (records.Unchanged), so a long run costs memory in proportion to what
changed, not to the pool and the queues.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.config import EngineConfig
from engine.kv.block_map import BlockMap
from engine.records import (
    Budget,
    Event,
    ModeledCost,
    RequestView,
    ScheduledChunk,
    StepRecord,
    StepStats,
    StepTimings,
    Unchanged,
)
from engine.request import Request
from engine.scheduler import Scheduler


class Recorder:
    """Records an engine's steps; it reads the engine's parts, which live as long as the engine."""

    def __init__(self, config: EngineConfig, scheduler: Scheduler, requests: dict[str, Request],
                 text_of: Callable[[list[int]], str], by_time: bool):
        self.config, self.scheduler, self.blocks, self.requests = config, scheduler, scheduler.blocks, requests
        self.text_of = text_of
        self.by_time = by_time  # arrivals are by time on a deployment's clock: cards carry arrival_ms
        self.block_map = BlockMap(scheduler.blocks)
        self._unchanged = Unchanged()

    def record(self, step: int, chunks: list[ScheduledChunk], events: list[Event], timings: StepTimings,
               modeled: ModeledCost | None) -> StepRecord:
        sched = self.scheduler
        finished = [e.request_id for e in events if e.kind in ("finished", "rejected")]
        shown = [r.request_id for r in (*sched.waiting, *sched.running, *sched.swapped)] + finished
        # Keys no request id can collide with: ("queue", name), ("card", id), (device, block id).
        pages = {(p.device, p.block_id): p for p in self.block_map.snapshot(self.requests, self.text_of)}
        for rid in finished:  # gone from the pool: their pages' texts will not be drawn again
            self.block_map.forget(rid)
        kept = self._unchanged({
            **{("queue", name): [r.request_id for r in queue]
               for name, queue in (("waiting", sched.waiting), ("running", sched.running), ("swapped", sched.swapped))},
            ("queue", "pages"): list(pages), **{("card", rid): self.view(self.requests[rid]) for rid in shown},
            **pages})
        return StepRecord(
            step=step, batch=chunks, budget=self.budget(chunks), waiting=kept["queue", "waiting"],
            running=kept["queue", "running"], swapped=kept["queue", "swapped"], finished=finished,
            requests={rid: kept["card", rid] for rid in shown}, blocks=[kept[key] for key in kept["queue", "pages"]],
            events=events, stats=self.stats(chunks), timings=timings, modeled=modeled)

    def budget(self, chunks: list[ScheduledChunk]) -> Budget:
        """How much of each limit the step used, and the KV pool after it."""
        cfg, blocks = self.config, self.blocks
        drafts = sum(len(c.draft_token_ids) for c in chunks)
        decode_tokens = sum(c.num_tokens - len(c.draft_token_ids) for c in chunks if c.kind == "decode")
        tokens = sum(c.num_tokens for c in chunks)
        cached = blocks.num_cached_free_blocks
        return Budget(
            tokens_used=tokens, token_budget=cfg.max_num_batched_tokens, decode_tokens=decode_tokens,
            prefill_tokens=tokens - decode_tokens - drafts, draft_tokens=drafts, seqs_used=len(chunks),
            seq_cap=cfg.max_num_seqs,
            gpu_blocks_used=cfg.num_gpu_blocks - blocks.num_free_blocks, gpu_blocks_cached=cached,
            gpu_blocks_free=blocks.num_free_blocks - cached, num_gpu_blocks=cfg.num_gpu_blocks,
            cpu_blocks_used=blocks.num_cpu_used, num_cpu_blocks=cfg.num_cpu_blocks)

    def stats(self, chunks: list[ScheduledChunk]) -> StepStats:
        sched = self.scheduler
        return StepStats(
            num_requests_running=len(sched.running), num_requests_waiting=len(sched.waiting),
            num_requests_swapped=len(sched.swapped), num_requests_finished=sched.num_finished,
            kv_cache_usage_perc=round(self.blocks.usage(), 6), num_batched_tokens=sum(c.num_tokens for c in chunks),
            **sched.counters)

    def view(self, req: Request) -> RequestView:
        """A request's card."""
        return RequestView(
            request_id=req.request_id, status=req.status.value, priority=req.priority,
            arrival_step=req.arrival_step, num_prompt_tokens=req.num_prompt_tokens,
            num_output_tokens=len(req.output_token_ids), num_computed_tokens=req.num_computed_tokens,
            max_tokens=req.sampling.max_tokens, num_preemptions=req.num_preemptions,
            num_blocks=self.blocks.num_held(req.request_id),
            finish_reason=req.finish_reason.value if req.finish_reason else None, output_text=req.output_text,
            arrival_ms=req.arrival_ms if self.by_time else None, length_scale=req.length_scale,
            queued_step=req.queued_step, queued_ms=req.queued_ms if self.by_time else None)
