"""Routers: which replica an arrival goes to. Each is a named preset whose rules cite the source
they follow; every decision comes back as a RoutingDecision holding its why.

A router reads the replicas as its real counterpart would: what it counts itself
(requests it sent, until it hears they finished), and what the replicas report (KV
usage, waiting requests, the pages their prefix caches hold, as KV events tell it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from engine.engine import Engine
from engine.fleet.records import Candidate, RoutingDecision
from engine.records import StepRecord


@dataclass(frozen=True)
class Arrival:
    """A request at the router: its tokens and the names of its prompt's full pages."""

    request_id: str
    token_ids: tuple[int, ...]
    page_hashes: tuple[str, ...]
    arrival_ms: float


def cached_prefix_pages(engine: Engine, hashes: tuple[str, ...]) -> int:
    """How many of the prompt's leading full pages the replica's prefix cache holds (in use or free)."""
    cached = engine.blocks.prefix.cached
    n = 0
    while n < len(hashes) and hashes[n] in cached:
        n += 1
    return n


class Router:
    """The interface: route an arrival, and hear what replicas did (for routers that keep counts)."""

    name = ""
    better = "lower"  # the totals are costs; 'higher': scores
    source = ""  # the file and commit its rules follow

    def __init__(self, fleet, block_size: int, pool_sizes: list[int]):
        self.fleet = fleet
        self.block_size = block_size
        self.pool_sizes = pool_sizes  # each replica's KV pool, in pages
        self.rng = random.Random(fleet.router_seed)
        self.in_flight = [0] * len(pool_sizes)  # requests sent to each replica and not yet heard finished

    def candidates(self, arrival: Arrival, replicas: list[Engine]) -> list[Candidate]:
        raise NotImplementedError

    def route(self, arrival: Arrival, replicas: list[Engine]) -> RoutingDecision:
        cands = self.candidates(arrival, replicas)
        winner, tie = self.pick(cands)
        others = [c.total for c in cands if c.replica != winner.replica]
        best_other = (min(others) if self.better == "lower" else max(others)) if others else None
        margin = None if best_other is None else abs(best_other - winner.total)
        decision = RoutingDecision(arrival.request_id, arrival.arrival_ms, self.name, self.better, cands,
                                   winner.replica, margin, tie, "")
        decision.why = self.explain(decision, winner)
        return decision

    def pick(self, cands: list[Candidate]) -> tuple[Candidate, str]:
        """The best total; ties go to the lowest replica index."""
        sign = 1 if self.better == "lower" else -1
        best = min(cands, key=lambda c: (sign * c.total, c.replica))
        tied = [c.replica for c in cands if c.total == best.total]
        return best, (f"tied with replica(s) {', '.join(map(str, tied[1:]))}: the lowest index wins"
                      if len(tied) > 1 else "")

    def explain(self, decision: RoutingDecision, winner: Candidate) -> str:
        return f"replica {winner.replica}: {'lowest cost' if self.better == 'lower' else 'highest score'} " \
               f"{winner.total:g}" + (f", {decision.margin:g} ahead of the next" if decision.margin else "")

    def routed(self, arrival: Arrival, replica: int, decision: RoutingDecision) -> None:
        """The arrival was sent to `replica`."""
        self.in_flight[replica] += 1

    def observe(self, replica: int, record: StepRecord) -> None:
        """A replica finished a step: the requests it finished (or refused) are no longer in flight."""
        for event in record.events:
            if event.kind in ("finished", "rejected"):
                self.forget(replica, event.request_id)

    def forget(self, replica: int, request_id: str) -> None:
        """A request sent to `replica` is gone: finished there, or (disaggregated) ended by the first token its
        prefill replica sampled, so it never reached the decode replica it was counted on."""
        self.in_flight[replica] -= 1


class RoundRobin(Router):
    """Each replica in turn, whatever it holds: the baseline every router is measured against
    (Dynamo's router_mode=round-robin, SGLang router's round_robin policy)."""

    name = "round_robin"
    source = "in turn: replica i, then i + 1, wrapping (Dynamo's and SGLang's round-robin modes)"

    def __init__(self, fleet, block_size: int, pool_sizes: list[int]):
        super().__init__(fleet, block_size, pool_sizes)
        self.turn = 0

    def candidates(self, arrival: Arrival, replicas: list[Engine]) -> list[Candidate]:
        n = len(replicas)
        return [Candidate(i, {}, {"turns_away": (i - self.turn) % n}, (i - self.turn) % n) for i in range(n)]

    def routed(self, arrival: Arrival, replica: int, decision: RoutingDecision) -> None:
        super().routed(arrival, replica, decision)
        self.turn = (replica + 1) % len(self.pool_sizes)

    def explain(self, decision: RoutingDecision, winner: Candidate) -> str:
        return f"replica {winner.replica}: its turn"


class LeastLoaded(Router):
    """Fewest requests in flight (sent, and not yet heard finished); ties to the lowest index."""

    name = "least_loaded"
    source = "the fewest requests in flight, as SGLang router's shortest-queue fallback counts them"

    def candidates(self, arrival: Arrival, replicas: list[Engine]) -> list[Candidate]:
        return [Candidate(i, {"in_flight": n}, {"in_flight": n}, n) for i, n in enumerate(self.in_flight)]

    def explain(self, decision: RoutingDecision, winner: Candidate) -> str:
        return f"replica {winner.replica}: fewest requests in flight ({winner.total:g})" + \
            (" (tied; the lowest index wins)" if decision.tie else "")
