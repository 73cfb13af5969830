"""The scheduler on its own, with the forward pass taken out: each step's decision checked against
the rule that should make it (decode first, the token budget and chunked prefill, the sequence cap,
preemption by recompute or swap, the victim rules), and the counters counted where things happen."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.block_manager import BlockManager
from engine.config import EngineConfig, SamplingParams
from engine.request import FinishReason, Request, RequestStatus, request_id
from engine.scheduler import Scheduler, SchedulerOutput

TOKEN = 7  # every sampled token: the scheduler never reads them


class Loop:
    """schedule(), then what the engine would do with the batch: tokens computed, one sampled when a
    request's tokens are all computed, and finish at max_tokens."""

    def __init__(self, **knobs):
        self.config = EngineConfig(model="stub", **{"block_size": 4, "num_gpu_blocks": 16, **knobs})
        self.blocks = BlockManager(self.config)
        self.scheduler = Scheduler(self.config, self.blocks)
        self.requests: list[Request] = []

    def add(self, prompt_tokens: int, max_tokens: int = 4, priority: int = 0, arrival_step: int = 0) -> Request:
        """A request that reached the engine at arrival_step (which may be before earlier-added ones)."""
        i = len(self.requests)
        req = Request(request_id(i), [i + 1] * prompt_tokens, SamplingParams(max_tokens=max_tokens), priority=priority,
                      arrival_index=i, arrival_step=arrival_step)
        self.requests.append(req)
        self.scheduler.add(req)
        return req

    def step(self) -> SchedulerOutput:
        out = self.scheduler.schedule()
        for rid, n in out.scheduled.items():
            req = next(r for r in self.requests if r.request_id == rid)
            req.num_computed_tokens += n
            if req.num_computed_tokens == req.num_tokens:
                req.output_token_ids.append(TOKEN)
                if len(req.output_token_ids) >= req.sampling.max_tokens:
                    self.scheduler.finish(req, FinishReason.LENGTH)
        return out

    def kinds(self, out: SchedulerOutput, kind: str) -> list[str]:
        return [e.request_id for e in out.events if e.kind == kind]


def test_running_decodes_go_first_and_a_prompt_takes_what_the_budget_leaves():
    loop = Loop(max_num_batched_tokens=8)
    a, b = loop.add(3), loop.add(3)
    assert loop.step().scheduled == {"r0": 3, "r1": 3}
    c = loop.add(10)
    out = loop.step()  # two decodes, then 6 of c's 10 prompt tokens: the budget is 8
    assert out.scheduled == {a.request_id: 1, b.request_id: 1, c.request_id: 6} and out.budget_left == 0
    assert loop.step().scheduled[c.request_id] == 4  # the rest of its prompt, beside the decodes


def test_without_chunked_prefill_a_prompt_over_what_is_left_waits_whole():
    loop = Loop(max_num_batched_tokens=8, enable_chunked_prefill=False)
    loop.add(3)
    loop.step()
    big = loop.add(8)
    out = loop.step()
    assert big.request_id not in out.scheduled and loop.kinds(out, "blocked") == [big.request_id]
    assert "chunked prefill is off" in out.events[-1].reason


def test_the_chunk_cap_applies_only_while_another_request_could_use_the_budget():
    loop = Loop(max_num_batched_tokens=16, long_prefill_token_threshold=4)
    alone = loop.add(12)
    assert loop.step().scheduled == {alone.request_id: 12}
    loop.add(12)
    loop.add(12)
    assert list(loop.step().scheduled.values()) == [1, 4, 4]


def test_the_sequence_cap_blocks_admission_and_says_so():
    loop = Loop(max_num_seqs=2)
    loop.add(3)
    loop.add(3)
    third = loop.add(3)
    out = loop.step()
    assert third.request_id not in out.scheduled
    blocked = [e for e in out.events if e.kind == "blocked"]
    assert blocked[0].request_id == third.request_id and blocked[0].data["limit"] == "seq_cap"


def test_a_waiting_request_needs_pages_for_its_whole_sequence_not_only_its_chunk():
    loop = Loop(num_gpu_blocks=4, max_num_batched_tokens=5)
    loop.add(8)  # two pages, computed over two steps (5 tokens, then 3)
    second = loop.add(9)  # three pages: two are left, though the 2 tokens the budget leaves would fit in one
    loop.step()
    out = loop.step()
    assert second.request_id not in out.scheduled
    assert any(e.request_id == second.request_id and "KV pages" in e.reason for e in out.events)


def test_out_of_pages_the_newest_running_request_is_recomputed_and_its_tokens_given_back():
    loop = Loop(num_gpu_blocks=3, max_num_batched_tokens=16)
    first, second = loop.add(4, max_tokens=8), loop.add(4, max_tokens=8)
    loop.step()  # one page each, and each sampled a token: the next decode needs a second page each
    out = loop.step()
    assert loop.kinds(out, "preempted") == [second.request_id] and "admitted last" in out.events[0].reason
    assert out.scheduled == {first.request_id: 1} and out.budget_left == 15  # second's token was refunded
    assert second.status == RequestStatus.WAITING and second.num_computed_tokens == 0
    assert loop.scheduler.waiting.peek() is second  # back at the front: it has waited longest
    assert loop.scheduler.counters["num_preemptions"] == 1


def test_with_swap_the_victims_pages_go_to_the_cpu_and_come_back_when_there_is_room():
    loop = Loop(num_gpu_blocks=3, num_cpu_blocks=4, max_num_batched_tokens=16, preemption_mode="swap")
    loop.add(4, max_tokens=8)
    second = loop.add(4, max_tokens=2)
    loop.step()
    out = loop.step()
    assert loop.kinds(out, "swapped_out") == [second.request_id] and second.status == RequestStatus.SWAPPED
    assert out.swaps[0][0] == "out" and loop.blocks.num_cpu_used == 1
    while second.status == RequestStatus.SWAPPED:
        out = loop.step()
    assert loop.kinds(out, "swapped_in") == [second.request_id] and second.num_computed_tokens > 0
    assert loop.scheduler.counters["num_swapped_blocks"] == 2  # one page out, one page back in


@pytest.mark.parametrize("priorities, arrival_steps", [
    ((1, 0), (0, 0)),  # the lowest priority goes, though it was added first
    ((0, 0), (5, 2)),  # equals: the latest to reach the engine goes, though it was added first
])
def test_under_priority_the_victim_is_the_lowest_priority_then_the_latest_arrival(priorities, arrival_steps):
    loop = Loop(num_gpu_blocks=3, max_num_batched_tokens=16, scheduling_policy="priority")
    victim, kept = (loop.add(4, max_tokens=8, priority=p, arrival_step=a)
                    for p, a in zip(priorities, arrival_steps, strict=True))
    loop.step()
    out = loop.step()
    assert loop.kinds(out, "preempted") == [victim.request_id] and kept.request_id in out.scheduled


def test_priority_ties_go_to_the_earlier_arrival_not_the_earlier_add():
    """vLLM orders its priority queue by (priority, arrival_time): a request added later that reached
    the engine first is served first."""
    loop = Loop(max_num_seqs=1, scheduling_policy="priority")
    late, early = loop.add(3, arrival_step=5), loop.add(3, arrival_step=2)
    assert list(loop.scheduler.waiting) == [early, late]
    assert loop.step().scheduled == {early.request_id: 3}


def test_fewest_generated_retracts_the_request_that_has_written_the_least():
    loop = Loop(num_gpu_blocks=4, max_num_batched_tokens=16, victim_rule="fewest_generated")
    old = loop.add(4, max_tokens=12)
    loop.step()
    loop.step()  # old has two tokens now
    new = loop.add(4, max_tokens=12)
    while new.num_preemptions == 0 and old.num_preemptions == 0:
        loop.step()
    assert new.num_preemptions == 1 and old.num_preemptions == 0


def test_a_v0_style_priority_request_evicts_lower_priority_work_for_a_seat():
    loop = Loop(max_num_seqs=1, scheduling_policy="priority", preempt_on_admission=True)
    low = loop.add(3, priority=1)
    loop.step()
    urgent = loop.add(3, priority=0)
    out = loop.step()
    assert loop.kinds(out, "preempted") == [low.request_id] and urgent.request_id in out.scheduled
    assert "outranks it" in next(e.reason for e in out.events if e.kind == "preempted")


def test_prefix_cache_lookups_are_counted_apart_for_new_and_preempted_requests():
    loop = Loop(enable_prefix_caching=True)
    loop.add(9)
    loop.step()
    again = loop.add(9)  # the same prompt: two full pages are found
    again.prompt_token_ids = list(loop.requests[0].prompt_token_ids)
    loop.step()
    counters = loop.scheduler.counters
    assert counters["prefix_cache_queries"] == 18 and counters["prefix_cache_hits"] == 8
    assert counters["preempted_prefix_cache_queries"] == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=12), st.lists(st.integers(0, 9), max_size=12), st.integers(0, 30),
       st.integers(0, 30))
def test_a_slice_of_a_requests_tokens_is_the_slice_of_its_whole_list(prompt, output, start, end):
    """Request.token_ids(start, end), which the forward pass and the block map read without building the
    whole token list, is all_token_ids[start:end] for every slice, inside the sequence or past its end."""
    req = Request("r0", prompt, SamplingParams(), output_token_ids=output)
    assert req.token_ids(start, end) == req.all_token_ids[start:end]
