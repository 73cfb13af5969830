"""A router's own guess of which replica holds which prompt blocks: it records where it sent each
prompt, in a least-recently-used list per replica as long as what that replica can keep.

llm-d's prefix-cache scorer (an LRU of block hashes per server) and SGLang router's approximate
radix tree (per-worker text, LRU leaves evicted past a size) both keep such a guess instead
of asking the engines. Here a block is one of the replica's pages of tokens, named by the
same chained hash the prefix cache uses (engine/kv/prefix_cache.py page_hashes).
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixIndex:
    """Which replicas may hold each prompt block: the router's guess, from where it sent what."""

    def __init__(self, capacities: list[int]):
        self.capacities = capacities
        self.lru: list[OrderedDict[str, None]] = [OrderedDict() for _ in capacities]
        self.holders: dict[str, set[int]] = {}

    def add(self, hashes: tuple[str, ...], replica: int) -> None:
        lru = self.lru[replica]
        for h in hashes:
            lru[h] = None
            lru.move_to_end(h)
            self.holders.setdefault(h, set()).add(replica)
            if len(lru) > self.capacities[replica]:  # the least recently sent block is forgotten
                old, _ = lru.popitem(last=False)
                self.holders[old].discard(replica)
                if not self.holders[old]:
                    del self.holders[old]

    def size(self, replica: int) -> int:
        """Blocks the router believes the replica holds."""
        return len(self.lru[replica])

    def deepest(self, hashes: tuple[str, ...]) -> tuple[int, set[int]]:
        """The longest run of the prompt's leading blocks some replica holds, and the replicas that
        hold its last block (SGLang's tree match: its deepest node and that node's tenants)."""
        depth, holders = 0, set()
        for h in hashes:
            if not self.holders.get(h):
                break
            depth, holders = depth + 1, self.holders[h]
        return depth, set(holders)

    def matches(self, hashes: tuple[str, ...], replicas: int) -> list[int]:
        """Blocks matched per replica, as the plugin counts them: walking the prompt's blocks while any
        replica holds the next one, each replica that holds it gains one."""
        counts = [0] * replicas
        for h in hashes:
            holders = self.holders.get(h)
            if not holders:
                break
            for r in holders:
                counts[r] += 1
        return counts
