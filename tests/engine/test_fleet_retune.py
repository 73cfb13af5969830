"""A running fleet takes new router weights, a new decider and a new link from its next event
(Fleet.retune): what each router counts and remembers is kept, the next arrival reads the new
values, the tokens are still generate's, and a knob that builds the fleet is refused."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import SamplingParams
from engine.fleet.config import FLEET_KNOB, LIVE_FLEET_KNOBS
from engine.fleet.fleet import Fleet
from tests.engine import test_engine_reference
from tests.engine.test_engine_reference import PROMPTS, expected_output
from tests.engine.test_fleet import add_all, fleet_of, workloads
from tests.engine.test_fleet_disagg import pd_fleet

reference = test_engine_reference.reference  # the fixture: each prompt as generate continues it alone


def step_to_route(fleet: Fleet):
    """Step until an arrival is routed; its record."""
    while True:
        record = fleet.step()
        if record.kind == "route":
            return record


def test_new_dynamo_weights_cost_the_next_arrival_and_the_counts_are_kept(tiny_llama):
    fleet = fleet_of(tiny_llama, "dynamo", 3)
    add_all(fleet, [(0, 8, 0.0), (0, 8, 1.0), (1, 8, 2.0), (0, 8, 3.0)])
    step_to_route(fleet)
    step_to_route(fleet)
    active = [len(a) for a in fleet.router.active]
    fleet.retune(overlap_score_credit=0.0, prefill_load_scale=2.0, decode_active_request_weight=5.0)
    assert [len(a) for a in fleet.router.active] == active  # what it counted stays
    decision = step_to_route(fleet).decision
    for c in decision.candidates:
        i = c.inputs
        prefill = 2.0 * (i["active_prefill_tokens"] + i["prompt_tokens"]) / 4  # no credit for the cached prefix
        assert c.terms["prefill_blocks"] == pytest.approx(prefill)
        assert c.terms["active_requests"] == 5.0 * i["active_requests"]
    assert any(c.inputs["active_requests"] for c in decision.candidates)


def test_a_disaggregated_fleet_takes_a_new_decider_and_its_decode_router_still_ignores_the_cache(tiny_llama):
    fleet = pd_fleet(tiny_llama, prefill=1, decode=2, router="dynamo", enable_prefix_caching=True)
    for i in range(4):
        fleet.add_request(PROMPTS[i], SamplingParams(max_tokens=6, ignore_eos=True), arrival_ms=50.0 * i)
    assert step_to_route(fleet).prefill is not None  # 'always': apart
    fleet.retune(disagg_decider="llmd_prefix", non_cached_tokens=10**6, overlap_score_credit=3.0, kv_link="eth-100")
    record = step_to_route(fleet)
    assert record.prefill is None and record.placed.startswith("only ")  # kept on its decode replica
    prefill_pool, decode_pool = fleet.pools
    assert prefill_pool.router.fleet.overlap_score_credit == 3.0
    assert decode_pool.router.fleet.overlap_score_credit == 0.0  # Dynamo's decode router: load alone
    assert fleet.fleet.kv_link == "eth-100"


@pytest.mark.parametrize("knobs", [dict(num_replicas=4), dict(router="round_robin"), dict(max_tree_size=5),
                                   dict(router_seed=3), dict(overlap_score_credit=-1.0)])
def test_a_knob_that_builds_the_fleet_or_a_bad_value_is_refused_and_changes_nothing(tiny_llama, knobs):
    fleet = fleet_of(tiny_llama, "dynamo", 2)
    before = fleet.fleet
    with pytest.raises(ValueError, match=next(iter(knobs))):
        fleet.retune(**knobs)
    assert fleet.fleet is before and fleet.router.fleet is before


def test_every_live_knob_reaches_the_routers_and_none_builds_the_fleet(tiny_llama):
    assert not LIVE_FLEET_KNOBS & {"num_replicas", "router", "replica_gpu_blocks", "replica_presets",
                                   "num_prefill_replicas", "router_seed", "max_tree_size"}
    fleet = pd_fleet(tiny_llama, prefill=1, decode=2, router="dynamo")
    for name in sorted(LIVE_FLEET_KNOBS):
        knob = FLEET_KNOB[name]
        value = next(c for c in knob.choices if c != knob.default) if knob.choices else \
            type(knob.default)(knob.low + (1 if knob.low == knob.default else 0))
        fleet.retune(**{name: value})
        assert getattr(fleet.fleet, name) == value == getattr(fleet.pools[0].router.fleet, name), name
        if name not in ("overlap_score_credit", "prefill_load_scale"):  # Dynamo's decode rules pin these two
            assert getattr(fleet.pools[1].router.fleet, name) == value, name


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=workloads, at=st.integers(0, 12), prefill=st.integers(0, 1),
       knobs=st.fixed_dictionaries({"overlap_score_credit": st.sampled_from([0.0, 1.0, 4.0]),
                                    "prefill_load_scale": st.sampled_from([0.0, 1.0, 3.0]),
                                    "disagg_decider": st.sampled_from(["always", "llmd_prefix", "dynamo_conditional"]),
                                    "non_cached_tokens": st.sampled_from([0, 8, 10**6]),
                                    "kv_link": st.sampled_from(["ib-ndr", "eth-100"])}))
def test_tokens_are_generates_whatever_is_retuned_mid_run(tiny_llama, reference, workload, at, prefill, knobs):
    fleet = fleet_of(tiny_llama, "dynamo", 3, num_prefill_replicas=prefill)
    ids = add_all(fleet, workload)
    for _ in range(at):
        if fleet.has_unfinished_requests():
            fleet.step()
    fleet.retune(**knobs)
    fleet.run()
    for rid, (p, m, _) in zip(ids, workload, strict=True):
        req = fleet.replicas[fleet.placement[rid]].requests[rid]
        assert req.output_token_ids == expected_output(reference(tuple(PROMPTS[p])), m, True, 256), rid
