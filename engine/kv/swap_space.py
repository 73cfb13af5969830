"""The CPU swap space: host-memory pages that swap preemption copies a request's KV pages into."""

from __future__ import annotations

import heapq


class SwapSpace:
    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.free: list[int] = list(range(num_blocks))  # a heap: the lowest id is taken first
        self.tables: dict[str, list[int]] = {}  # request id -> its CPU pages, in page order

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def hold(self, request_id: str, n: int) -> list[int] | None:
        """n CPU pages for the request; None, taking nothing, if fewer are free."""
        if n > len(self.free):
            return None
        self.tables[request_id] = [heapq.heappop(self.free) for _ in range(n)]
        return self.tables[request_id]

    def release(self, request_id: str) -> list[int]:
        """The request's CPU pages, given back to the space."""
        table = self.tables.pop(request_id)
        for c in table:
            heapq.heappush(self.free, c)
        return table
