"""The block manager on its own, with no model: each of the scheduler's questions answered as the
pool, the prefix cache and the swap space say, and the bookkeeping consistent after any sequence
of calls."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.block_manager import BlockManager
from engine.config import EngineConfig, SamplingParams
from engine.request import Request, request_id


def manager(**knobs) -> BlockManager:
    return BlockManager(EngineConfig(model="stub", **{"block_size": 4, "num_gpu_blocks": 8, **knobs}))


def request(i: int, tokens: list[int], max_tokens: int = 4) -> Request:
    return Request(request_id(i), list(tokens), SamplingParams(max_tokens=max_tokens), arrival_index=i)


def test_paged_allocation_takes_a_page_when_the_tokens_outgrow_the_last_one():
    bm, req = manager(), request(0, range(6))
    assert bm.pages_to_take(req, 6) == 2 and bm.allocate(req, 6)
    assert len(bm.block_table(req.request_id)) == 2 and bm.num_free_blocks == 6
    req.num_computed_tokens = 6
    assert bm.pages_to_take(req, 2) == 0 and bm.allocate(req, 2)  # tokens 6 and 7 fit the second page
    req.num_computed_tokens = 8
    assert bm.pages_to_take(req, 1) == 1 and bm.allocate(req, 1)
    assert len(bm.block_table(req.request_id)) == 3 and bm.usage() == 3 / 8


def test_an_allocation_that_does_not_fit_changes_nothing():
    bm, big = manager(), request(0, range(40))
    assert bm.pages_to_take(big, 40) == 10 > bm.num_free_blocks
    assert not bm.allocate(big, 40)
    assert bm.block_table(big.request_id) == [] and bm.num_free_blocks == 8


def test_freed_pages_come_back_and_unnamed_ones_are_reused_first():
    bm = manager()
    first, second = request(0, range(8)), request(1, range(100, 108))
    bm.allocate(first, 8)
    bm.allocate(second, 8)
    freed_table = list(bm.block_table(first.request_id))
    assert bm.free(first) == 2 and bm.num_free_blocks == 6
    third = request(2, range(200, 204))
    bm.allocate(third, 4)
    # Freed last-first and put at the head of the queue: the table's tail page is reused at once.
    assert bm.block_table(third.request_id) == [freed_table[-1]]


def test_a_shared_prefix_is_found_named_and_reused_and_one_token_is_always_left_to_compute():
    bm = manager(enable_prefix_caching=True)
    first = request(0, list(range(8)) + [50])
    assert bm.find_prefix_hit(first) == [] and bm.allocate(first, 9)
    second = request(1, list(range(8)) + [60, 61])
    hit = bm.find_prefix_hit(second)
    assert hit == bm.block_table(first.request_id)[:2]
    exact = request(2, list(range(8)))  # equal to the two pages: the last page must be computed again
    assert bm.find_prefix_hit(exact) == bm.block_table(first.request_id)[:1]
    assert bm.pages_to_take(second, 2, hit) == 1 and bm.allocate(second, 2, hit)
    assert [bm.ref_count(b) for b in hit] == [2, 2]


def test_a_freed_named_page_stays_cached_until_the_pool_reuses_it():
    bm = manager(num_gpu_blocks=4, enable_prefix_caching=True)
    first = request(0, list(range(8)) + [9])
    bm.allocate(first, 9)
    named = bm.block_table(first.request_id)[:2]
    first.num_computed_tokens = 9  # the step computed them
    bm.free(first)
    assert bm.num_free_blocks == 4 and bm.num_cached_free_blocks == 2
    assert bm.find_prefix_hit(request(1, list(range(8)) + [7])) == named  # found again while cached-free
    filler = request(2, range(100, 116))
    bm.allocate(filler, 16)  # needs every page: the cached ones are evicted, oldest freed first
    assert bm.num_cached_free_blocks == 0
    assert sorted(block for block, _ in bm.take_evictions()) == sorted(named) and bm.take_evictions() == []


def test_a_contiguous_reservation_needs_adjacent_pages_for_the_longest_the_request_can_grow():
    bm = manager(kv_allocation="contiguous")
    a, b, c = request(0, range(4), max_tokens=4), request(1, range(4), max_tokens=4), request(2, range(4), 4)
    for req in (a, b, c):
        assert bm.allocate(req, 4)
        assert len(bm.block_table(req.request_id)) == 2  # 4 prompt + 4 output tokens, reserved at once
    bm.free(b)  # a hole of two pages between a and c, and two free pages after c
    assert bm.num_free_blocks == 4 and bm.largest_free_run() == 2
    wide = request(3, range(8), max_tokens=4)  # needs 3 adjacent pages: 4 are free, in runs of 2
    assert not bm.allocate(wide, 8) and bm.block_table(wide.request_id) == []


def test_swap_out_and_in_copy_every_page_and_keep_the_cpu_space_accounted():
    bm = manager(num_cpu_blocks=2)
    req = request(0, range(8))
    bm.allocate(req, 8)
    gpu = list(bm.block_table(req.request_id))
    out = bm.swap_out(req)
    assert [g for g, _ in out] == gpu and bm.num_cpu_used == 2 and bm.num_free_blocks == 8
    assert bm.num_held(req.request_id) == 2
    back = bm.swap_in(req)
    assert [c for c, _ in back] == [c for _, c in out] and bm.num_cpu_used == 0
    assert len(bm.block_table(req.request_id)) == 2


def test_swap_out_with_the_cpu_space_full_changes_nothing():
    bm = manager(num_cpu_blocks=1)
    req = request(0, range(8))
    bm.allocate(req, 8)
    table = list(bm.block_table(req.request_id))
    assert bm.swap_out(req) is None
    assert bm.block_table(req.request_id) == table and bm.num_cpu_used == 0


def check(bm: BlockManager) -> None:
    """Every page's reference count is its owners', and the free queue and the cache agree with it."""
    owners = Counter(b for table in bm.req_blocks.values() for b in table)
    for block in bm.pool.blocks:
        assert block.ref_count == owners.get(block.block_id, 0)
        assert (block.block_id in bm.pool.free_queue) == (block.ref_count == 0)
    cached_free = sum(b.ref_count == 0 and b.block_hash is not None for b in bm.pool.blocks)
    assert bm.num_cached_free_blocks == cached_free
    for h, holders in bm.prefix.cached.items():
        assert holders and all(bm.pool.blocks[b].block_hash == h for b in holders)
    held = [c for table in bm.swap.tables.values() for c in table]
    assert sorted(held + bm.swap.free) == list(range(bm.swap.num_blocks))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["grow", "free", "swap"]), st.integers(0, 5), st.integers(1, 9)),
                max_size=40), st.booleans(), st.booleans())
def test_any_sequence_of_calls_keeps_the_books(ops, prefix_caching, contiguous):
    bm = manager(num_gpu_blocks=12, num_cpu_blocks=6, enable_prefix_caching=prefix_caching and not contiguous,
                 kv_allocation="contiguous" if contiguous else "paged")
    # Six requests over three prompts, so prefixes repeat.
    reqs = [request(i, [i % 3] * 5 + list(range(i % 3, 7)), max_tokens=8) for i in range(6)]
    where = dict.fromkeys(range(6), "new")
    for op, i, n in ops:
        req = reqs[i]
        if op == "grow" and where[i] in ("new", "gpu"):
            hit = bm.find_prefix_hit(req) if where[i] == "new" else []
            if where[i] == "new":
                req.num_computed_tokens = len(hit) * bm.block_size
            n = min(n, req.num_tokens - req.num_computed_tokens) or 1
            if bm.allocate(req, n, hit):
                req.num_computed_tokens = min(req.num_tokens, req.num_computed_tokens + n)
                where[i] = "gpu"
        elif op == "free" and where[i] == "gpu":
            bm.free(req)
            where[i], req.num_computed_tokens = "new", 0
        elif op == "swap" and where[i] == "gpu" and bm.swap_out(req) is not None:
            where[i] = "cpu"
        elif op == "swap" and where[i] == "cpu" and bm.swap_in(req) is not None:
            where[i] = "gpu"
        check(bm)


def test_pages_named_for_a_chunk_that_never_ran_are_not_cached_when_freed():
    """A request preempted in the step that allocated its chunk: its pages were named for tokens it
    never computed, and must not be found as a cached prefix (greedy tokens once differed from generate)."""
    bm = manager(num_gpu_blocks=4, enable_prefix_caching=True)
    first = request(0, list(range(8)) + [9])
    bm.allocate(first, 9)
    named = bm.block_table(first.request_id)[:2]
    first.num_computed_tokens = 4  # one page computed before; the second was named for this step's chunk
    bm.free(first)
    assert bm.num_free_blocks == 4 and bm.num_cached_free_blocks == 1
    assert bm.find_prefix_hit(request(1, list(range(8)) + [7])) == named[:1]
