"""The prefix cache: full pages named by their tokens, so a new request can reuse equal prefixes.

Every full page is named by a hash chained over its parent page's hash and its own tokens,
so equal prefixes get equal names. As in vLLM v1, a page is named when it is allocated (its
tokens are known before they are computed), so two requests admitted in the same step already
share their common prefix. A freed page keeps its name ("cached-free") until the pool reuses
it for other tokens, which evicts the prefix.
"""

from __future__ import annotations

import hashlib

from engine.kv.page_pool import Block
from engine.request import Request


def chain_hash(parent: str | None, token_ids: tuple[int, ...]) -> str:
    data = (parent or "").encode() + b"|" + ",".join(map(str, token_ids)).encode()
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def page_hashes(token_ids: list[int], block_size: int, hashes: list[str] | None = None) -> list[str]:
    """The names of the full pages of these tokens, each chained over the one before: `hashes`, the
    names of a leading part already known, is extended in place (a request grows a token a step).
    A fleet's router asks the same question of a prompt before any replica holds it."""
    hashes = [] if hashes is None else hashes
    for i in range(len(hashes), len(token_ids) // block_size):
        hashes.append(chain_hash(hashes[-1] if hashes else None, tuple(token_ids[i * block_size:(i + 1) * block_size])))
    return hashes


class PrefixCache:
    def __init__(self, block_size: int, enabled: bool):
        self.block_size = block_size
        self.enabled = enabled
        # prefix hash -> the pages holding it, oldest first (two requests can compute equal pages apart).
        self.cached: dict[str, dict[int, None]] = {}
        self.req_hashes: dict[str, list[str]] = {}
        self.req_num_named: dict[str, int] = {}  # how many of a request's pages are named so far
        self._evictions: list[tuple[int, str]] = []  # (block id, hash) since the scheduler last took them

    def _full_block_hashes(self, req: Request) -> list[str]:
        """Hashes of the request's full pages, extended incrementally as it grows."""
        hashes = self.req_hashes.setdefault(req.request_id, [])
        if len(hashes) < req.num_tokens // self.block_size:  # most steps fill no page: skip the token list
            page_hashes(req.all_token_ids, self.block_size, hashes)
        return hashes

    def find_hit(self, req: Request) -> list[int]:
        """Cached pages matching the request's leading full pages.

        At least one token is always left to compute: the forward pass must run on
        the last token to produce the next one."""
        if not self.enabled:
            return []
        hit = []
        limit = (req.num_tokens - 1) // self.block_size
        for h in self._full_block_hashes(req)[:limit]:
            if h not in self.cached:
                break
            hit.append(next(iter(self.cached[h])))
        return hit

    def name_full_pages(self, req: Request, table: list[int], blocks: list[Block], num_tokens: int) -> None:
        """Name each page of the request's block table that its first num_tokens tokens fill."""
        if not self.enabled:
            return
        rid = req.request_id
        start = self.req_num_named.get(rid, 0)
        end = min(num_tokens // self.block_size, len(table))
        if end <= start:  # most steps: a decode that filled no page (building the token list costs O(length))
            return
        hashes = self._full_block_hashes(req)
        tokens = req.all_token_ids
        for i in range(start, end):
            block = blocks[table[i]]
            if block.block_hash is None:
                self.cached.setdefault(hashes[i], {})[block.block_id] = None
                block.block_hash = hashes[i]
                block.token_ids = tuple(tokens[i * self.block_size:(i + 1) * self.block_size])
                block.first_position = i * self.block_size
        self.req_num_named[rid] = end

    def evict(self, block: Block) -> None:
        """The pool reuses a cached-free page: the prefix it held is forgotten."""
        self._evictions.append((block.block_id, block.block_hash))
        holders = self.cached[block.block_hash]
        del holders[block.block_id]
        if not holders:
            del self.cached[block.block_hash]

    def take_evictions(self) -> list[tuple[int, str]]:
        """The (page, prefix hash) pairs whose cached prefix was overwritten since the last call."""
        evictions, self._evictions = self._evictions, []
        return evictions

    def unname_uncomputed(self, req: Request, table: list[int], blocks: list[Block]) -> None:
        """Pages named for tokens the request never computed lose their names: a victim preempted
        in the step that allocated them (its chunk unscheduled) left them empty, and a later request
        must not read them as a cached prefix (found by the generate-equality property test)."""
        for block_id in table[req.num_computed_tokens // self.block_size:]:
            block = blocks[block_id]
            if block.block_hash is not None and block.ref_count == 1:
                holders = self.cached[block.block_hash]
                del holders[block.block_id]
                if not holders:
                    del self.cached[block.block_hash]
                block.block_hash, block.token_ids, block.text = None, (), None

    def released(self, request_id: str) -> None:
        """The request's pages were freed: when it runs again, its pages are named afresh."""
        self.req_num_named.pop(request_id, None)

    def forget(self, request_id: str) -> None:
        """Drop the request's hashes once it can never be scheduled again."""
        self.req_hashes.pop(request_id, None)
