"""The block map as the lab draws it: every page in use or cached, with its owners and its text.

Built from the block manager's live bookkeeping, so its cost grows with the pages shown,
never with the pool; a page's text is decoded again only while the page is filling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.records import BlockState
from engine.request import Request

if TYPE_CHECKING:
    from engine.block_manager import BlockManager


class BlockMap:
    def __init__(self, blocks: BlockManager):
        self.blocks = blocks
        # Drawn text of each request's pages: (tokens held, text) by page index. Tokens at a position
        # never change, so a page is decoded again only while it is filling.
        self._page_texts: dict[str, dict[int, tuple[int, str]]] = {}

    def forget(self, request_id: str) -> None:
        """A finished request's pages will not be drawn again."""
        self._page_texts.pop(request_id, None)

    def snapshot(self, requests: dict[str, Request], text_of: Callable[[list[int]], str]) -> list[BlockState]:
        """Every non-free page: in use (GPU or CPU) or cached-free."""
        bm = self.blocks
        states: dict[tuple[str, int], BlockState] = {}
        for device, tables in (("gpu", bm.req_blocks), ("cpu", bm.swap.tables)):
            for rid, table in tables.items():
                self._table(states, device, requests[rid], table, text_of)
        for h, holders in bm.prefix.cached.items():
            for b in holders:
                block = bm.pool.blocks[b]
                if block.ref_count == 0:
                    if block.text is None:
                        block.text = text_of(list(block.token_ids))
                    states[("gpu", b)] = BlockState(
                        block_id=b, device="gpu", state="cached", owners=[], ref_count=0, prefix_hash=h,
                        first_position=block.first_position, num_tokens=len(block.token_ids), text=block.text)
        return sorted(states.values(), key=lambda s: (s.device != "gpu", s.block_id))

    def _table(self, states: dict[tuple[str, int], BlockState], device: str, req: Request, table: list[int],
               text_of: Callable[[list[int]], str]) -> None:
        """One request's pages on one device; a page it shares with a request already drawn gains an owner."""
        bs = self.blocks.block_size
        texts = self._page_texts.setdefault(req.request_id, {})
        for i, b in enumerate(table):
            key = (device, b)
            if key in states:
                states[key].owners.append(req.request_id)
                continue
            first = i * bs
            held = max(0, min(bs, req.num_computed_tokens - first))
            if texts.get(i, (None,))[0] != held:
                texts[i] = (held, text_of(req.token_ids(first, first + held)))
            block = self.blocks.pool.blocks[b] if device == "gpu" else None
            states[key] = BlockState(
                block_id=b, device=device, state="used", owners=[req.request_id],
                ref_count=block.ref_count if block else 1, prefix_hash=block.block_hash if block else None,
                first_position=first, num_tokens=held, text=texts[i][1])
