"""A fleet of real engines behind a router: tokens as generate gives them, whatever the router; the
same run from the same seed; one clock; and each router's rules, worked by hand."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import EngineConfig, SamplingParams
from engine.fleet.config import FleetConfig
from engine.fleet.fleet import ROUTER_CLASSES, Fleet
from engine.fleet.metrics import fleet_metrics
from engine.fleet.router import Arrival
from engine.kv.prefix_cache import page_hashes
from tests.engine import test_engine_reference
from tests.engine.test_engine_reference import MAX_NEW, PROMPTS, expected_output

DEPLOYMENT = "llama-3.1-8b@h100-sxm"
reference = test_engine_reference.reference  # the fixture: each prompt as generate continues it alone


def fleet_of(tiny_llama, router="dynamo", replicas=3, **knobs) -> Fleet:
    """A fleet of the tiny model on the modeled clock; knobs are fleet knobs or engine knobs."""
    fleet_knobs = {k: knobs.pop(k) for k in list(knobs) if k in FleetConfig.__dataclass_fields__}
    config = EngineConfig(model=tiny_llama, deployment=DEPLOYMENT, enable_prefix_caching=True,
                          **{"block_size": 4, "num_gpu_blocks": 64, **knobs})
    return Fleet(config, FleetConfig(num_replicas=replicas, router=router, **fleet_knobs))


def add_all(fleet: Fleet, workload) -> list[str]:
    return [fleet.add_request(PROMPTS[p], SamplingParams(max_tokens=m, ignore_eos=True), arrival_ms=at)
            for p, m, at in workload]


workloads = st.lists(st.tuples(st.integers(0, len(PROMPTS) - 1), st.integers(1, MAX_NEW),
                               st.sampled_from([0.0, 0.0, 5.0, 40.0, 300.0])), min_size=1, max_size=10)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(router=st.sampled_from(sorted(ROUTER_CLASSES)), replicas=st.integers(1, 4), pool=st.integers(12, 48),
       workload=workloads)
def test_every_request_gets_the_tokens_generate_gives_it_whatever_the_router(tiny_llama, reference, router,
                                                                             replicas, pool, workload):
    fleet = fleet_of(tiny_llama, router, replicas, num_gpu_blocks=pool)
    ids = add_all(fleet, workload)
    fleet.run()
    assert not fleet.has_unfinished_requests()
    for rid, (p, m, _) in zip(ids, workload, strict=True):
        engine = fleet.replicas[fleet.placement[rid]]
        req = engine.requests[rid]
        if req.finish_reason.value == "rejected":  # only a request no pool of this size could ever hold
            assert req.max_total_tokens > engine.config.num_gpu_blocks * engine.config.block_size, rid
            continue
        assert req.output_token_ids == expected_output(reference(tuple(PROMPTS[p])), m, True, 256), (rid, router)


def test_the_same_seed_gives_the_same_run_routing_included(tiny_llama):
    workload = [(i % len(PROMPTS), 8, 10.0 * (i // 3)) for i in range(12)]
    runs = []
    for _ in range(2):
        fleet = fleet_of(tiny_llama, "dynamo", 3, router_temperature=0.5, router_seed=7)
        add_all(fleet, workload)
        runs.append([rec.to_dict() for rec in fleet.run()])
        for rec in runs[-1]:
            rec.get("step", {}).pop("timings", None)  # wall time on this machine: the one thing that differs
    assert runs[0] == runs[1]
    assert len({d["decision"]["replica"] for d in runs[0] if d["kind"] == "route"}) > 1


def test_one_clock_arrivals_routed_when_they_arrive_and_no_replica_overlaps_its_own_steps(tiny_llama):
    fleet = fleet_of(tiny_llama, "least_loaded", 2)
    add_all(fleet, [(i % len(PROMPTS), 6, 7.0 * i) for i in range(10)])
    records = fleet.run()
    clock = [r.clock_ms for r in records]
    assert clock == sorted(clock)
    assert [r.clock_ms for r in records if r.kind == "route"] == [7.0 * i for i in range(10)]
    for replica in range(2):
        spans = [(r.step.modeled.clock_ms - r.step.modeled.total_ms, r.step.modeled.clock_ms)
                 for r in records if r.kind == "step" and r.replica == replica]
        assert all(end <= next_start + 1e-9 for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False))
    for rid, replica in fleet.placement.items():  # a request that arrived mid-step waited from its arrival
        req = fleet.replicas[replica].requests[rid]
        assert req.arrival_ms == 7.0 * int(rid[1:])


def test_round_robin_takes_turns_and_least_loaded_ties_go_to_the_lowest_index(tiny_llama):
    fleet = fleet_of(tiny_llama, "round_robin", 3)
    add_all(fleet, [(0, 4, 0.0)] * 7)
    fleet.run()
    assert [d.replica for d in fleet.decisions] == [0, 1, 2, 0, 1, 2, 0]
    fleet = fleet_of(tiny_llama, "least_loaded", 3)
    add_all(fleet, [(0, 4, 0.0)] * 4 + [(1, 4, 10_000.0)])
    fleet.run()
    assert [d.replica for d in fleet.decisions] == [0, 1, 2, 0, 0]  # the last arrives to an idle fleet
    assert fleet.decisions[-1].tie and fleet.decisions[1].candidates[0].total == 1


def test_dynamo_costs_blocks_of_prefill_and_decode_less_the_cached_prefix_worked_by_hand(tiny_llama):
    """Replica 0 caches 5 of the prompt's 6 pages; replica 1 runs an unrelated request. Prompt 26 tokens,
    block_size 4: raw prefill 26/4 = 6.5 blocks; 6 full pages. Replica 0: 6.5 - 5 + 6 = 7.5. Replica 1:
    its request in flight adds its uncached prefill tokens and its pages: (8 + 26)/4 + 2 + 6 = 16.5.
    Replica 2: 6.5 + 6 = 12.5."""
    fleet = fleet_of(tiny_llama, "dynamo", 3)
    shared = list(range(1, 21)) + [30, 31, 32, 33, 34, 35]
    engine0, engine1 = fleet.replicas[0], fleet.replicas[1]
    engine0.add_request(shared[:20] + [40, 41, 42], SamplingParams(max_tokens=1), arrival_ms=0.0)
    engine0.run()  # replica 0 now caches the first 5 pages (20 tokens) of `shared`
    other = list(range(100, 108))
    elsewhere = Arrival("x", tuple(other), tuple(page_hashes(other, 4)), 0.0)
    fleet.router.routed(elsewhere, 1, fleet.router.route(elsewhere, fleet.replicas))  # sent to replica 1
    arrival = Arrival("r", tuple(shared), tuple(page_hashes(shared, 4)), 0.0)
    decision = fleet.router.route(arrival, fleet.replicas)
    assert [c.total for c in decision.candidates] == [7.5, 16.5, 12.5]
    assert decision.replica == 0 and decision.margin == 5.0 and not decision.tie
    assert decision.candidates[0].inputs["cached_blocks"] == 5
    assert "cost 7.5" in decision.why and "5 of the prompt's blocks" in decision.why
    assert engine1.requests == {}


def test_dynamo_hears_first_tokens_and_finishes_when_the_step_ends(tiny_llama):
    fleet = fleet_of(tiny_llama, "dynamo", 1)
    add_all(fleet, [(0, 3, 0.0)])
    fleet.step()  # routed
    assert fleet.router.active[0]["r0"].prefill_tokens == len(PROMPTS[0])
    fleet.step()  # the prefill step ran; the router hears of it when that step ends
    assert fleet.router.active[0]["r0"].prefill_tokens == len(PROMPTS[0])
    fleet.run()
    assert fleet.router.active == [{}] and not fleet.router.blocks[0]


def test_dynamo_ties_are_drawn_from_the_seed_and_temperature_samples_cheaper_replicas_more(tiny_llama):
    fleet = fleet_of(tiny_llama, "dynamo", 4)
    arrival = Arrival("r", tuple(PROMPTS[0]), tuple(page_hashes(PROMPTS[0], 4)), 0.0)
    picks = {fleet.router.route(arrival, fleet.replicas).replica for _ in range(40)}
    assert picks == {0, 1, 2, 3}  # four equal costs: each drawn
    fleet.router.rng = random.Random(0)
    first = [fleet.router.route(arrival, fleet.replicas).replica for _ in range(10)]
    fleet.router.rng = random.Random(0)
    assert first == [fleet.router.route(arrival, fleet.replicas).replica for _ in range(10)]
    warm = FleetConfig(num_replicas=4, router="dynamo", router_temperature=0.5)
    router = ROUTER_CLASSES["dynamo"](warm, 4, [64] * 4)
    router.blocks[3].update(f"b{i}" for i in range(40))  # replica 3 carries 40 blocks in flight
    counts = [0] * 4
    for _ in range(400):
        counts[router.route(arrival, fleet.replicas).replica] += 1
    assert counts[3] < min(counts[:3]) and counts[3] > 0  # sampled, not excluded
    weights = [1, 1, 1, math.exp(-1 / 0.5)]  # softmax over costs rescaled to [0, 1], divided by temperature
    assert abs(counts[3] / 400 - weights[3] / sum(weights)) < 0.05


def test_replicas_may_differ_and_the_metrics_name_each_requests_replica(tiny_llama):
    config = EngineConfig(model=tiny_llama, deployment=DEPLOYMENT, enable_prefix_caching=True, block_size=4)
    fleet = Fleet(config, FleetConfig(num_replicas=3, router="round_robin", replica_gpu_blocks="64,64,4"))
    assert [e.config.num_gpu_blocks for e in fleet.replicas] == [64, 64, 4]
    add_all(fleet, [(1, 8, 0.0)] * 3)
    fleet.run()
    m = fleet_metrics(fleet)
    assert [r["replica"] for r in m["requests"]] == [0, 1, 2]
    assert [r["finish_reason"] for r in m["requests"]] == ["length", "length", "rejected"]  # 4 pages never fit
    assert m["aggregate"]["num_replicas"] == 3 and m["aggregate"]["router"] == "round_robin"
    assert [r["num_gpu_blocks"] for r in m["replicas"]] == [64, 64, 4]


@pytest.mark.parametrize("knobs, message", [
    (dict(num_replicas=0), "num_replicas must be an integer in [1, 64]"),
    (dict(num_replicas=10_000), "num_replicas must be an integer in [1, 64]"),
    (dict(router="random"), "router must be one of"),
    (dict(prefill_load_scale=-1.0), "prefill_load_scale must be a number in [0, 1000]"),
    (dict(overlap_score_credit=float("nan")), "overlap_score_credit must be a number in [0, 1000]"),
    (dict(num_replicas=2, replica_gpu_blocks="8,x"), "replica_gpu_blocks must list 2 pool sizes"),
])
def test_a_bad_fleet_knob_is_named(knobs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        FleetConfig(**knobs)


def test_a_fleet_needs_a_deployment_clock(tiny_llama):
    with pytest.raises(ValueError, match="a fleet needs a deployment"):
        Fleet(EngineConfig(model=tiny_llama), FleetConfig())


def test_replicas_may_run_different_engine_presets_and_still_give_generates_tokens(tiny_llama, reference):
    fleet = fleet_of(tiny_llama, "round_robin", replicas=3, replica_presets="vllm_v1,sglang,trtllm_no_evict",
                     num_gpu_blocks=24)
    assert [e.config.engine_preset for e in fleet.replicas] == ["vllm_v1", "sglang", "trtllm_no_evict"]
    assert [e.config.admission_reserve for e in fleet.replicas] == ["prompt", "output_estimate", "max_tokens"]
    ids = add_all(fleet, [(i % len(PROMPTS), 6, 0.0) for i in range(9)])
    fleet.run()
    for rid, i in zip(ids, range(9), strict=True):
        req = fleet.replicas[fleet.placement[rid]].requests[rid]
        assert req.output_token_ids == expected_output(reference(tuple(PROMPTS[i % len(PROMPTS)])), 6, True, 256)


@pytest.mark.parametrize("presets", ["vllm_v1,sglang", "vllm_v1,sglang,magic", "vllm_v1,,sglang"])
def test_a_bad_replica_preset_list_is_named(presets):
    with pytest.raises(ValueError, match="replica_presets must list 3 engine presets"):
        FleetConfig(num_replicas=3, replica_presets=presets)
