"""NVIDIA Dynamo's KV router: the cheapest replica, in blocks of work, crediting the prefix it caches.

For each replica the router adds up, in KV blocks of block_size tokens:

    cost = prefill_load_scale * max(0, (active prefill tokens + prompt tokens) / block_size
                                       - overlap_score_credit * cached prefix blocks)
           + decode blocks (the distinct prompt blocks of the requests in flight there, this one's included)
           + decode_active_request_weight * requests in flight

and sends the request to the lowest cost, ties at random; with router_temperature > 0 it
samples instead, by softmax over the costs rescaled to [0, 1]. The prefill and decode
counts are the router's own bookkeeping (a request adds its blocks when routed, its
prefill tokens leave at its first token, its blocks when it finishes); the cached prefix
is what the replica's prefix cache holds, as Dynamo's indexer learns it from KV events.

Follows ``lib/kv-router/src/scheduling/selector.rs`` (``worker_logit``, the tie-break and
``softmax_sample_entries``) and ``lib/kv-router/src/sequences/prompt_registry.rs``
(``potential_decode_blocks``) of ai-dynamo/dynamo at commit 01690d42e3b9; held against
ai-dynamo-runtime 1.6.1's own router offline by tests/reference/dynamo_oracle.py.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from engine.engine import Engine
from engine.fleet.records import Candidate, RoutingDecision
from engine.fleet.router import Arrival, Router, cached_prefix_pages
from engine.records import StepRecord


@dataclass
class _Active:
    """A request the router sent and has not seen finish."""

    hashes: tuple[str, ...]
    prefill_tokens: int  # its uncached prompt tokens, until its first token comes back


class DynamoRouter(Router):
    name = "dynamo"
    source = "ai-dynamo/dynamo lib/kv-router/src/scheduling/selector.rs @ 01690d42e3b9 (ai-dynamo-runtime 1.6.1)"

    def __init__(self, fleet, block_size: int, pool_sizes: list[int]):
        super().__init__(fleet, block_size, pool_sizes)
        self.active: list[dict[str, _Active]] = [{} for _ in pool_sizes]
        self.blocks: list[Counter[str]] = [Counter() for _ in pool_sizes]

    def candidates(self, arrival: Arrival, replicas: list[Engine]) -> list[Candidate]:
        c, bs = self.fleet, self.block_size
        isl, hashes = len(arrival.token_ids), arrival.page_hashes
        out = []
        for i, engine in enumerate(replicas):
            overlap = cached_prefix_pages(engine, hashes)
            prefill_tokens = sum(a.prefill_tokens for a in self.active[i].values())
            in_use = len(self.blocks[i])
            new = sum(h not in self.blocks[i] for h in hashes)
            prefill = c.prefill_load_scale * max(0.0, (prefill_tokens + isl) / bs - c.overlap_score_credit * overlap)
            requests = c.decode_active_request_weight * len(self.active[i])
            inputs = {"prompt_tokens": isl, "cached_blocks": overlap, "active_prefill_tokens": prefill_tokens,
                      "active_blocks": in_use, "new_blocks": new, "active_requests": len(self.active[i])}
            terms = {"prefill_blocks": prefill, "decode_blocks": float(in_use + new), "active_requests": requests}
            out.append(Candidate(i, inputs, terms, prefill + in_use + new + requests))
        return out

    def pick(self, cands: list[Candidate]) -> tuple[Candidate, str]:
        if self.fleet.router_temperature > 0:
            return self._sample(cands), "sampled (router_temperature > 0)"
        best, tied = None, 0
        for cand in cands:  # reservoir sampling over the tied minima, as Dynamo does: each tie equally likely
            if best is None or cand.total < best.total:
                best, tied = cand, 1
            elif cand.total == best.total:
                tied += 1
                if self.rng.randrange(tied) == 0:
                    best = cand
        return best, f"{tied} replicas tied: one drawn at random (seeded)" if tied > 1 else ""

    def _sample(self, cands: list[Candidate]) -> Candidate:
        """Softmax over the negated costs, rescaled so the spread is 1 / router_temperature."""
        low, high = min(c.total for c in cands), max(c.total for c in cands)
        if low == high:
            weights = [1.0] * len(cands)
        else:
            scale = -1.0 / ((high - low) * self.fleet.router_temperature)
            weights = [math.exp(c.total * scale - low * scale) for c in cands]
        draw, running = self.rng.random() * sum(weights), 0.0
        for cand, weight in zip(cands, weights, strict=True):
            running += weight
            if draw <= running:
                return cand
        return cands[-1]

    def explain(self, decision: RoutingDecision, winner: Candidate) -> str:
        t, i = winner.terms, winner.inputs
        return (f"replica {winner.replica}: cost {winner.total:g} = prefill {t['prefill_blocks']:g} (its cache holds "
                f"{i['cached_blocks']} of the prompt's blocks) + decode {t['decode_blocks']:g} blocks"
                + (f" + {t['active_requests']:g} for requests in flight" if t["active_requests"] else "")
                + (f"; {decision.tie}" if decision.tie else ""))

    def routed(self, arrival: Arrival, replica: int, decision: RoutingDecision) -> None:
        super().routed(arrival, replica, decision)
        overlap = decision.candidates[replica].inputs["cached_blocks"]
        uncached = max(0, len(arrival.token_ids) - overlap * self.block_size)
        self.active[replica][arrival.request_id] = _Active(arrival.page_hashes, uncached)
        self.blocks[replica].update(arrival.page_hashes)

    def observe(self, replica: int, record: StepRecord) -> None:
        super().observe(replica, record)
        active = self.active[replica]
        for chunk in record.batch:
            if chunk.new_token_id is not None and chunk.request_id in active:
                active[chunk.request_id].prefill_tokens = 0  # its prefill is done

    def forget(self, replica: int, request_id: str) -> None:
        super().forget(replica, request_id)
        gone = self.active[replica].pop(request_id, None)
        if gone is not None:
            self.blocks[replica].subtract(gone.hashes)
            self.blocks[replica] += Counter()  # drop the blocks no request in flight holds
