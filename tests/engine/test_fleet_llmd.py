"""llm-d's endpoint picker, which is Go and cannot run here: its scorers against the cases of the
upstream scorer tests (gateway-api-inference-extension @ a172f54a01a5, cited per test), and the
weighted sum and picker worked by hand on real replicas."""

from __future__ import annotations

import pytest

from engine import EngineConfig, SamplingParams
from engine.fleet.config import FleetConfig
from engine.fleet.fleet import Fleet
from engine.fleet.llmd import kv_cache_scores, queue_scores
from engine.fleet.prefix_index import PrefixIndex
from engine.fleet.router import Arrival
from engine.kv.prefix_cache import page_hashes


@pytest.mark.parametrize("depths, expected", [  # queuescorer/queue_test.go, TestQueueScorer
    ([10, 5, 0], [0.0, 0.5, 1.0]),  # "Different queue sizes"
    ([5, 5], [1.0, 1.0]),  # "Same queue sizes"
    ([0, 0], [1.0, 1.0]),  # "Zero queue sizes"
])
def test_queue_scorer_as_upstream_tests_it(depths, expected):
    assert queue_scores(depths) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("usages, expected", [  # kvcacheutilizationscorer/kvcache_utilization_test.go
    ([0.8, 0.5, 0.0], [0.2, 0.5, 1.0]),
    ([0.6, 0.6], [0.4, 0.4]),
    ([0.0, 0.0], [1.0, 1.0]),
    ([1.0, 0.5], [0.0, 0.5]),
])
def test_kv_cache_utilization_scorer_as_upstream_tests_it(usages, expected):
    assert kv_cache_scores(usages) == pytest.approx(expected, abs=1e-4)


def blocks(text: str) -> tuple[str, ...]:
    """A prompt's block hashes at block size 4, one token per character (the upstream test's prompts)."""
    return tuple(page_hashes([ord(c) for c in text], 4))


def test_prefix_scorer_follows_upstream_completion_test():
    """prefixcachescorer/plugin_test.go, TestPrefixPluginCompletion (one model, so its model-name
    cases drop out): a score is matched blocks over the prompt's blocks, a partial block ignored."""
    index = PrefixIndex([31250, 31250])
    assert index.matches(blocks("aaaaaa"), 2) == [0, 0] and len(blocks("aaaaaa")) == 1
    index.add(blocks("aaaaaa"), 0)  # pod1 picked
    assert index.matches(blocks("bbbbbb"), 2) == [0, 0]
    index.add(blocks("bbbbbb"), 1)  # pod2 picked
    hashes = blocks("aaaabbbb")
    assert [m / len(hashes) for m in index.matches(hashes, 2)] == [0.5, 0.0]
    index.add(hashes, 0)
    hashes = blocks("aaaabbbbcccc")
    assert [m / len(hashes) for m in index.matches(hashes, 2)] == [2 / 3, 0.0]


def test_prefix_index_forgets_the_least_recently_sent_blocks_past_the_pools_size():
    index = PrefixIndex([3, 3])
    index.add(blocks("aaaabbbb"), 0)
    index.add(blocks("ccccdddd"), 0)  # 4 blocks into a 3-block LRU: 'aaaa' is forgotten
    assert index.matches(blocks("aaaabbbb"), 2) == [0, 0]
    assert index.matches(blocks("ccccdddd"), 2) == [2, 0]


def test_the_weighted_sum_and_the_picker_worked_by_hand(tiny_llama):
    """Three idle replicas; replica 1 was sent a prompt sharing 3 of the next one's 4 blocks, and has
    2 requests waiting, replica 2 none (replica 0 one). Queue: max 2, min 0: scores 0.5, 0, 1. KV
    usage: nothing has run, every pool is empty: 1 each. Prefix:
    3/4 on replica 1. Totals: 2*0.5 + 2 + 0 = 3; 0 + 2 + 3*0.75 = 4.25; 2 + 2 + 0 = 4: replica 1."""
    config = EngineConfig(model=tiny_llama, deployment="llama-3.1-8b@h100-sxm", block_size=4, num_gpu_blocks=32)
    fleet = Fleet(config, FleetConfig(num_replicas=3, router="llmd"))
    shared = list(range(1, 13))
    fleet.router.index.add(tuple(page_hashes(shared + [50, 51, 52, 53], 4)), 1)
    for replica, count in ((0, 1), (1, 2)):
        for _ in range(count):
            fleet.replicas[replica].add_request([7, 8, 9], SamplingParams(max_tokens=1), arrival_ms=0.0)
    prompt = shared + [60, 61, 62, 63]
    decision = fleet.router.route(Arrival("r", tuple(prompt), tuple(page_hashes(prompt, 4)), 0.0), fleet.replicas)
    assert [c.inputs["waiting"] for c in decision.candidates] == [1, 2, 0]
    assert [c.total for c in decision.candidates] == pytest.approx([3.0, 4.25, 4.0])
    assert decision.replica == 1 and decision.margin == pytest.approx(0.25) and decision.better == "higher"
    assert "3 of 4 blocks" in decision.why


def test_equal_scores_go_to_a_seeded_random_replica(tiny_llama):
    config = EngineConfig(model=tiny_llama, deployment="llama-3.1-8b@h100-sxm", block_size=4)
    picks = []
    for seed in range(12):
        fleet = Fleet(config, FleetConfig(num_replicas=3, router="llmd", router_seed=seed))
        arrival = Arrival("r", (1, 2, 3, 4, 5), tuple(page_hashes([1, 2, 3, 4, 5], 4)), 0.0)
        decision = fleet.router.route(arrival, fleet.replicas)
        assert "3 replicas tied" in decision.tie
        picks.append(decision.replica)
    assert set(picks) == {0, 1, 2}
    again = Fleet(config, FleetConfig(num_replicas=3, router="llmd", router_seed=5))
    assert again.router.route(arrival, again.replicas).replica == picks[5]


def sglang_fleet(tiny_llama, **knobs) -> Fleet:
    config = EngineConfig(model=tiny_llama, deployment="llama-3.1-8b@h100-sxm", block_size=4, num_gpu_blocks=32)
    return Fleet(config, FleetConfig(num_replicas=3, router="sglang", **knobs))


def arrival_of(tokens: list[int], rid: str = "r") -> Arrival:
    return Arrival(rid, tuple(tokens), tuple(page_hashes(tokens, 4)), 0.0)


def test_sglang_sends_a_prompt_to_the_replica_that_saw_most_of_it_above_the_threshold(tiny_llama):
    """cache_aware.rs, balanced load: replica 2 was sent the first 12 of this 16-token prompt's tokens
    (3 pages); 12 / 16 = 75% > 50%, so replica 2. A prompt replica 2 saw only 4 of 16 tokens of
    (25%) goes to the smallest tree instead: replica 0, the first of the two empty ones."""
    fleet = sglang_fleet(tiny_llama)
    router = fleet.router
    seen = arrival_of(list(range(1, 13)) + [90, 91, 92, 93], "a")
    router.routed(seen, 2, router.route(seen, fleet.replicas))
    decision = router.route(arrival_of(list(range(1, 13)) + [70, 71, 72, 73]), fleet.replicas)
    assert decision.replica == 2 and decision.candidates[2].inputs["matched_tokens"] == 12
    assert "75% > cache_threshold 50%" in decision.why
    decision = router.route(arrival_of(list(range(1, 5)) + list(range(40, 52))), fleet.replicas)
    assert decision.replica == 0 and [c.inputs["tree_tokens"] for c in decision.candidates] == [0, 0, 16]
    assert "tied with replica(s) 1" in decision.tie


def test_sglang_falls_back_to_the_least_loaded_when_load_is_out_of_balance(tiny_llama):
    """Loads 5, 0, 2 with balance_abs_threshold 4 and rel 1.1: 5 - 0 > 4 and 5 > 0 * 1.1, out of
    balance: replica 1, however much of the prompt replica 0 has seen. At abs 5 it is balanced."""
    for abs_threshold, expected in ((4, 1), (5, 0)):
        fleet = sglang_fleet(tiny_llama, balance_abs_threshold=abs_threshold)
        router = fleet.router
        prompt = list(range(1, 17))
        router.index.add(arrival_of(prompt).page_hashes, 0)
        router.in_flight[:] = [5, 0, 2]
        decision = router.route(arrival_of(prompt), fleet.replicas)
        assert decision.replica == expected, abs_threshold
    assert "out of balance" not in decision.why and "16 tokens" in decision.why
