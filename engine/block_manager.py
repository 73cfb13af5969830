"""The KV block manager: which pages of the KV pool belong to which request.

It owns bookkeeping only; the tensors live in ``kv_cache.KVCache`` and are
indexed by the block ids handed out here. Paged allocation gives a request one
more page whenever its tokens outgrow the last one, from anywhere in the pool.
Contiguous allocation is the pre-PagedAttention baseline: one unbroken run of
pages, sized for the longest the request could ever get, reserved at admission.

With prefix caching, every full page is named by a hash chained over its parent
page's hash and its own tokens, so equal prefixes get equal names and a new
request can reuse them. As in vLLM v1, a page is named when it is allocated (its
tokens are known before they are computed), so two requests admitted in the same
step already share their common prefix. A freed page keeps its name (it is
"cached-free") until the allocator needs the space and evicts it. One free queue
serves both kinds: pages with no name are put at its head (reused first), named
ones at its tail, so cached prefixes are evicted least recently freed first.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from engine.config import EngineConfig
from engine.records import BlockState
from engine.request import Request


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: str | None = None
    token_ids: tuple[int, ...] = ()  # kept while hashed, so a cached-free page can still be drawn
    first_position: int = 0
    text: str | None = None  # token_ids decoded, filled the first time the page is drawn


def chain_hash(parent: str | None, token_ids: tuple[int, ...]) -> str:
    data = (parent or "").encode() + b"|" + ",".join(map(str, token_ids)).encode()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class BlockManager:
    def __init__(self, config: EngineConfig):
        self.block_size = config.block_size
        self.num_gpu_blocks = config.num_gpu_blocks
        self.num_cpu_blocks = config.num_cpu_blocks
        self.contiguous = config.kv_allocation == "contiguous"
        self.prefix_caching = config.enable_prefix_caching
        self.blocks = [Block(i) for i in range(config.num_gpu_blocks)]
        # Head is allocated next. Freed pages join the tail, so cached prefixes live as long as possible.
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(config.num_gpu_blocks))
        # prefix hash -> the pages holding it, oldest first (two requests can compute equal pages apart).
        self.cached: dict[str, dict[int, None]] = {}
        # Kept up to date by every ref-count change, so accounting never scans the pool or the cache.
        self._num_cached_free = 0
        self.req_blocks: dict[str, list[int]] = {}
        self.req_hashes: dict[str, list[str]] = {}
        self.req_num_hashed: dict[str, int] = {}
        self.cpu_free: list[int] = list(range(config.num_cpu_blocks))  # a heap: lowest id is taken first
        self.cpu_req_blocks: dict[str, list[int]] = {}
        self._evictions: list[tuple[int, str]] = []  # (block id, hash) since the scheduler last took them
        # Drawn text of each request's pages: (tokens held, text) by page index. Tokens at a position
        # never change, so a page is decoded again only while it is filling.
        self._page_texts: dict[str, dict[int, tuple[int, str]]] = {}

    # ---- accounting -------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Free pages, counting cached-free ones: they can be evicted on demand."""
        return len(self.free_queue)

    @property
    def num_cached_free_blocks(self) -> int:
        """Free pages that still hold a cached prefix."""
        return self._num_cached_free

    @property
    def num_cpu_used(self) -> int:
        return self.num_cpu_blocks - len(self.cpu_free)

    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_gpu_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_table(self, request_id: str) -> list[int]:
        return self.req_blocks.get(request_id, [])

    # ---- prefix cache -----------------------------------------------------------------------

    def _full_block_hashes(self, req: Request) -> list[str]:
        """Hashes of the request's full pages, extended incrementally as it grows."""
        hashes = self.req_hashes.setdefault(req.request_id, [])
        tokens = req.all_token_ids
        bs = self.block_size
        for i in range(len(hashes), len(tokens) // bs):
            hashes.append(chain_hash(hashes[-1] if hashes else None, tuple(tokens[i * bs:(i + 1) * bs])))
        return hashes

    def find_prefix_hit(self, req: Request) -> list[int]:
        """Cached pages matching the request's leading full pages.

        At least one token is always left to compute: the forward pass must run on
        the last token to produce the next one.
        """
        if not self.prefix_caching:
            return []
        hit = []
        limit = (req.num_tokens - 1) // self.block_size
        for h in self._full_block_hashes(req)[:limit]:
            if h not in self.cached:
                break
            hit.append(next(iter(self.cached[h])))
        return hit

    def cache_full_blocks(self, req: Request, num_tokens: int) -> None:
        """Name each page that the request's first num_tokens tokens fill, so others can share it."""
        if not self.prefix_caching:
            return
        rid = req.request_id
        table = self.req_blocks[rid]
        start = self.req_num_hashed.get(rid, 0)
        end = min(num_tokens // self.block_size, len(table))
        if end <= start:  # most steps: a decode that filled no page (building the token list costs O(length))
            return
        hashes = self._full_block_hashes(req)
        tokens = req.all_token_ids
        for i in range(start, end):
            block = self.blocks[table[i]]
            if block.block_hash is None:
                self.cached.setdefault(hashes[i], {})[block.block_id] = None
                block.block_hash = hashes[i]
                block.token_ids = tuple(tokens[i * self.block_size:(i + 1) * self.block_size])
                block.first_position = i * self.block_size
        self.req_num_hashed[rid] = end

    # ---- allocation -------------------------------------------------------------------------

    def pages_to_take(self, req: Request, num_new_tokens: int, hit_blocks: list[int] = ()) -> int:
        """Free pages that allocate() would consume: new pages, plus cached-free hits it revives."""
        return self._new_pages(req, num_new_tokens, hit_blocks) + \
            sum(1 for b in hit_blocks if self.blocks[b].ref_count == 0)

    def _new_pages(self, req: Request, num_new_tokens: int, hit_blocks: list[int]) -> int:
        table = self.req_blocks.get(req.request_id, [])
        if self.contiguous:
            return 0 if table else self.blocks_needed(req.max_total_tokens)
        total = req.num_computed_tokens + len(hit_blocks) * self.block_size + num_new_tokens
        return max(0, self.blocks_needed(total) - len(table) - len(hit_blocks))

    def allocate(self, req: Request, num_new_tokens: int, hit_blocks: list[int] = (),
                 reserve: int = 0) -> bool:
        """Make the request's block table cover its computed tokens plus num_new_tokens.

        hit_blocks are prefix-cache pages it takes over at admission; reserve is how
        many free pages must remain afterwards (the watermark). Returns False, and
        changes nothing, when the pool cannot cover it.
        """
        if self.pages_to_take(req, num_new_tokens, hit_blocks) > self.num_free_blocks - reserve:
            return False
        num_new = self._new_pages(req, num_new_tokens, hit_blocks)
        for b in hit_blocks:  # taken first, so allocating new pages cannot evict them
            self._ref(b)
        new_ids = self._take(num_new) if num_new else []
        if new_ids is None:  # only contiguous allocation can fail here: no run long enough
            return False
        for b in new_ids:
            self._ref(b)
        self.req_blocks[req.request_id] = self.req_blocks.get(req.request_id, []) + list(hit_blocks) + new_ids
        self.cache_full_blocks(req, min(req.num_tokens, req.num_computed_tokens + len(hit_blocks) * self.block_size
                                        + num_new_tokens))
        return True

    def _free_run_ends(self):
        """(end, length) at every page of the pool, where length counts the free pages ending there."""
        run = 0
        for i in range(self.num_gpu_blocks):
            run = run + 1 if i in self.free_queue else 0
            yield i, run

    def largest_free_run(self) -> int:
        """Longest run of adjacent free pages: all a contiguous reservation can use."""
        return max((run for _, run in self._free_run_ends()), default=0)

    def _take(self, n: int) -> list[int] | None:
        if not self.contiguous:
            return [self._pop(next(iter(self.free_queue))) for _ in range(n)]
        for end, run in self._free_run_ends():  # first fit
            if run == n:
                return [self._pop(b) for b in range(end - n + 1, end + 1)]
        return None

    def _pop(self, block_id: int) -> int:
        del self.free_queue[block_id]
        block = self.blocks[block_id]
        if block.block_hash is not None:  # reusing a cached-free page evicts its prefix
            self._evictions.append((block_id, block.block_hash))
            holders = self.cached[block.block_hash]
            del holders[block_id]
            if not holders:
                del self.cached[block.block_hash]
            block.block_hash, block.token_ids, block.text = None, (), None
            self._num_cached_free -= 1
        return block_id

    def _ref(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self.free_queue.pop(block_id, None)
            if block.block_hash is not None:  # a cached-free page taken back into use
                self._num_cached_free -= 1
        block.ref_count += 1

    def free(self, req: Request) -> int:
        """Drop the request's references; returns how many pages became free.

        Pages are released last-first so the tail of a prompt, the part least likely
        to be shared, is evicted before its head; unnamed pages go to the head of the
        queue, the tail page first, so they are reused before any cached prefix.
        """
        freed, unnamed = 0, []
        for b in reversed(self.req_blocks.pop(req.request_id, [])):
            block = self.blocks[b]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue[b] = None
                freed += 1
                if block.block_hash is not None:
                    self._num_cached_free += 1
                else:
                    unnamed.append(b)
        for b in reversed(unnamed):
            self.free_queue.move_to_end(b, last=False)
        self.req_num_hashed.pop(req.request_id, None)
        return freed

    def take_evictions(self) -> list[tuple[int, str]]:
        """The (page, prefix hash) pairs whose cached prefix was overwritten since the last call."""
        evictions, self._evictions = self._evictions, []
        return evictions

    def forget(self, req: Request) -> None:
        """Drop the request's cached hashes once it can never be scheduled again."""
        self.req_hashes.pop(req.request_id, None)
        self._page_texts.pop(req.request_id, None)

    # ---- swapping ---------------------------------------------------------------------------

    def swap_out(self, req: Request) -> list[tuple[int, int]] | None:
        """Move the request's pages to the CPU pool: returns (gpu, cpu) pairs to copy, or None if full."""
        table = self.req_blocks[req.request_id]
        if len(table) > len(self.cpu_free):
            return None
        cpu_ids = [heapq.heappop(self.cpu_free) for _ in table]
        self.cpu_req_blocks[req.request_id] = cpu_ids
        pairs = list(zip(table, cpu_ids, strict=True))
        self.free(req)
        return pairs

    def swap_in(self, req: Request, reserve: int = 0) -> list[tuple[int, int]] | None:
        """Bring swapped pages back: returns (cpu, gpu) pairs to copy, or None if the pool is short."""
        cpu_ids = self.cpu_req_blocks[req.request_id]
        if len(cpu_ids) > self.num_free_blocks - reserve:
            return None
        gpu_ids = self._take(len(cpu_ids))
        if gpu_ids is None:
            return None
        for b in gpu_ids:
            self._ref(b)
        self.req_blocks[req.request_id] = gpu_ids
        del self.cpu_req_blocks[req.request_id]
        for c in cpu_ids:
            heapq.heappush(self.cpu_free, c)
        self.cache_full_blocks(req, req.num_computed_tokens)
        return list(zip(cpu_ids, gpu_ids, strict=True))

    # ---- drawing ----------------------------------------------------------------------------

    def snapshot(self, requests: dict[str, Request], text_of: Callable[[list[int]], str]) -> list[BlockState]:
        """Every non-free page, built from live bookkeeping: the cost grows with the pages shown
        (in use or cached), never with the pool, and only pages still filling are decoded again."""
        states: dict[tuple[str, int], BlockState] = {}
        for device, tables in (("gpu", self.req_blocks), ("cpu", self.cpu_req_blocks)):
            for rid, table in tables.items():
                self._snapshot_table(states, device, requests[rid], table, text_of)
        for h, holders in self.cached.items():
            for b in holders:
                block = self.blocks[b]
                if block.ref_count == 0:
                    if block.text is None:
                        block.text = text_of(list(block.token_ids))
                    states[("gpu", b)] = BlockState(
                        block_id=b, device="gpu", state="cached", owners=[], ref_count=0, prefix_hash=h,
                        first_position=block.first_position, num_tokens=len(block.token_ids), text=block.text)
        return sorted(states.values(), key=lambda s: (s.device != "gpu", s.block_id))

    def _snapshot_table(self, states: dict[tuple[str, int], BlockState], device: str, req: Request,
                        table: list[int], text_of: Callable[[list[int]], str]) -> None:
        """One request's pages on one device; a page it shares with a request already drawn gains an owner."""
        bs = self.block_size
        texts = self._page_texts.setdefault(req.request_id, {})
        tokens = None  # the request's token list, built only if a page must be decoded
        for i, b in enumerate(table):
            key = (device, b)
            if key in states:
                states[key].owners.append(req.request_id)
                continue
            first = i * bs
            held = max(0, min(bs, req.num_computed_tokens - first))
            if texts.get(i, (None,))[0] != held:
                if tokens is None:
                    tokens = req.all_token_ids
                texts[i] = (held, text_of(tokens[first:first + held]))
            block = self.blocks[b] if device == "gpu" else None
            states[key] = BlockState(
                block_id=b, device=device, state="used", owners=[req.request_id],
                ref_count=block.ref_count if block else 1, prefix_hash=block.block_hash if block else None,
                first_position=first, num_tokens=held, text=texts[i][1])
