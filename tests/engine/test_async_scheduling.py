"""Async scheduling (vLLM's AsyncScheduler): step n+1 is planned before step n's tokens are handed back.

What a student is told changes, each read off the records of two runs that differ only in the knob: a stop is
seen one step late and the step planned meanwhile is discarded; pages a finished request frees serve a
waiting one a step later; on a deployment's clock the host's share of a step hides behind the GPU's. The
output does not change. The scheduling is held to vLLM's own AsyncScheduler by tests/reference/vllm_oracle.py
--async-scheduling; greedy output to generate's by test_engine_reference.py."""

from __future__ import annotations

import itertools

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.hardware import STEP_OVERHEAD_MS

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12], [20, 21, 22, 23, 24, 25], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39]]


def _run(lab_model, async_scheduling: bool, stops=(), arrivals=(0, 0, 0), **knobs):
    engine = Engine(EngineConfig(model=lab_model, async_scheduling=async_scheduling, **knobs))
    for i, prompt in enumerate(PROMPTS):
        stop = [stops[i]] if i < len(stops) and stops[i] is not None else []
        engine.add_request(prompt, SamplingParams(max_tokens=8, ignore_eos=True, stop_token_ids=stop),
                           arrival_step=arrivals[i])
    return engine, engine.run()


def _finished_step(records, rid: str) -> int:
    return next(r.step for r in records for e in r.events if e.kind == "finished" and e.request_id == rid)


def test_the_output_is_the_same_and_every_token_is_sampled_in_the_same_step(lab_model):
    sync, sync_records = _run(lab_model, False)
    eager, eager_records = _run(lab_model, True)
    for rid, req in sync.requests.items():
        assert eager.requests[rid].output_token_ids == req.output_token_ids
        assert eager.requests[rid].token_steps == req.token_steps  # sampled when computed, handed back later
    # Without a stop nobody can foresee, no step is wasted: the last token's request is not planned again,
    # and one more turn, which runs nothing, hands the last tokens back.
    assert eager.counters["num_discarded_tokens"] == 0
    assert len(eager_records) == len(sync_records) + 1
    assert not eager_records[-1].batch and [e.kind for e in eager_records[-1].events].count("finished") >= 1
    assert "in flight" in next(e.reason for e in eager_records[-1].events if e.kind == "idle")


def test_a_stop_is_seen_a_step_late_and_the_step_planned_meanwhile_is_discarded(lab_model):
    plain, _ = _run(lab_model, False)
    stop = plain.requests["r0"].output_token_ids[3]  # a token r0 really samples, the 4th of its output
    sync, sync_records = _run(lab_model, False, stops=(stop,))
    eager, eager_records = _run(lab_model, True, stops=(stop,))
    r0 = eager.requests["r0"]
    assert r0.output_token_ids == sync.requests["r0"].output_token_ids == plain.requests["r0"].output_token_ids[:4]
    sampled_at = r0.token_steps[-1]
    assert _finished_step(sync_records, "r0") == sampled_at
    assert _finished_step(eager_records, "r0") == sampled_at + 1  # seen one step late
    # That step ran r0 anyway: one decode, computed and thrown away, and counted.
    late = {c.request_id: c for c in eager_records[sampled_at + 1].batch}["r0"]
    assert late.discarded and late.num_tokens == 1 and not late.new_token_ids
    assert eager.counters["num_discarded_tokens"] == 1 and sync.counters["num_discarded_tokens"] == 0
    [why] = [e.reason for e in eager_records[sampled_at + 1].events if e.kind == "finished"]
    assert f"in step {sampled_at}, handed back only now (async scheduling)" in why
    assert r0.finish_step == sampled_at + 1 and r0.finish_ms == r0.token_ms[-1]


def test_pages_a_finished_request_frees_serve_a_waiting_one_a_step_later(lab_model):
    # Five pages of 4 tokens: when r1 arrives r0 holds four of them, and r1's prompt needs two.
    knobs = dict(block_size=4, num_gpu_blocks=5, arrivals=(0, 5, 5))
    sync, sync_records = _run(lab_model, False, **knobs)
    eager, eager_records = _run(lab_model, True, **knobs)

    def admitted(records, rid):
        return next(r.step for r in records for e in r.events if e.kind == "admitted" and e.request_id == rid)

    blocked = [e.reason for r in sync_records[5:8] for e in r.events if e.kind == "blocked" and e.request_id == "r1"]
    assert blocked and all("pages" in why or "blocks" in why for why in blocked), blocked
    assert admitted(sync_records, "r1") == _finished_step(sync_records, "r0") + 1
    assert admitted(eager_records, "r1") == _finished_step(eager_records, "r0") + 1
    assert admitted(eager_records, "r1") == admitted(sync_records, "r1") + 1  # one step later
    assert eager.requests["r1"].output_token_ids == sync.requests["r1"].output_token_ids


def test_on_a_deployment_the_host_share_hides_behind_the_previous_step(lab_model):
    knobs = dict(deployment="llama-3.1-8b@h100-sxm")
    sync, sync_records = _run(lab_model, False, arrivals=(0, 0, 40), **knobs)
    eager, eager_records = _run(lab_model, True, arrivals=(0, 0, 40), **knobs)
    assert all(r.modeled.parts["overhead"] == STEP_OVERHEAD_MS for r in sync_records if r.batch)
    for before, rec in itertools.pairwise(eager_records):
        if rec.batch:  # a step after one that ran a batch pays no host time (an 8B step is longer than it)
            assert rec.modeled.parts["overhead"] == (0.0 if before.batch else STEP_OVERHEAD_MS), rec.step
    assert eager_records[0].modeled.parts["overhead"] == STEP_OVERHEAD_MS  # nothing ran before the first
    idle = [r.step for r in eager_records if not r.batch]
    assert idle, "r2 arrives after the others are done: the step after the gap pays in full"
    saved = sum(r.modeled.parts["overhead"] for r in sync_records) - \
        sum(r.modeled.parts["overhead"] for r in eager_records)
    assert saved > 0 and sync.clock_ms - eager.clock_ms == pytest.approx(saved)


@pytest.mark.parametrize("knobs, named", [
    (dict(speculative_method="ngram"), "speculative_method='ngram'"),
    (dict(step_order="prefill_first"), "step_order='prefill_first'"),
    (dict(preemption_mode="swap"), "preemption_mode='swap'"),
    (dict(engine_preset="sglang"), "step_order='prefill_first'"),
])
def test_what_async_scheduling_cannot_run_beside_is_named(knobs, named):
    with pytest.raises(ValueError, match="async_scheduling needs") as err:
        EngineConfig.for_preset(**{"engine_preset": "vllm_v1", **knobs, "async_scheduling": True})
    assert named in str(err.value)
