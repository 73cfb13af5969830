"""The KV block manager: which pages of the KV pool belong to which request.

It answers the scheduler's questions (how many pages does this need, is a prefix
cached, can it be allocated, free, swapped out or in) and owns bookkeeping only;
the tensors live in ``kv_cache.KVCache``, indexed by the block ids handed out
here. It puts together the page pool (engine/kv/page_pool.py), the prefix cache
(prefix_cache.py) and the CPU swap space (swap_space.py).

Paged allocation gives a request one more page whenever its tokens outgrow the
last one, from anywhere in the pool. Contiguous allocation is the pre-PagedAttention
baseline: one unbroken run of pages, sized for the longest the request could ever
get, reserved at admission.
"""

from __future__ import annotations

from engine.config import EngineConfig
from engine.kv.page_pool import PagePool
from engine.kv.prefix_cache import PrefixCache
from engine.kv.swap_space import SwapSpace
from engine.request import Request


class BlockManager:
    def __init__(self, config: EngineConfig):
        self.block_size = config.block_size
        self.num_gpu_blocks = config.num_gpu_blocks
        self.contiguous = config.kv_allocation == "contiguous"
        self.prefix = PrefixCache(config.block_size, config.enable_prefix_caching)
        self.pool = PagePool(config.num_gpu_blocks, on_reuse=self.prefix.evict)
        self.swap = SwapSpace(config.num_cpu_blocks)
        self.req_blocks: dict[str, list[int]] = {}  # each request's block table on the GPU

    # ---- how much ---------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Free pages, counting cached-free ones: they can be evicted on demand."""
        return self.pool.num_free

    @property
    def num_cached_free_blocks(self) -> int:
        """Free pages that still hold a cached prefix."""
        return self.pool.num_cached_free

    @property
    def num_cpu_used(self) -> int:
        return self.swap.num_used

    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_gpu_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_table(self, request_id: str) -> list[int]:
        return self.req_blocks.get(request_id, [])

    def num_held(self, request_id: str) -> int:
        """The pages a request holds, on the GPU or, swapped out, on the CPU."""
        return len(self.block_table(request_id)) or len(self.swap.tables.get(request_id, []))

    def largest_free_run(self) -> int:
        return self.pool.largest_free_run()

    def ref_count(self, block_id: int) -> int:
        return self.pool.blocks[block_id].ref_count

    # ---- allocation -------------------------------------------------------------------------

    def find_prefix_hit(self, req: Request) -> list[int]:
        """Cached pages matching the request's leading full pages (none without prefix caching)."""
        return self.prefix.find_hit(req)

    def pages_to_take(self, req: Request, num_new_tokens: int, hit_blocks: list[int] = ()) -> int:
        """Free pages that allocate() would consume: new pages, plus cached-free hits it revives."""
        return self._new_pages(req, num_new_tokens, hit_blocks) + \
            sum(1 for b in hit_blocks if self.ref_count(b) == 0)

    def _new_pages(self, req: Request, num_new_tokens: int, hit_blocks: list[int]) -> int:
        table = self.block_table(req.request_id)
        if self.contiguous:
            return 0 if table else self.blocks_needed(req.max_total_tokens)
        total = req.num_computed_tokens + len(hit_blocks) * self.block_size + num_new_tokens
        return max(0, self.blocks_needed(total) - len(table) - len(hit_blocks))

    def allocate(self, req: Request, num_new_tokens: int, hit_blocks: list[int] = ()) -> bool:
        """Make the request's block table cover its computed tokens plus num_new_tokens.

        hit_blocks are prefix-cache pages it takes over at admission. Returns False, and
        changes nothing, when the pool cannot cover it."""
        if self.pages_to_take(req, num_new_tokens, hit_blocks) > self.num_free_blocks:
            return False
        num_new = self._new_pages(req, num_new_tokens, hit_blocks)
        for b in hit_blocks:  # taken first, so allocating new pages cannot evict them
            self.pool.ref(b)
        new_ids = self._take(num_new) if num_new else []
        if new_ids is None:  # only contiguous allocation can fail here: no run long enough
            return False
        for b in new_ids:
            self.pool.ref(b)
        self.req_blocks[req.request_id] = self.block_table(req.request_id) + list(hit_blocks) + new_ids
        self.name_full_pages(req, min(req.num_tokens, req.num_computed_tokens + len(hit_blocks) * self.block_size
                                       + num_new_tokens))
        return True

    def _take(self, n: int) -> list[int] | None:
        return self.pool.take_run(n) if self.contiguous else self.pool.take(n)

    def name_full_pages(self, req: Request, num_tokens: int) -> None:
        """Name (for the prefix cache) each of its pages that its first num_tokens tokens fill."""
        self.prefix.name_full_pages(req, self.req_blocks[req.request_id], self.pool.blocks, num_tokens)

    def free(self, req: Request) -> int:
        """Drop the request's references; returns how many pages became free."""
        table = self.req_blocks.pop(req.request_id, [])
        self.prefix.unname_uncomputed(req, table, self.pool.blocks)
        freed = self.pool.release(table)
        self.prefix.released(req.request_id)
        return freed

    def take_evictions(self) -> list[tuple[int, str]]:
        """The (page, prefix hash) pairs whose cached prefix was overwritten since the last call."""
        return self.prefix.take_evictions()

    def forget(self, req: Request) -> None:
        """Drop the request's cached hashes once it can never be scheduled again."""
        self.prefix.forget(req.request_id)

    # ---- swapping ---------------------------------------------------------------------------

    def swap_out(self, req: Request) -> list[tuple[int, int]] | None:
        """Move the request's pages to the CPU swap space: returns (gpu, cpu) pairs to copy, or
        None if the space is full."""
        table = self.req_blocks[req.request_id]
        cpu_ids = self.swap.hold(req.request_id, len(table))
        if cpu_ids is None:
            return None
        pairs = list(zip(table, cpu_ids, strict=True))
        self.free(req)
        return pairs

    def swap_in(self, req: Request, reserve: int = 0) -> list[tuple[int, int]] | None:
        """Bring swapped pages back, leaving `reserve` pages free for the step's new tokens: returns
        (cpu, gpu) pairs to copy, or None if the pool is short."""
        num_pages = len(self.swap.tables[req.request_id])
        if num_pages > self.num_free_blocks - reserve:
            return None
        gpu_ids = self._take(num_pages)
        if gpu_ids is None:
            return None
        for b in gpu_ids:
            self.pool.ref(b)
        self.req_blocks[req.request_id] = gpu_ids
        cpu_ids = self.swap.release(req.request_id)
        self.name_full_pages(req, req.num_computed_tokens)
        return list(zip(cpu_ids, gpu_ids, strict=True))
