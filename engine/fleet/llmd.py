"""llm-d's endpoint picker (EPP): filters, then a weighted sum of scorers, then the highest score.

The default scheduling profile (the Gateway API Inference Extension's chart, which llm-d's
inference-scheduling guide deploys) has no filter and three scorers, each in [0, 1]:

- **queue-scorer** (weight 2): (maxQ - q) / (maxQ - minQ) over the replicas' waiting
  queues (1 for all when the queues are equal);
- **kv-cache-utilization-scorer** (weight 2): 1 - the replica's KV cache usage;
- **prefix-cache-scorer** (weight 3): matched blocks / the prompt's blocks, from the router's
  own approximate index: after each pick it records the prompt's block hashes against the
  chosen replica, in a per-replica LRU as large as the replica's pool (the real plugin hashes
  4 characters a token, 256 blocks at most; here the blocks are the replica's pages of tokens).

The max-score picker shuffles, then sorts by score: ties go to a random replica (seeded here).

Follows kubernetes-sigs/gateway-api-inference-extension at commit a172f54a01a5:
``pkg/epp/scheduling/framework/plugins/queuescorer/queue.go``, ``kvcacheutilizationscorer/``,
``prefixcachescorer/plugin.go`` and ``indexer.go``; ``maxscorepicker/max_score_picker.go`` at
abfd4f2fa79a; the weights from ``config/charts/inferencepool/templates/epp-config.yaml`` at
139eec852f4a. llm-d's picker is Go and does not run here: tests/engine/test_fleet_llmd.py holds
the upstream scorer tests' cases and hand-worked examples.
"""

from __future__ import annotations

from engine.engine import Engine
from engine.fleet.prefix_index import PrefixIndex
from engine.fleet.records import Candidate, RoutingDecision
from engine.fleet.router import Arrival, Router

MAX_PREFIX_BLOCKS = 256  # prefixcachescorer.DefaultMaxPrefixBlocks: longer prompts are matched on their start


def queue_scores(depths: list[int]) -> list[float]:
    low, high = min(depths), max(depths)
    return [1.0 if high == low else (high - q) / (high - low) for q in depths]


def kv_cache_scores(usages: list[float]) -> list[float]:
    return [1.0 - u for u in usages]


class LlmdRouter(Router):
    name = "llmd"
    better = "higher"
    source = "gateway-api-inference-extension scorers @ a172f54a01a5, default weights @ 139eec852f4a (llm-d's EPP)"

    def __init__(self, fleet, block_size: int, pool_sizes: list[int]):
        super().__init__(fleet, block_size, pool_sizes)
        self.index = PrefixIndex(pool_sizes)  # each replica's LRU as large as its pool (the plugin's AutoTune)

    def candidates(self, arrival: Arrival, replicas: list[Engine]) -> list[Candidate]:
        f = self.fleet
        hashes = arrival.page_hashes[:MAX_PREFIX_BLOCKS]
        depths = [e.num_waiting() for e in replicas]
        usages = [e.blocks.usage() for e in replicas]
        matched = self.index.matches(hashes, len(replicas))
        weights = {"queue": f.queue_scorer_weight, "kv_cache": f.kv_cache_utilization_scorer_weight,
                   "prefix": f.prefix_cache_scorer_weight}
        scores = {"queue": queue_scores(depths), "kv_cache": kv_cache_scores(usages),
                  "prefix": [m / len(hashes) if hashes else 0.0 for m in matched]}
        out = []
        for i in range(len(replicas)):
            terms = {k: weights[k] * min(max(scores[k][i], 0.0), 1.0) for k in weights}
            inputs = {"waiting": depths[i], "kv_cache_usage": usages[i], "matched_blocks": matched[i],
                      "prompt_blocks": len(hashes)}
            out.append(Candidate(i, inputs, terms, sum(terms.values())))
        return out

    def pick(self, cands: list[Candidate]) -> tuple[Candidate, str]:
        best = max(c.total for c in cands)
        tied = [c for c in cands if c.total == best]
        if len(tied) == 1:
            return tied[0], ""
        return self.rng.choice(tied), f"{len(tied)} replicas tied: one drawn at random (seeded)"

    def explain(self, decision: RoutingDecision, winner: Candidate) -> str:
        t, i = winner.terms, winner.inputs
        tie = f"; {decision.tie}" if decision.tie else ""
        return (f"replica {winner.replica}: score {winner.total:.3g} = queue {t['queue']:.3g} ({i['waiting']} waiting)"
                f" + KV cache {t['kv_cache']:.3g} ({100 * i['kv_cache_usage']:.0f}% used) + prefix {t['prefix']:.3g} "
                f"({i['matched_blocks']} of {i['prompt_blocks']} blocks){tie}")

    def routed(self, arrival: Arrival, replica: int, decision: RoutingDecision) -> None:
        super().routed(arrival, replica, decision)
        self.index.add(arrival.page_hashes[:MAX_PREFIX_BLOCKS], replica)
