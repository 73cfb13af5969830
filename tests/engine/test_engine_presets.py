"""Each engine preset shows its defining rule, and a preset is only a set of knobs.

The vllm_v1 preset (the default) is checked step for step against vLLM's own
scheduler by tests/reference/vllm_oracle.py; these tests pin what the others do
differently, each on a workload where the difference must show.
"""

from __future__ import annotations

import random

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.__main__ import build_parser
from engine.knobs import ENGINE_PRESETS, LIVE_KNOBS
from engine.presets import PRESET_RULES, PRESET_SOURCES


def prompt(start: int, n: int) -> list[int]:
    return [(start + i) % 256 for i in range(n)]


def run(model: str, preset: str, requests: list[tuple[int, int, int, int]], **knobs) -> tuple[Engine, list]:
    """requests: (prompt tokens, max_tokens, priority, arrival step)."""
    eng = Engine(EngineConfig.for_preset(preset, model=model, **knobs))
    for i, (n, max_tokens, priority, arrival) in enumerate(requests):
        eng.add_request(prompt(40 * i, n), SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                        priority=priority, arrival_step=arrival)
    return eng, eng.run(max_steps=2000)


def events(records: list, kind: str) -> list:
    return [(rec.step, e) for rec in records for e in rec.events if e.kind == kind]


def test_a_preset_sets_its_rules_and_a_knob_beside_it_wins():
    for preset in ENGINE_PRESETS:
        cfg = EngineConfig.for_preset(preset)
        assert {k: getattr(cfg, k) for k in PRESET_RULES[preset]} == PRESET_RULES[preset]
        assert set(PRESET_RULES[preset]) <= LIVE_KNOBS
    assert EngineConfig.for_preset("sglang", step_order="decode_first").step_order == "decode_first"
    assert EngineConfig().with_changes(engine_preset="vllm_v0", watermark=0.2).watermark == 0.2
    saved = EngineConfig.for_preset("sglang", victim_rule="policy").to_dict()
    assert EngineConfig.from_dict(saved) == EngineConfig.for_preset("sglang", victim_rule="policy")
    with pytest.raises(ValueError, match="engine_preset must be one of"):
        EngineConfig.for_preset("orca")


def test_help_names_every_presets_rules_and_the_engine_source_they_come_from():
    text = build_parser().format_help()
    assert tuple(PRESET_SOURCES) == tuple(PRESET_RULES) == ENGINE_PRESETS  # one row per preset in each table
    for preset in ENGINE_PRESETS:
        assert preset in text and PRESET_SOURCES[preset] in text
        assert all(f"{knob}={value}" in text for knob, value in PRESET_RULES[preset].items())


def test_a_preset_changed_on_a_running_engine_brings_its_rules(tiny_llama):
    eng = Engine(EngineConfig(model=tiny_llama))
    eng.update_config(engine_preset="sglang")
    assert eng.config == EngineConfig.for_preset("sglang", model=tiny_llama)


# One urgent request arrives while lower-priority work holds every seat.
URGENT = [(6, 12, 1, 0), (6, 12, 1, 0), (6, 3, 0, 2)]


def test_vllm_v1_priority_never_preempts_on_admission_and_v0_does(tiny_llama):
    _, v1 = run(tiny_llama, "vllm_v1", URGENT, scheduling_policy="priority", max_num_seqs=2)
    assert not events(v1, "preempted"), "vLLM v1: a waiting request only jumps the queue"
    _, v0 = run(tiny_llama, "vllm_v0", URGENT, scheduling_policy="priority", max_num_seqs=2)
    (step, victim), *_ = events(v0, "preempted")
    assert (step, victim.request_id) == (2, "r1") and "outranks it" in victim.reason


def test_vllm_v0_runs_prefill_only_steps_and_swaps(tiny_llama):
    eng, records = run(tiny_llama, "vllm_v0", [(10, 20, 0, 0), (10, 20, 0, 0), (12, 4, 0, 3), (12, 20, 0, 0)],
                       block_size=4, num_gpu_blocks=14)
    for rec in records:
        kinds = {c.kind for c in rec.batch}
        assert not ("decode" in kinds and kinds - {"decode"}), f"step {rec.step} mixes prefill and decode"
    assert events(records, "swapped_out") and events(records, "swapped_in")
    assert all(r.is_finished for r in eng.requests.values())


TIGHT = [(8, 24, 0, 0), (8, 24, 0, 0), (8, 24, 0, 0), (8, 24, 0, 0)]


def test_trtllm_no_evict_admits_only_what_can_reach_max_tokens_and_never_preempts(tiny_llama):
    _, util = run(tiny_llama, "trtllm_max_util", TIGHT, block_size=4, num_gpu_blocks=16)
    assert events(util, "preempted"), "MAX_UTILIZATION admits on today's need and must evict later"
    eng, safe = run(tiny_llama, "trtllm_no_evict", TIGHT, block_size=4, num_gpu_blocks=16)
    assert not events(safe, "preempted")
    assert any("GUARANTEED_NO_EVICT" in e.reason for _, e in events(safe, "blocked"))
    assert all(r.is_finished for r in eng.requests.values())


@pytest.mark.parametrize("seed", range(12))
def test_trtllm_no_evict_never_preempts_on_random_workloads(tiny_llama, seed):
    rng = random.Random(seed)
    requests = [(rng.randint(1, 24), rng.randint(1, 24), 0, rng.randint(0, 6)) for _ in range(rng.randint(2, 10))]
    pages = max(-(-(n + m) // 4) for n, m, _, _ in requests)
    eng, records = run(tiny_llama, "trtllm_no_evict", requests, block_size=4, num_gpu_blocks=pages + rng.randint(0, 8),
                       max_num_batched_tokens=64)
    assert not events(records, "preempted")
    assert all(r.is_finished for r in eng.requests.values())


def test_sglang_retracts_the_request_with_the_fewest_generated_tokens(tiny_llama):
    # Staggered arrivals, so running requests have generated different amounts when memory runs out.
    eng, records = run(tiny_llama, "sglang", [(6, 40, 0, 0), (6, 40, 0, 2), (9, 40, 0, 4), (6, 40, 0, 6)],
                       block_size=4, num_gpu_blocks=22)
    retractions = events(records, "preempted")
    assert retractions
    by_step = {rec.step: rec for rec in records}
    for step, e in retractions:
        before = by_step[step - 1].requests
        running = by_step[step - 1].running
        fewest = min(len_out for len_out in (before[r].num_output_tokens for r in running))
        assert before[e.request_id].num_output_tokens == fewest, e.reason
        assert "fewest_generated" in e.reason
    assert all(r.is_finished for r in eng.requests.values())


def test_sglang_admission_reserves_room_for_running_requests_output(tiny_llama):
    # vLLM admits the second request as soon as its prompt fits; SGLang also counts 0.7 of the
    # first one's remaining output and waits.
    work = [(8, 40, 0, 0), (8, 40, 0, 1)]
    _, v1 = run(tiny_llama, "vllm_v1", work, block_size=4, num_gpu_blocks=20)
    _, sg = run(tiny_llama, "sglang", work, block_size=4, num_gpu_blocks=20)
    admitted = {name: {e.request_id: step for step, e in reversed(events(recs, "admitted"))}  # first admission
                for name, recs in (("v1", v1), ("sglang", sg))}
    assert admitted["v1"]["r1"] == 1
    assert admitted["sglang"]["r1"] > 1
    assert any("SGLang admits only if" in e.reason for _, e in events(sg, "blocked"))


def test_sglang_rejects_at_once_what_its_admission_rule_could_never_take(tiny_llama):
    # 16 tokens fill the 4-page pool exactly: vLLM admits it, SGLang's spare page never exists.
    for preset, rejected in (("vllm_v1", False), ("sglang", True)):
        eng, records = run(tiny_llama, preset, [(8, 8, 0, 0)], block_size=4, num_gpu_blocks=4)
        assert (eng.requests["r0"].finish_reason.value == "rejected") == rejected, preset
        assert len(records) < 50, "nothing may wait forever"


def test_preempted_requests_prefix_lookups_are_counted_apart(tiny_llama):
    eng, records = run(tiny_llama, "vllm_v1", [(12, 20, 0, 0), (12, 20, 0, 0), (12, 20, 0, 1)],
                       block_size=4, num_gpu_blocks=12, enable_prefix_caching=True)
    preempted, split = set(), {"prefix_cache": [0, 0], "preempted_prefix_cache": [0, 0]}
    for rec in records:
        for e in rec.events:
            if e.kind == "admitted":
                kind = "preempted_prefix_cache" if e.request_id in preempted else "prefix_cache"
                split[kind][0] += e.data["query_tokens"]
                split[kind][1] += e.data["prefix_hit_tokens"]
            elif e.kind == "preempted":
                preempted.add(e.request_id)
    assert preempted and split["preempted_prefix_cache"][0] > 0
    stats = records[-1].stats
    for kind, (queries, hits) in split.items():
        assert (getattr(stats, f"{kind}_queries"), getattr(stats, f"{kind}_hits")) == (queries, hits)
    assert eng.metrics()["aggregate"]["prefix_cache_hit_rate"] == stats.prefix_cache_hits / stats.prefix_cache_queries
