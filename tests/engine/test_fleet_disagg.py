"""Prefill and decode apart: the decode replica attends over the very pages the prefill replica
computed, copied, so every request's greedy tokens are generate's; the transfer is priced by the
link's stated rate; the deciders decide as their sources say; the records are deterministic."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import EngineConfig, SamplingParams
from engine.fleet.config import FleetConfig
from engine.fleet.disagg import decide
from engine.fleet.fleet import Fleet
from engine.fleet.links import KV_LINKS, LINK_FRACTION, LINK_LATENCY_MS, transfer_bytes, transfer_ms
from engine.fleet.metrics import fleet_metrics
from engine.hardware import Deployment
from tests.engine import test_engine_reference
from tests.engine.test_engine_reference import MAX_NEW, PROMPTS, expected_output

DEPLOYMENT = "llama-3.1-8b@h100-sxm"
reference = test_engine_reference.reference  # the fixture: each prompt as generate continues it alone


def pd_fleet(tiny_llama, prefill=1, decode=2, **knobs) -> Fleet:
    fleet_knobs = {k: knobs.pop(k) for k in list(knobs) if k in FleetConfig.__dataclass_fields__}
    config = EngineConfig(model=tiny_llama, deployment=DEPLOYMENT, **{"block_size": 4, "num_gpu_blocks": 48, **knobs})
    return Fleet(config, FleetConfig(num_replicas=prefill + decode, num_prefill_replicas=prefill, **fleet_knobs))


workloads = st.lists(st.tuples(st.integers(0, len(PROMPTS) - 1), st.integers(1, MAX_NEW),
                               st.sampled_from([0.0, 0.0, 3.0, 20.0])), min_size=1, max_size=8)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=workloads, mode=st.sampled_from(["recompute", "swap"]), caching=st.booleans(),
       pool=st.integers(16, 40), decider=st.sampled_from(["always", "llmd_prefix", "dynamo_conditional"]),
       router=st.sampled_from(["round_robin", "dynamo", "llmd"]))
def test_disaggregated_requests_get_the_tokens_generate_gives(tiny_llama, reference, workload, mode, caching, pool,
                                                              decider, router):
    fleet = pd_fleet(tiny_llama, preemption_mode=mode, enable_prefix_caching=caching, num_gpu_blocks=pool,
                     num_cpu_blocks=32, disagg_decider=decider, router=router, non_cached_tokens=24)
    ids = [fleet.add_request(PROMPTS[p], SamplingParams(max_tokens=m, ignore_eos=True), arrival_ms=at)
           for p, m, at in workload]
    fleet.run()
    assert not fleet.has_unfinished_requests()
    for rid, (p, m, _) in zip(ids, workload, strict=True):
        engine = fleet.replicas[fleet.placement[rid]]
        req = engine.requests[rid]
        if req.finish_reason.value == "rejected":
            assert req.max_total_tokens > engine.config.num_gpu_blocks * engine.config.block_size, rid
            continue
        assert req.output_token_ids == expected_output(reference(tuple(PROMPTS[p])), m, True, 256), (rid, decider)
    for replica in fleet.replicas:  # every held page went back once copied
        assert not replica.scheduler.held and not replica.scheduler.incoming and not replica.scheduler.received


def test_a_transfer_really_copies_the_prefill_replicas_pages(tiny_llama):
    fleet = pd_fleet(tiny_llama, prefill=1, decode=1)
    rid = fleet.add_request(PROMPTS[3], SamplingParams(max_tokens=4, ignore_eos=True))
    prefill, decode = fleet.replicas
    while rid not in fleet.disagg.handoffs or fleet.disagg.handoffs[rid].transfer_start_ms is None:
        fleet.step()
    source = prefill.blocks.block_table(rid)
    target = decode.blocks.block_table(rid)
    pages = -(-len(PROMPTS[3]) // 4)
    src_slots = prefill.runner.cache._slots(source[:pages])
    dst_slots = decode.runner.cache._slots(target[:pages])
    assert prefill.runner.cache.gpu[:, :, src_slots].abs().sum() > 0
    assert (decode.runner.cache.gpu[:, :, dst_slots] == prefill.runner.cache.gpu[:, :, src_slots]).all()
    fleet.run()
    assert not prefill.scheduler.held and prefill.blocks.num_free_blocks == prefill.config.num_gpu_blocks


def test_n_tokens_of_an_8b_bf16_model_over_400_gbps_cost_n_times_131072_bytes_at_the_stated_rate():
    dep = Deployment.parse("llama-3.1-8b@h100-sxm")
    assert dep.kv_bytes_per_token == 131_072  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    for n in (1, 512, 8192):
        assert transfer_bytes(dep, n) == n * 131_072
        assert KV_LINKS["ib-ndr"] == 400e9 / 8
        expected = LINK_LATENCY_MS + n * 131_072 / (400e9 / 8 * LINK_FRACTION) * 1e3
        assert transfer_ms(dep, n, "ib-ndr") == pytest.approx(expected)
    assert transfer_ms(dep, 8192, "nvlink-4") < transfer_ms(dep, 8192, "ib-ndr") < transfer_ms(dep, 8192, "eth-100")


def test_the_fleet_prices_each_transfer_at_full_size_and_holds_the_link_one_at_a_time(tiny_llama):
    fleet = pd_fleet(tiny_llama, prefill=1, decode=1)
    for _ in range(2):
        fleet.add_request(PROMPTS[1], SamplingParams(max_tokens=3, ignore_eos=True), length_scale=0.25)
    fleet.run()
    dep = Deployment.parse(DEPLOYMENT)
    first, second = fleet.disagg.handoffs["r0"], fleet.disagg.handoffs["r1"]
    for h in (first, second):
        full = h.tokens / 0.25
        assert h.bytes == full * 131_072
        assert h.transfer_end_ms - h.transfer_start_ms == pytest.approx(transfer_ms(dep, full, "ib-ndr"))
    assert second.transfer_start_ms >= first.transfer_end_ms or second.prefill_done_ms >= first.transfer_end_ms
    m = fleet_metrics(fleet)["aggregate"]
    assert m["kv_bytes_moved"] == first.bytes + second.bytes and m["num_disaggregated"] == 2


def test_a_decode_replica_without_room_makes_the_transfer_wait_and_the_record_says_so(tiny_llama):
    fleet = pd_fleet(tiny_llama, prefill=1, decode=1, replica_gpu_blocks="40,14")
    for _ in range(3):
        fleet.add_request(PROMPTS[11], SamplingParams(max_tokens=8, ignore_eos=True), arrival_ms=0.0)
    records = fleet.run()
    waited = [h for h in fleet.disagg.handoffs.values() if h.pages_reserved_ms > h.prefill_done_ms]
    assert waited, "a decode pool of 14 pages holds one 48-token request at a time"
    assert any(r.kind == "kv_transfer" and r.handoff.pages_reserved_ms is None for r in records)
    assert all(fleet.replicas[1].requests[rid].finish_reason.value == "length" for rid in fleet.disagg.handoffs)


@pytest.mark.parametrize("knobs, prompt, cached, scale, apart", [
    (dict(disagg_decider="always"), 100, 96, 1.0, True),
    (dict(disagg_decider="llmd_prefix", non_cached_tokens=0), 100, 96, 1.0, True),  # 0: always (llm-d)
    (dict(disagg_decider="llmd_prefix", non_cached_tokens=50), 100, 60, 1.0, False),  # 40 uncached < 50
    (dict(disagg_decider="llmd_prefix", non_cached_tokens=50), 100, 50, 1.0, True),  # 50 >= 50
    (dict(disagg_decider="llmd_prefix", non_cached_tokens=500), 100, 60, 0.1, False),  # 400 full-size < 500
    (dict(disagg_decider="dynamo_conditional"), 100, 80, 0.1, False),  # 200 < 2048 and 20% < 70%
    (dict(disagg_decider="dynamo_conditional"), 100, 20, 0.1, True),  # 800 < 2048 but 80% >= 70%
    (dict(disagg_decider="dynamo_conditional"), 1000, 500, 0.1, True),  # 5000 >= 2048
])
def test_the_deciders_decide_as_their_sources_say(knobs, prompt, cached, scale, apart):
    assert decide(FleetConfig(num_replicas=2, num_prefill_replicas=1, **knobs), prompt, cached, scale)[0] is apart


# The isl_bounding cases of Dynamo's own unit tests (lib/kv-router/src/conditional_disagg.rs):
# thresholds, prompt tokens, the decode worker's cached blocks of 64 tokens, and whether Dynamo bypasses
# remote prefill (keeps the request on its decode worker). The caller clamps the cache to the prompt.
@pytest.mark.parametrize("eff_isl, ratio, prompt, blocks, bypass", [
    (2048, 0.7, 1000, 14, True),  # 104 new tokens, 10% of the prompt
    (2048, 0.99, 100_000, 1000, False),  # 36,000 new tokens >= 2048
    (2048, 0.7, 200, 0, False),  # nothing cached: 100% >= 70%
    (2048, 0.99, 2048, 0, False),  # 2048 new tokens: the threshold is strict
    (2048, 0.7, 500, 10, True),  # 640 cached > 500: nothing new
])
def test_dynamo_conditional_decides_as_dynamos_own_tests(eff_isl, ratio, prompt, blocks, bypass):
    fleet = FleetConfig(num_replicas=2, num_prefill_replicas=1, disagg_decider="dynamo_conditional",
                        conditional_disagg_eff_isl_threshold=eff_isl, conditional_disagg_eff_isl_ratio_threshold=ratio)
    assert decide(fleet, prompt, min(blocks * 64, prompt), 1.0)[0] is not bypass


def test_the_same_seed_gives_the_same_disaggregated_run(tiny_llama):
    runs = []
    for _ in range(2):
        fleet = pd_fleet(tiny_llama, prefill=1, decode=2, router="dynamo", enable_prefix_caching=True)
        for i in range(8):
            fleet.add_request(PROMPTS[i % 4], SamplingParams(max_tokens=5, ignore_eos=True), arrival_ms=2.0 * i)
        records = [r.to_dict() for r in fleet.run()]
        for rec in records:
            rec.get("step", {}).pop("timings", None)  # this machine's wall time
        runs.append(records)
    assert runs[0] == runs[1]
    assert {r["kind"] for r in runs[0]} == {"route", "step", "kv_transfer", "kv_arrived"}


@pytest.mark.parametrize("knobs, message", [
    (dict(num_replicas=2, num_prefill_replicas=2), "num_prefill_replicas must leave at least one decode replica"),
    (dict(num_replicas=2, num_prefill_replicas=1, kv_link="carrier-pigeon"), "kv_link must be one of"),
    (dict(num_replicas=2, num_prefill_replicas=1, non_cached_tokens=-1), "non_cached_tokens must be an integer"),
    (dict(num_replicas=2, disagg_decider="coin"), "disagg_decider must be one of"),
])
def test_bad_disaggregation_knobs_are_named(knobs, message):
    with pytest.raises(ValueError, match=message):
        FleetConfig(**knobs)


@pytest.mark.parametrize("router", ["round_robin", "dynamo", "llmd"])
def test_a_request_its_first_token_ends_leaves_no_count_behind_on_its_decode_replica(tiny_llama, reference, router):
    """The decode router counts a disaggregated request from its arrival; when the token its prefill samples
    stops it, it never reaches the decode replica, whose router must still hear that it is gone."""
    first = expected_output(reference(tuple(PROMPTS[2])), 1, True, 256)[0]
    fleet = pd_fleet(tiny_llama, prefill=1, decode=2, router=router)
    rid = fleet.add_request(PROMPTS[2], SamplingParams(max_tokens=6, ignore_eos=True, stop_token_ids=[first]))
    fleet.add_request(PROMPTS[1], SamplingParams(max_tokens=4, ignore_eos=True), arrival_ms=1.0)
    fleet.run()
    assert fleet.replicas[fleet.placement[rid]].requests[rid].output_token_ids == [first]
    assert rid not in fleet.disagg.handoffs
    for pool in fleet.pools:
        assert pool.router.in_flight == [0] * len(pool.engines), (pool.role, pool.router.in_flight)
        assert not any(getattr(pool.router, "active", [{}])), pool.role


def test_the_metrics_can_be_read_after_every_event_even_with_kv_on_the_link(tiny_llama):
    """The Fleet page reads the metrics mid-run: a request whose KV is still on its way to the decode
    replica is on neither replica yet, and is counted once it arrives."""
    fleet = pd_fleet(tiny_llama, prefill=1, decode=2, kv_link="eth-100")
    for i in range(6):
        fleet.add_request(PROMPTS[i % 4], SamplingParams(max_tokens=5, ignore_eos=True), arrival_ms=1.0 * i)
    finished, in_flight_seen = [], False
    while fleet.has_unfinished_requests():
        fleet.step()
        aggregate = fleet_metrics(fleet)["aggregate"]
        on_the_way = [rid for rid, r in fleet.placement.items() if rid not in fleet.replicas[r].requests]
        in_flight_seen |= bool(on_the_way)
        finished.append(aggregate["num_requests_finished"])
    assert in_flight_seen, "no event had a KV copy on its way: the test saw nothing"
    assert finished == sorted(finished) and finished[-1] == 6
