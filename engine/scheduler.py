"""The scheduler loop's decision: what enters the next forward pass.

Every step starts from three queues (waiting, running, swapped) and three limits
(the token budget, the sequence cap and the free KV pages) and picks, for each
request, how many of its not-yet-computed tokens run now. Each decision is
recorded as an Event whose reason names the rule behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.records import Event
from engine.request import FinishReason, Request, RequestStatus
from engine.waiting_queue import waiting_queue

# SGLang's starting new_token_ratio (SGLANG_INIT_NEW_TOKEN_RATIO). SGLang decays it toward 0.098 over
# 600 decode steps and raises it after a retraction; the lab holds it at 0.7.
SGLANG_NEW_TOKEN_RATIO = 0.7


@dataclass
class SchedulerOutput:
    token_budget: int
    scheduled: dict[str, int] = field(default_factory=dict)  # request id -> tokens, in batch order
    # Page copies in decision order: ("out", [(gpu, cpu), ...]) or ("in", [(cpu, gpu), ...]). Order
    # matters: a request swapped in and then preempted again in one step must be copied in first.
    swaps: list[tuple[str, list[tuple[int, int]]]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def add(self, req: Request, num_tokens: int) -> None:
        self.scheduled[req.request_id] = num_tokens
        self.token_budget -= num_tokens

    def note(self, kind: str, req: Request | None, reason: str, **data) -> None:
        self.events.append(Event(kind, req.request_id if req else None, reason, data))


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager):
        self.config = config
        self.blocks = blocks
        self.waiting = waiting_queue(config.scheduling_policy)
        self.running: list[Request] = []  # in admission order: the last one is the newest
        self.swapped: list[Request] = []
        self.num_finished = 0  # kept as a count: scanning every request each step would grow with history

    # ---- the request lifecycle: in through add, out through finish ---------------------------

    def add(self, req: Request) -> None:
        """A request whose arrival step has come joins the waiting queue."""
        req.status = RequestStatus.WAITING
        self.waiting.add(req)

    def finish(self, req: Request, reason: FinishReason) -> None:
        """Retire a request: its pages go back to the pool and its prefix hashes are dropped."""
        if req.status == RequestStatus.RUNNING:
            self.running.remove(req)
            self.blocks.free(req)
        self.blocks.forget(req)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        self.num_finished += 1

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(self.config.max_num_batched_tokens)
        if self.waiting.policy != self.config.scheduling_policy:  # the policy is a live knob
            self.waiting = waiting_queue(self.config.scheduling_policy, self.waiting)
        if self.config.step_order == "decode_first":
            # vLLM v1: one token-budget pass, running requests first, so decodes and prefill
            # chunks share the step. New work waits while anything had to be preempted.
            self._schedule_running(out)
            if not out.preempted:
                self._schedule_swapped(out)
                self._schedule_waiting(out)
            elif self.waiting or self.swapped:
                out.note("blocked", None, "no new admissions this step: running requests had to be preempted, "
                         "so memory is too tight to start more work", limit="preemption")
        else:
            # vLLM v0 / SGLang: a prefill-only step whenever new prompts fit (and nothing
            # waits in swap), otherwise a decode-only step.
            if not self.swapped:
                self._schedule_running(out, prefills_only=True)
                self._schedule_waiting(out)
            if not out.scheduled:
                self._schedule_running(out)
                if not out.preempted:
                    self._schedule_swapped(out)
        for block, prefix in self.blocks.take_evictions():
            out.note("evicted", None, f"page {block} was reused, so the cached prefix {prefix} it held is forgotten",
                     block=block, hash=prefix)
        return out

    # ---- the three queues -------------------------------------------------------------------

    def _schedule_running(self, out: SchedulerOutput, prefills_only: bool = False) -> None:
        """In running order while budget lasts; a request that cannot get a page preempts the
        victim rule's choice, and if that is itself, the pass ends (vLLM v1's `break`)."""
        i = 0
        while i < len(self.running) and out.token_budget > 0:
            req = self.running[i]
            if prefills_only and req.is_decoding:
                i += 1
                continue
            n = self._num_new_tokens(req, out.token_budget, req.num_computed_tokens)
            while not self.blocks.allocate(req, n):
                victim, rule = self._pick_victim(self.running)
                if self.running.index(victim) < i:
                    i -= 1
                self._preempt(victim, out, f"{req.request_id} needed a new KV page and none was free; {rule}")
                if victim is req:
                    break
            if req.status != RequestStatus.RUNNING:
                break
            out.add(req, n)
            i += 1
        for req in self.running[i:]:
            if out.token_budget == 0 and req.request_id not in out.scheduled:
                out.note("blocked", req, f"token budget: the step's {self.config.max_num_batched_tokens} "
                         "tokens are already taken by requests ahead of it", limit="token_budget")

    def _schedule_swapped(self, out: SchedulerOutput) -> None:
        for req in list(self.swapped):
            if not self._has_seat(req, out):
                return
            n = self._num_new_tokens(req, out.token_budget, req.num_computed_tokens)
            if n == 0:
                out.note("blocked", req, "token budget used up before swapped requests", limit="token_budget")
                return
            extra = 0 if self.blocks.contiguous else max(
                0, self.blocks.blocks_needed(req.num_computed_tokens + n) -
                len(self.blocks.cpu_req_blocks[req.request_id]))
            pairs = self.blocks.swap_in(req, reserve=extra)
            if pairs is None:
                out.note("blocked", req, "not enough free KV pages to swap its pages back in", limit="blocks")
                return
            self.blocks.allocate(req, n)  # cannot fail: swap_in kept `extra` pages free
            self.swapped.remove(req)
            self._start_running(req)
            out.swaps.append(("in", pairs))
            out.note("swapped_in", req, f"{len(pairs)} pages copied back from CPU memory; it resumes where it "
                     "stopped, nothing recomputed", blocks=[g for _, g in pairs])
            out.add(req, n)

    def _schedule_waiting(self, out: SchedulerOutput) -> None:
        while self.waiting and out.token_budget > 0:
            req = self.waiting.peek()
            if any(r is req for r in out.preempted):
                return  # never re-admit a request in the step that evicted it
            if not self._has_seat(req, out):
                return
            while True:
                hit = self.blocks.find_prefix_hit(req)
                computed = len(hit) * self.config.block_size
                n = self._num_new_tokens(req, out.token_budget, computed)
                if n == 0:
                    out.note("blocked", req, self._why_no_budget(req, out), limit="token_budget")
                    return
                why = self._why_not_admitted(req, hit)
                if why is None and self.blocks.allocate(req, n, hit):  # the rule asked for at least this
                    break
                victim = self._lower_priority_victim(req)
                if victim is None:
                    out.note("blocked", req, why, limit="blocks")
                    return
                self._preempt(victim, out, f"priority: {req.request_id} (priority {req.priority}) outranks it "
                              f"(priority {victim.priority}) and needed its KV pages")
            self.waiting.pop()
            req.num_computed_tokens = req.prefill_start = computed
            self._start_running(req)
            lost = req.peak_computed_tokens - req.num_computed_tokens
            if lost > 0:
                made = f", {len(req.output_token_ids)} of them generated," if req.output_token_ids else ""
                out.note("recompute_started", req, f"re-running the prefill over {lost} tokens{made} whose KV "
                         "pages were dropped when it was preempted", tokens=lost)
            out.note("admitted", req, self._admit_reason(req, len(hit), n),
                     prefix_hit_tokens=req.num_computed_tokens, query_tokens=req.num_tokens,
                     resumed=req.num_preemptions > 0, blocks=list(self.blocks.block_table(req.request_id)))
            out.add(req, n)

    # ---- rules ------------------------------------------------------------------------------

    def _num_new_tokens(self, req: Request, budget: int, computed: int) -> int:
        """How many of the request's uncomputed tokens fit this step (0: none may run).

        A running request takes what the budget leaves, as in vLLM v1; only a waiting
        prompt must fit whole when chunked prefill is off. The chunk cap applies only
        while another request could use the budget: alone, nobody would be starved."""
        remaining = req.num_tokens - computed
        cap = self.config.long_prefill_token_threshold
        if cap and self.config.enable_chunked_prefill and len(self.running) + len(self.waiting) > 1:
            remaining = min(remaining, cap)
        if not self.config.enable_chunked_prefill and req.status != RequestStatus.RUNNING and remaining > budget:
            return 0
        return min(remaining, budget)

    def _has_seat(self, req: Request, out: SchedulerOutput) -> bool:
        while len(self.running) >= self.config.max_num_seqs:
            victim = self._lower_priority_victim(req)
            if victim is None:
                out.note("blocked", req, f"sequence cap: {self.config.max_num_seqs} requests already run "
                         "(max_num_seqs)", limit="seq_cap")
                return False
            self._preempt(victim, out, f"priority: {req.request_id} (priority {req.priority}) outranks it "
                          f"(priority {victim.priority}) and needed its seat")
        return True

    def _pick_victim(self, candidates: list[Request]) -> tuple[Request, str]:
        if self.config.victim_rule == "fewest_generated":
            # SGLang's retract_decode: fewest output tokens, ties to the longest prompt.
            victim = min(candidates, key=lambda r: (len(r.output_token_ids), -r.num_prompt_tokens, -r.arrival_index))
            return victim, f"victim rule fewest_generated: {victim.request_id} has generated the least"
        if self.config.scheduling_policy == "priority":
            victim = max(candidates, key=lambda r: (r.priority, r.arrival_index))
            return victim, f"victim rule priority: {victim.request_id} has the lowest priority, latest arrival"
        victim = candidates[-1]
        return victim, f"victim rule fcfs: {victim.request_id} was admitted last"

    def _lower_priority_victim(self, req: Request) -> Request | None:
        """vLLM v0 under the priority policy: a waiting request may evict strictly lower-priority work.
        vLLM v1 never does; priority there only orders the queues and picks the victim."""
        if self.config.scheduling_policy != "priority" or not self.config.preempt_on_admission:
            return None
        lower = [r for r in self.running if r.priority > req.priority]
        return self._pick_victim(lower)[0] if lower else None

    def _preempt(self, victim: Request, out: SchedulerOutput, reason: str) -> None:
        if victim.request_id in out.scheduled:  # already placed in this batch: give its tokens back
            out.token_budget += out.scheduled.pop(victim.request_id)
        self.running.remove(victim)
        victim.num_preemptions += 1
        out.preempted.append(victim)
        num_pages = len(self.blocks.block_table(victim.request_id))
        if self.config.preemption_mode == "swap":
            pairs = self.blocks.swap_out(victim)
            if pairs is not None:
                victim.status = RequestStatus.SWAPPED
                self.swapped.append(victim)
                out.swaps.append(("out", pairs))
                out.note("preempted", victim, reason, mode="swap", blocks_freed=num_pages)
                out.note("swapped_out", victim, f"{len(pairs)} KV pages copied to CPU memory; they come back "
                         "when it resumes", blocks=[c for _, c in pairs])
                return
            reason += "; the CPU swap space is full, so it falls back to recompute"
        freed = self.blocks.free(victim)
        victim.num_computed_tokens = 0
        victim.status = RequestStatus.WAITING
        self.waiting.add_preempted(victim)
        out.note("preempted", victim, reason + f"; its {num_pages} pages are dropped and will be recomputed",
                 mode="recompute", blocks_freed=freed)

    def _start_running(self, req: Request) -> None:
        req.status = RequestStatus.RUNNING
        self.running.append(req)

    def _admit_reason(self, req: Request, hit_blocks: int, n: int) -> str:
        parts = [f"{n} of its {req.num_tokens - req.num_computed_tokens} uncomputed tokens fit the budget"]
        if hit_blocks:
            parts.append(f"prefix cache hit: {hit_blocks} pages ({req.num_computed_tokens} tokens) reused")
        parts.append(f"{len(self.blocks.block_table(req.request_id))} KV pages now held")
        return "; ".join(parts)

    def _why_no_budget(self, req: Request, out: SchedulerOutput) -> str:
        if self.config.enable_chunked_prefill:
            return (f"token budget: all {self.config.max_num_batched_tokens} tokens of this step are taken by "
                    "requests ahead of it")
        return (f"token budget: its {req.num_tokens - req.num_computed_tokens} prompt tokens do not fit the "
                f"{out.token_budget} left this step, and chunked prefill is off")

    def _why_not_admitted(self, req: Request, hit: list[int]) -> str | None:
        """The admission rule (admission_reserve) in words when the pool cannot take req now; None if it can."""
        blocks, free = self.blocks, self.blocks.num_free_blocks
        if blocks.contiguous:
            need = blocks.blocks_needed(req.max_total_tokens)
            run = blocks.largest_free_run()
            if need <= run:
                return None
            if need <= free:
                return (f"fragmentation: a contiguous reservation needs {need} adjacent pages; {free} are free "
                        f"but the longest free run is {run}")
            return f"KV pages: a contiguous reservation needs {need} pages for its whole possible length; {free} free"
        rule = self.config.admission_reserve
        if rule == "output_estimate":
            return self._why_not_admitted_sglang(req, hit, free)
        # vLLM: every page of its current sequence (not only this step's chunk) must be free.
        need = blocks.pages_to_take(req, req.num_tokens - len(hit) * self.config.block_size, hit)
        what = f"its whole {req.num_tokens}-token sequence"
        if rule == "max_tokens":  # TensorRT-LLM GUARANTEED_NO_EVICT: everyone can reach max_tokens
            need = blocks.pages_to_take(req, req.max_total_tokens - len(hit) * self.config.block_size, hit) + sum(
                max(0, blocks.blocks_needed(r.max_total_tokens) - len(blocks.block_table(r.request_id)))
                for r in self.running)
            what = "it and every running request at max_tokens (GUARANTEED_NO_EVICT)"
        reserve = self.config.watermark_blocks if self.running else 0
        if need + reserve <= free:
            return None
        if need <= free:
            return (f"watermark: taking {need} pages would leave fewer than the {reserve} pages kept free for "
                    "running requests to grow")
        return f"KV pages: {what} needs {need} free pages, only {free} free"

    def _why_not_admitted_sglang(self, req: Request, hit: list[int], free: int) -> str | None:
        """SGLang's PrefillAdder: the new prompt plus all its output, plus new_token_ratio of every running
        request's remaining output, must fit in the free (and evictable) tokens, with a page to spare."""
        bs = self.config.block_size
        reserved = sum(SGLANG_NEW_TOKEN_RATIO * (r.sampling.max_tokens - len(r.output_token_ids))
                       for r in self.running)
        need = req.num_tokens - len(hit) * bs + req.sampling.max_tokens - len(req.output_token_ids) + bs
        have = (free - sum(1 for b in hit if self.blocks.blocks[b].ref_count == 0)) * bs - reserved
        if need < have:
            return None
        return (f"KV tokens: SGLang admits only if its {need} tokens (prompt, output to max_tokens and a page) fit "
                f"the {have:.0f} left after reserving {SGLANG_NEW_TOKEN_RATIO} of running requests' remaining output")
