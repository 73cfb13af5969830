"""The GPU pool's pages: who references each one, and which are free, in the order they are reused.

One free queue serves every free page. Pages holding no cached prefix are put at its head
(reused first); pages still naming a cached prefix ("cached-free") at its tail, so cached
prefixes are evicted least recently freed first, as in vLLM v1's free block queue.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: str | None = None  # the prefix it holds, while named (engine/kv/prefix_cache.py)
    token_ids: tuple[int, ...] = ()  # kept while named, so a cached-free page can still be drawn
    first_position: int = 0
    text: str | None = None  # token_ids decoded, filled the first time the page is drawn


class PagePool:
    def __init__(self, num_blocks: int, on_reuse: Callable[[Block], None]):
        self.blocks = [Block(i) for i in range(num_blocks)]
        # Head is taken next. Freed pages join the tail, so cached prefixes live as long as possible.
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.num_cached_free = 0  # kept by every ref-count change, so accounting never scans the pool
        self._on_reuse = on_reuse  # a named page taken for new tokens: its cached prefix is evicted

    @property
    def num_free(self) -> int:
        """Free pages, counting cached-free ones: they can be evicted on demand."""
        return len(self.free_queue)

    def take(self, n: int) -> list[int]:
        """n free pages from the head of the queue, anywhere in the pool (paged allocation)."""
        return [self._pop(next(iter(self.free_queue))) for _ in range(n)]

    def take_run(self, n: int) -> list[int] | None:
        """n adjacent free pages, the first such run (contiguous allocation); None if there is none."""
        for end, run in self._free_run_ends():
            if run == n:
                return [self._pop(b) for b in range(end - n + 1, end + 1)]
        return None

    def largest_free_run(self) -> int:
        """Longest run of adjacent free pages: all a contiguous reservation can use."""
        return max((run for _, run in self._free_run_ends()), default=0)

    def _free_run_ends(self):
        """(end, length) at every page of the pool, where length counts the free pages ending there."""
        run = 0
        for i in range(len(self.blocks)):
            run = run + 1 if i in self.free_queue else 0
            yield i, run

    def _pop(self, block_id: int) -> int:
        del self.free_queue[block_id]
        block = self.blocks[block_id]
        if block.block_hash is not None:  # reusing a cached-free page evicts its prefix
            self._on_reuse(block)
            block.block_hash, block.token_ids, block.text = None, (), None
            self.num_cached_free -= 1
        return block_id

    def ref(self, block_id: int) -> None:
        """One more request holds the page (a cached-free page is taken back into use)."""
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self.free_queue.pop(block_id, None)
            if block.block_hash is not None:
                self.num_cached_free -= 1
        block.ref_count += 1

    def release(self, table: list[int]) -> int:
        """Drop one reference to each page of a block table; returns how many pages became free.

        Pages are released last-first so the tail of a prompt, the part least likely to be
        shared, is evicted before its head; unnamed pages go to the head of the queue, the tail
        page first, so they are reused before any cached prefix."""
        freed, unnamed = 0, []
        for b in reversed(table):
            block = self.blocks[b]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue[b] = None
                freed += 1
                if block.block_hash is not None:
                    self.num_cached_free += 1
                else:
                    unnamed.append(b)
        for b in reversed(unnamed):
            self.free_queue.move_to_end(b, last=False)
        return freed
