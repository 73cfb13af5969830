"""Admission control at the door (engine/admission.py): vLLM 0.32's queue limits, replayed from the
records by their own reading of the rule, and the lab's SLO admission rule, which must trade served
requests for on-time ones under load."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine, EngineConfig, SamplingParams
from engine.metrics import Slo
from engine.request import FinishReason
from engine.workload import WorkloadSource, submit
from engine.workload.load import TraceSpec

DEPLOYMENT = "llama-3.1-8b@h100-sxm"


def replay_queue_limits(records, prompt_tokens: dict[str, int], max_reqs: int | None,
                        max_tokens: int | None) -> list[tuple[str, str | None]]:
    """Which rule refuses each arriving request, as vLLM's AsyncLLM.check_admission decides: read from
    the records alone (who arrived, who was refused, who has a token, who finished) before each arrival."""
    in_flight: set[str] = set()
    has_token: set[str] = set()
    verdicts = []
    for record in records:
        refused = {e.request_id: e.data["rule"] for e in record.events if e.kind == "rejected"}
        for event in record.events:
            if event.kind != "arrived":
                continue
            rid = event.request_id
            if refused.get(rid) == "never_fits":  # too big for these knobs: refused before any queue is looked at
                verdicts.append((rid, "never_fits"))
                continue
            queued = sum(prompt_tokens[r] for r in in_flight if r not in has_token)
            rule = ("max_num_queued_reqs" if max_reqs is not None and len(in_flight) + 1 > max_reqs else
                    "max_num_queued_tokens" if max_tokens is not None and queued >= max_tokens else None)
            verdicts.append((rid, rule))
            assert refused.get(rid) == rule, (record.step, rid, refused.get(rid), rule)
            if rid not in refused:
                in_flight.add(rid)
        has_token |= {c.request_id for c in record.batch if c.new_token_id is not None}
        in_flight -= {e.request_id for e in record.events if e.kind == "finished"}
    return verdicts


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(max_reqs=st.sampled_from([None, 1, 2, 3, 5]), max_tokens=st.sampled_from([None, 1, 8, 20, 40]),
       workload=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 6), st.integers(0, 8)), min_size=1,
                         max_size=10),
       budget=st.sampled_from([8, 16, 64]), chunked=st.booleans())
def test_queue_limits_refuse_as_vllms_server_does(lab_model, max_reqs, max_tokens, workload, budget, chunked):
    engine = Engine(EngineConfig(model=lab_model, max_num_queued_reqs=max_reqs, max_num_queued_tokens=max_tokens,
                                 max_num_batched_tokens=budget, enable_chunked_prefill=chunked, max_num_seqs=4))
    for i, (prompt, new, arrival) in enumerate(workload):
        engine.add_request([1 + (i * 7 + j) % 90 for j in range(prompt)], SamplingParams(max_tokens=new,
                           ignore_eos=True), arrival_step=arrival)
    records = engine.run()
    prompts = {rid: req.num_prompt_tokens for rid, req in engine.requests.items()}
    verdicts = replay_queue_limits(records, prompts, max_reqs, max_tokens)
    assert len(verdicts) == len(workload) and not engine.has_unfinished_requests()
    for rid, rule in verdicts:
        req = engine.requests[rid]
        assert (req.finish_reason.value == "rejected") == (rule is not None)
        if rule not in (None, "never_fits"):
            assert rule in req.refusal and "503" in req.refusal and not req.output_token_ids


def test_a_full_queue_refuses_the_next_arrival_and_a_live_change_takes_the_one_after(lab_model):
    engine = Engine(EngineConfig(model=lab_model, max_num_queued_reqs=1))
    for step in (0, 0, 3):
        engine.add_request([5, 6, 7, 8], SamplingParams(max_tokens=6, ignore_eos=True), arrival_step=step)
    engine.step()
    assert [r.finish_reason for r in engine.requests.values()][:2] == [None, FinishReason.REJECTED]
    engine.update_config(max_num_queued_reqs=None)  # a live knob: the server's limit lifted
    engine.run()
    assert engine.requests["r2"].finish_reason == FinishReason.LENGTH  # r0 still ran when it arrived
    assert engine.metrics()["aggregate"]["num_requests_rejected"] == 1


@pytest.mark.parametrize(("knobs", "named"), [
    (dict(max_num_queued_reqs=-1), r"max_num_queued_reqs must be a number of requests in \[1, 1000000\]"),
    (dict(max_num_queued_reqs=0), r"max_num_queued_reqs must be a number of requests in \[1, "),
    (dict(max_num_queued_tokens=-5), "max_num_queued_tokens must be a number of tokens"),
    (dict(max_num_queued_tokens=1.5), "max_num_queued_tokens"),
    (dict(slo_admission=True), "slo_admission needs slo_ttft_ms"),
    (dict(slo_admission=True, slo_ttft_ms=200.0), "and a deployment"),
    (dict(slo_admission="yes", slo_ttft_ms=200.0, deployment=DEPLOYMENT), "slo_admission must be True or False"),
])
def test_bad_admission_knobs_are_named(knobs, named):
    with pytest.raises(ValueError, match=named):
        EngineConfig(**knobs)


def _load_run(lab_model, rate: float, **knobs) -> Engine:
    engine = Engine(EngineConfig(model=lab_model, deployment=DEPLOYMENT, num_gpu_blocks=128, max_num_seqs=32,
                                 slo_ttft_ms=300, slo_tpot_ms=30, **knobs))
    submit(engine, WorkloadSource(load=TraceSpec("azure-conv", rate=rate, duration_s=15)).items())
    engine.run()
    return engine


def test_slo_admission_serves_fewer_and_more_of_them_on_time(lab_model):
    """Past the knee, refusing the requests that cannot make their TTFT target raises the share of served
    requests on time; the refused count as misses, so attainment cannot be bought by refusing."""
    plain, guarded = (_load_run(lab_model, 32.0, slo_admission=on) for on in (False, True))
    before, after = (e.metrics() for e in (plain, guarded))
    a, b = before["aggregate"], after["aggregate"]
    assert a["num_requests_rejected"] == 0 < b["num_requests_rejected"]
    assert b["on_time_served"] > a["on_time_served"] and b["ttft_ms"]["p90"] < a["ttft_ms"]["p90"]
    slo = Slo(300, 30, 90)
    served = [m for m in after["requests"] if m["finish_reason"] != "rejected"]
    good = sum(not slo.missed(m) for m in served)
    assert b["slo_attainment"] == pytest.approx(good / len(after["requests"]))
    assert b["on_time_served"] == pytest.approx(good / len(served))
    refused = [r for r in guarded.requests.values() if r.finish_reason.value == "rejected"]
    assert all("estimated TTFT" in r.refusal and "over slo_ttft_ms=300" in r.refusal for r in refused)
    # Each refusal's estimate, read back from its sentence, is over the target it names.
    assert all(float(r.refusal.split("estimated TTFT ")[1].split(" ms")[0]) > 300 for r in refused)


def test_slo_admission_refuses_nothing_below_the_knee(lab_model):
    quiet = _load_run(lab_model, 1.0, slo_admission=True).metrics()["aggregate"]
    assert quiet["num_requests_rejected"] == 0
