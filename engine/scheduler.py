"""The scheduler loop's decision: what enters the next forward pass.

Every step starts from three queues (waiting, running, swapped) and three limits
(the token budget, the sequence cap and the free KV pages) and picks, for each
request, how many of its not-yet-computed tokens run now. This module is the
loop over the queues; the engines' rules it applies are in engine/rules.py and
the words of each decision in engine/reasons.py. Each decision is recorded as an
Event whose reason names the rule behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import reasons, rules
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.metrics import COUNTER_KEYS
from engine.records import Event
from engine.request import FinishReason, Request, RequestStatus
from engine.speculation import PLACEHOLDER
from engine.waiting_queue import waiting_queue


@dataclass
class SchedulerOutput:
    """One step's decision: the batch, the page copies it needs, who was preempted, and why."""

    budget_left: int  # of the token budget: what requests later in the pass may still take
    scheduled: dict[str, int] = field(default_factory=dict)  # request id -> tokens, in batch order
    # Page copies in decision order: ("out", [(gpu, cpu), ...]) or ("in", [(cpu, gpu), ...]). Order
    # matters: a request swapped in and then preempted again in one step must be copied in first.
    swaps: list[tuple[str, list[tuple[int, int]]]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # Speculative decoding: request id -> the draft tokens its scheduled tokens end with (PLACEHOLDER for
    # a slot padded in that holds no draft), verified in this step's forward pass.
    drafts: dict[str, list[int]] = field(default_factory=dict)
    running_scheduled: set[str] = field(default_factory=set)  # requests the running pass scheduled
    running_prefill: bool = False  # one of them is part way through its prompt

    def schedule(self, req: Request, num_tokens: int) -> None:
        self.scheduled[req.request_id] = num_tokens
        self.budget_left -= num_tokens

    def unschedule(self, req: Request) -> None:
        """A request placed in this batch and then preempted gives its tokens back."""
        self.budget_left += self.scheduled.pop(req.request_id, 0)
        self.drafts.pop(req.request_id, None)
        self.running_scheduled.discard(req.request_id)

    def note(self, kind: str, req: Request | None, reason: str, **data) -> None:
        self.events.append(Event(kind, req.request_id if req else None, reason, data))


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager, max_model_len: int | None = None):
        self.config = config
        self.blocks = blocks
        # A draft may not take a sequence past it (None: the config's, or no limit for a loop without a model).
        self.max_model_len = max_model_len or config.max_model_len or 1_000_000
        self.waiting = waiting_queue(config.scheduling_policy)
        self.running: list[Request] = []  # in admission order: the last one is the newest
        self.swapped: list[Request] = []
        # Disaggregated serving: requests prefilled elsewhere, holding pages here that their KV is being
        # copied into (incoming), then ready to decode once it has arrived (received); and, on a prefill
        # replica, finished requests whose pages are held until the copy out of them is made.
        self.incoming: dict[str, Request] = {}
        self.received: list[Request] = []
        self.held: dict[str, Request] = {}
        self.num_finished = 0  # kept as a count: scanning every request each step would grow with history
        # Running totals (engine.metrics.COUNTER_KEYS), counted where each thing happens.
        self.counters = dict.fromkeys(COUNTER_KEYS, 0)

    # ---- the request lifecycle: in through add, out through finish ---------------------------

    def add(self, req: Request) -> None:
        """A request whose arrival has come joins the waiting queue."""
        req.status = RequestStatus.WAITING
        self.waiting.add(req)

    def finish(self, req: Request, reason: FinishReason) -> None:
        """Retire a request: its pages go back to the pool and its prefix hashes are dropped (a
        request whose KV is to be copied to another replica keeps them, see release)."""
        if req.status == RequestStatus.WAITING:  # async: preempted, then stopped by a token already in flight
            self.waiting.remove(req)
        if req.status == RequestStatus.RUNNING:
            self.running.remove(req)
            if req.hold_kv:
                self.held[req.request_id] = req
            else:
                self.blocks.free(req)
        if req.request_id not in self.held:
            self.blocks.forget(req)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        self.num_finished += 1

    def release(self, request_id: str) -> None:
        """The copy out of a held request's pages is made: they go back to the pool."""
        req = self.held.pop(request_id)
        self.blocks.free(req)
        self.blocks.forget(req)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(self.config.max_num_batched_tokens)
        if self.waiting.policy != self.config.scheduling_policy:  # the policy is a live knob
            self.waiting = waiting_queue(self.config.scheduling_policy, self.waiting)
        if self.config.step_order == "decode_first":
            # vLLM v1: one token-budget pass, running requests first, so decodes and prefill
            # chunks share the step. New work waits while anything had to be preempted.
            self._schedule_running(out)
            if not out.preempted:
                self._schedule_received(out)
                self._schedule_swapped(out)
                self._schedule_waiting(out)
            elif self.waiting or self.swapped:
                out.note("blocked", None, reasons.no_admissions_after_preemption(), limit="preemption")
        else:
            # vLLM v0 / SGLang: a prefill-only step whenever new prompts fit (and nothing
            # waits in swap), otherwise a decode-only step.
            if not self.swapped:
                self._schedule_running(out, prefills_only=True)
                self._schedule_waiting(out)
            if not out.scheduled:
                self._schedule_running(out)
                if not out.preempted:
                    self._schedule_received(out)
                    self._schedule_swapped(out)
        for block, prefix in self.blocks.take_evictions():
            out.note("evicted", None, reasons.evicted(block, prefix), block=block, hash=prefix)
        return out

    # ---- the three queues -------------------------------------------------------------------

    def _schedule_running(self, out: SchedulerOutput, prefills_only: bool = False) -> None:
        """In running order while budget lasts; a request that cannot get a page preempts the
        victim rule's choice, and if that is itself, the pass ends (vLLM v1's `break`)."""
        i = 0
        while i < len(self.running) and out.budget_left > 0:
            req = self.running[i]
            if prefills_only and req.is_decoding or self._last_token_in_flight(req):
                i += 1
                continue
            n = self._chunk_size(req, out.budget_left, req.num_computed_tokens, len(req.spec_token_ids))
            while not self.blocks.allocate(req, n):
                victim, rule = rules.pick_victim(self.config, self.running)
                if self.running.index(victim) < i:
                    i -= 1
                self._preempt(victim, out, reasons.needed_a_page(req, rule))
                if victim is req:
                    break
            if req.status != RequestStatus.RUNNING:
                break
            out.schedule(req, n)
            out.running_scheduled.add(req.request_id)
            out.running_prefill |= req.is_prefill_chunk
            drafts = req.spec_token_ids[:req.num_computed_tokens + n - req.num_tokens]  # those the budget let in
            if drafts:
                out.drafts[req.request_id] = drafts
            req.spec_token_ids = []  # the next ones are proposed after this step
            i += 1
        for req in self.running[i:]:
            if out.budget_left == 0 and req.request_id not in out.scheduled:
                out.note("blocked", req, reasons.no_budget_left(self.config.max_num_batched_tokens),
                         limit="token_budget")

    @staticmethod
    def _last_token_in_flight(req: Request) -> bool:
        """Async scheduling: the step now running samples its last token (max_tokens), so another step would
        be wasted on it, and vLLM skips it. Its computed tokens count the placeholder's position; one more is
        sampled after them. A stop token nobody can foresee still costs that step."""
        return req.num_output_placeholders > 0 and \
            req.num_computed_tokens + 2 - req.num_output_placeholders >= req.max_total_tokens

    def _schedule_received(self, out: SchedulerOutput) -> None:
        """Requests whose prompt's KV was copied here join the running batch as decodes, a seat and a
        page for their next token allowing (vLLM admits them from its waiting queue once the KV is in)."""
        for req in list(self.received):
            if not self._take_seat(req, out):
                return
            n = self._chunk_size(req, out.budget_left, req.num_computed_tokens)
            if n == 0:
                out.note("blocked", req, reasons.no_budget_left(self.config.max_num_batched_tokens),
                         limit="token_budget")
                return
            if not self.blocks.allocate(req, n):
                out.note("blocked", req, reasons.no_page_for_received(), limit="blocks")
                return
            self.received.remove(req)
            self._start_running(req)
            out.note("kv_received", req, reasons.kv_received(req), blocks=list(self.blocks.block_table(req.request_id)))
            out.schedule(req, n)

    def _schedule_swapped(self, out: SchedulerOutput) -> None:
        for req in list(self.swapped):
            if not self._take_seat(req, out):
                return
            n = self._chunk_size(req, out.budget_left, req.num_computed_tokens)
            if n == 0:
                out.note("blocked", req, reasons.no_budget_for_swapped(), limit="token_budget")
                return
            extra = 0 if self.blocks.contiguous else max(
                0, self.blocks.blocks_needed(req.num_computed_tokens + n) -
                len(self.blocks.swap.tables[req.request_id]))
            pairs = self.blocks.swap_in(req, reserve=extra)
            if pairs is None:
                out.note("blocked", req, reasons.no_pages_to_swap_in(), limit="blocks")
                return
            self.blocks.allocate(req, n)  # cannot fail: swap_in kept `extra` pages free
            self.swapped.remove(req)
            self._start_running(req)
            out.swaps.append(("in", pairs))
            self.counters["num_swapped_blocks"] += len(pairs)
            out.note("swapped_in", req, reasons.swapped_in(len(pairs)), blocks=[g for _, g in pairs])
            out.schedule(req, n)

    def _schedule_waiting(self, out: SchedulerOutput) -> None:
        if self.waiting and out.budget_left == 0:  # the queue's head waits too, and should say why
            out.note("blocked", self.waiting.peek(), reasons.no_budget_left(self.config.max_num_batched_tokens),
                     limit="token_budget")
        while self.waiting and out.budget_left > 0:
            req = self.waiting.peek()
            if any(r is req for r in out.preempted):
                return  # never re-admit a request in the step that evicted it
            if not self._take_seat(req, out):
                return
            admitted = self._admit(req, out)
            if admitted is None:
                return
            hit, n = admitted
            self.waiting.pop()
            req.num_computed_tokens = req.prefill_start = len(hit) * self.config.block_size
            self._start_running(req)
            lost = req.peak_computed_tokens - req.num_computed_tokens
            if lost > 0:
                out.note("recompute_started", req, reasons.recompute_started(req, lost), tokens=lost)
            self._count_prefix_lookup(req)
            table = self.blocks.block_table(req.request_id)
            out.note("admitted", req, reasons.admitted(req, len(hit), n, len(table)),
                     prefix_hit_tokens=req.num_computed_tokens, query_tokens=req.num_tokens,
                     resumed=req.num_preemptions > 0, blocks=list(table))
            out.schedule(req, n)
            padding = n - (req.num_tokens - req.num_computed_tokens)
            if padding > 0:
                out.drafts[req.request_id] = [PLACEHOLDER] * padding

    def _admit(self, req: Request, out: SchedulerOutput) -> tuple[list[int], int] | None:
        """Find req's cached prefix and pages for the rest of its chunk, preempting lower-priority
        work where its engine allows: (the cached pages it reuses, its tokens this step), or None
        (blocked; the event says why)."""
        while True:
            hit = self.blocks.find_prefix_hit(req)
            n = self._chunk_size(req, out.budget_left, len(hit) * self.config.block_size)
            if n == 0:
                out.note("blocked", req, reasons.no_budget_for_prompt(
                    req, self.config.max_num_batched_tokens, out.budget_left, self.config.enable_chunked_prefill),
                    limit="token_budget")
                return None
            if self._pads_drafts(req, out, len(hit) * self.config.block_size):
                n = 1 + self.config.num_speculative_tokens
                if n > out.budget_left:  # vLLM would rather not schedule it than schedule it unpadded
                    out.note("blocked", req, reasons.no_budget_for_padding(n, out.budget_left), limit="token_budget")
                    return None
            verdict = rules.admission(self.config, self.blocks, self.running, req, hit)
            if verdict.fits and self.blocks.allocate(req, n, hit):  # the rule asked for at least this
                return hit, n
            victim = rules.lower_priority_victim(self.config, self.running, req)
            if victim is None:
                out.note("blocked", req, verdict.reason, limit="blocks")
                return None
            self._preempt(victim, out, reasons.outranked(req, victim, "KV pages"))

    def _pads_drafts(self, req: Request, out: SchedulerOutput, computed: int) -> bool:
        """vLLM 0.32 pads a request admitted with one token left to compute (a one-token prompt, or a
        preempted decode whose pages the prefix cache still held) with placeholder drafts, so a batch of
        decodes stays one shape for its CUDA graph: when no running prefill chunk shares the step, when it
        joins other decodes or resumes, and when the padded sequence stays under max_model_len. Where the
        chunk cap would cut the padding, vLLM stops on an assertion, and where the padded slots could never
        fit the pool it would wait forever; the lab leaves it unpadded in both."""
        k = self.config.num_speculative_tokens
        cap = self.config.long_prefill_token_threshold
        capped = cap and self.config.enable_chunked_prefill and len(self.running) + len(self.waiting) > 1
        usable = self.config.num_gpu_blocks - self.config.watermark_blocks
        return (self.config.speculative_method != "none" and req.num_tokens - computed == 1
                and not out.running_prefill and (out.running_scheduled or computed > 0)
                and computed + 1 + k + 1 <= self.max_model_len and not (capped and cap < 1 + k)
                and self.blocks.blocks_needed(computed + 1 + k) <= usable)

    def _take_seat(self, req: Request, out: SchedulerOutput) -> bool:
        """A place for req under the sequence cap: True if there is one, preempting lower-priority
        work to make one where its engine allows; False (blocked, with its event) if not."""
        while len(self.running) >= self.config.max_num_seqs:
            victim = rules.lower_priority_victim(self.config, self.running, req)
            if victim is None:
                out.note("blocked", req, reasons.sequence_cap(len(self.running), self.config.max_num_seqs),
                         limit="seq_cap")
                return False
            self._preempt(victim, out, reasons.outranked(req, victim, "seat"))
        return True

    def _chunk_size(self, req: Request, budget: int, computed: int, drafts: int = 0) -> int:
        n = rules.chunk_size(self.config, req, budget, computed, len(self.running) + len(self.waiting), drafts)
        # A verified draft's position must stay under max_model_len, with room for the token sampled after it,
        # and inside a contiguous reservation, which holds the request's longest sequence and no more.
        if not drafts:
            return n
        end = min(req.max_total_tokens if self.blocks.contiguous else self.max_model_len, self.max_model_len - 1)
        return min(n, end - computed)

    def _count_prefix_lookup(self, req: Request) -> None:
        """vLLM's PrefixCacheStats: a preempted request finding its own pages again counts apart."""
        kind = "preempted_prefix_cache" if req.num_preemptions > 0 else "prefix_cache"
        self.counters[f"{kind}_queries"] += req.num_tokens
        self.counters[f"{kind}_hits"] += req.num_computed_tokens

    # ---- preemption ---------------------------------------------------------------------------

    def _preempt(self, victim: Request, out: SchedulerOutput, reason: str) -> None:
        out.unschedule(victim)
        self.running.remove(victim)
        victim.num_preemptions += 1
        victim.spec_token_ids = []  # drafts are proposed afresh once it runs again
        victim.num_output_placeholders = 0  # a token in flight still arrives, as an ordinary output token
        out.preempted.append(victim)
        self.counters["num_preemptions"] += 1
        num_pages = len(self.blocks.block_table(victim.request_id))
        if self.config.preemption_mode == "swap":
            pairs = self.blocks.swap_out(victim)
            if pairs is not None:
                victim.status = RequestStatus.SWAPPED
                self.swapped.append(victim)
                out.swaps.append(("out", pairs))
                self.counters["num_swapped_blocks"] += len(pairs)
                out.note("preempted", victim, reason, mode="swap", blocks_freed=num_pages)
                out.note("swapped_out", victim, reasons.swapped_out(len(pairs)), blocks=[c for _, c in pairs])
                return
            reason += reasons.CPU_SWAP_FULL
        freed = self.blocks.free(victim)
        victim.num_computed_tokens = 0
        victim.status = RequestStatus.WAITING
        self.waiting.add_preempted(victim)
        out.note("preempted", victim, reason + reasons.pages_dropped(num_pages), mode="recompute", blocks_freed=freed)

    def _start_running(self, req: Request) -> None:
        req.status = RequestStatus.RUNNING
        self.running.append(req)
