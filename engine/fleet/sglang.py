"""SGLang router's cache-aware policy: the replica that has seen the longest prefix of this prompt,
unless the load is out of balance, when the least-loaded replica gets it.

    imbalanced = max load - min load > balance_abs_threshold  and  max load > min load * balance_rel_threshold
    imbalanced:                       the replica with the fewest requests in flight
    else, match rate > cache_threshold: the replica holding the longest matched prefix
    else:                             the replica whose approximate tree is smallest (most room)

Either way the prompt is then recorded against the chosen replica. Load is the router's own count
of requests in flight; the "tree" is its record of the prompts it sent each replica, least
recently used dropped past max_tree_size. SGLang matches characters in a radix tree and evicts
every eviction_interval_secs; here the match is by the replicas' pages of tokens (a prompt's
partial last page never matches) and eviction is immediate.

Follows sgl-project/sglang ``sgl-router/src/policies/cache_aware.rs`` at commit b6f20641ad6b,
with the defaults of ``CacheAwareConfig`` in ``sgl-router/src/policies/mod.rs`` at 08fc57426c9d
(cache_threshold 0.5, balance_abs_threshold 32, balance_rel_threshold 1.1, max_tree_size 10000,
read here as tokens). Ties go to the lowest replica index (SGLang's min_by_key takes the first).
"""

from __future__ import annotations

from engine.engine import Engine
from engine.fleet.prefix_index import PrefixIndex
from engine.fleet.records import Candidate, RoutingDecision
from engine.fleet.router import Arrival, Router


class SglangRouter(Router):
    name = "sglang"
    better = "higher"
    source = "sgl-project/sglang sgl-router/src/policies/cache_aware.rs @ b6f20641ad6b"

    def __init__(self, fleet, block_size: int, pool_sizes: list[int]):
        super().__init__(fleet, block_size, pool_sizes)
        self.index = PrefixIndex([max(1, fleet.max_tree_size // block_size)] * len(pool_sizes))

    def candidates(self, arrival: Arrival, replicas: list[Engine]) -> list[Candidate]:
        """Each replica's standing under the rule that applies: in flight (imbalanced), matched tokens
        (a match above the threshold), or room in its tree (otherwise). The total ranks them."""
        f, bs, n = self.fleet, self.block_size, len(replicas)
        loads = self.in_flight
        high, low = max(loads), min(loads)
        imbalanced = high - low > f.balance_abs_threshold and high > low * f.balance_rel_threshold
        depth, holders = self.index.deepest(arrival.page_hashes)
        rate = depth * bs / len(arrival.token_ids)
        sizes = [self.index.size(i) * bs for i in range(n)]
        out = []
        for i in range(n):
            inputs = {"in_flight": loads[i], "matched_tokens": depth * bs if i in holders else 0,
                      "match_rate": rate if i in holders else 0.0, "tree_tokens": sizes[i]}
            if imbalanced:
                terms = {"fewer_in_flight": float(high - loads[i])}
            elif rate > f.cache_threshold:
                terms = {"matched_tokens": float(inputs["matched_tokens"])}
            else:
                terms = {"tree_room": float(max(sizes) - sizes[i])}
            out.append(Candidate(i, inputs, terms, sum(terms.values())))
        return out

    def explain(self, decision: RoutingDecision, winner: Candidate) -> str:
        rule = next(iter(winner.terms))
        i = winner.inputs
        threshold = 100 * self.fleet.cache_threshold
        why = {"fewer_in_flight": f"load is out of balance, so the least loaded ({i['in_flight']} in flight)",
               "matched_tokens": f"it has seen {i['matched_tokens']} tokens of this prompt "
                                 f"({100 * i['match_rate']:.0f}% > cache_threshold {threshold:.0f}%)",
               "tree_room": f"no replica has seen more than cache_threshold of this prompt, so the one that has seen "
                            f"least ({i['tree_tokens']} tokens)"}[rule]
        return f"replica {winner.replica}: {why}" + (f"; {decision.tie}" if decision.tie else "")

    def routed(self, arrival: Arrival, replica: int, decision: RoutingDecision) -> None:
        super().routed(arrival, replica, decision)
        self.index.add(arrival.page_hashes, replica)
