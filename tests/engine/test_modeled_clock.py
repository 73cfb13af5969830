"""The engine's second clock: every real step priced on a deployment, deterministically.

The engine still runs the small model (it decides the tokens and fills the real KV
pool); with a deployment, each StepRecord also carries what that very batch would
cost on the named GPU, and the latencies are measured on that modeled clock.
"""

from __future__ import annotations

import itertools

import pytest

from engine import Engine, EngineConfig
from engine.cudagraph import capture_sizes
from engine.hardware import Deployment
from engine.workload import PRESETS, WorkloadError, WorkloadItem, submit
from lab.metrics import run_metrics

DEPLOYMENT = "llama-3.1-8b@h100-sxm"


def _run(lab_model: str, items: list[WorkloadItem], **knobs) -> tuple[Engine, list]:
    engine = Engine(EngineConfig(model=lab_model, deployment=DEPLOYMENT, **knobs))
    submit(engine, items)
    return engine, engine.run()


def test_each_record_is_its_own_batch_priced_on_the_deployment(lab_model):
    engine, records = _run(lab_model, PRESETS["burst"](), num_gpu_blocks=20, preemption_mode="swap",
                           block_size=8)
    dep = Deployment.parse(DEPLOYMENT)
    clock = 0.0
    swapped = 0
    for record in records:
        batch = [(c.num_tokens, c.start) for c in record.batch]  # new tokens against what was cached
        copies = sum(len(e.data["blocks"]) for e in record.events if e.kind in ("swapped_out", "swapped_in"))
        graphs = capture_sizes(engine.config.max_num_seqs, engine.config.max_num_batched_tokens, dep.gpu)
        expected = dep.step_cost(batch, copies * 8, graph_sizes=graphs)  # padded as vLLM's CUDA graphs pad
        assert record.modeled.total_ms == pytest.approx(expected.total_ms)
        assert record.modeled.parts == pytest.approx(expected.parts) and record.modeled.bound == expected.bound
        clock += record.modeled.total_ms
        assert record.modeled.clock_ms == pytest.approx(clock)  # arrivals by step: no jumps
        swapped += copies
    assert swapped > 0, "the pool was meant to be tight enough to swap"
    assert engine.clock_ms == pytest.approx(clock)


def test_the_same_run_twice_gives_identical_records_modeled_clock_included(lab_model):
    items = PRESETS["chat_mix"]()
    first, second = (_run(lab_model, items, num_gpu_blocks=16)[1] for _ in range(2))
    assert [r.without_timings() for r in first] == [r.without_timings() for r in second]
    assert all(r.modeled is not None for r in first)


def test_latencies_are_measured_on_the_modeled_clock(lab_model):
    engine, records = _run(lab_model, PRESETS["chat_mix"]())
    live = engine.metrics()
    assert run_metrics(records)["aggregate"]["ttft_ms"] == live["aggregate"]["ttft_ms"]
    start = {r.step: r.modeled.clock_ms - r.modeled.total_ms for r in records}
    end = {r.step: r.modeled.clock_ms for r in records}
    for m in live["requests"]:
        rid = m["request_id"]
        first_token = next(r.step for r in records for c in r.batch
                           if c.request_id == rid and c.new_token_id is not None)
        arrived = next(r.requests[rid].arrival_step for r in records if rid in r.requests)
        assert m["ttft_ms"] == pytest.approx(end[first_token] - start[arrived])
    agg = live["aggregate"]
    assert 0 < agg["mfu"] < 1 and 0 < agg["mbu"] < 1
    assert agg["throughput_tokens_per_s"] == pytest.approx(agg["generation_tokens"] / (engine.clock_ms / 1000))


def test_arrivals_by_time_and_the_clock_jumping_over_idle_time(lab_model):
    items = [WorkloadItem("ROMEO:\nWhat light?", max_tokens=4, ignore_eos=True, arrival_ms=250.0),
             WorkloadItem("JULIET:\nAy me.", max_tokens=4, ignore_eos=True, arrival_ms=3.0)]
    engine, records = _run(lab_model, items)
    first = records[0]
    assert [c.request_id for c in first.batch] == ["r1"]  # the earlier arrival, though listed second
    assert first.modeled.clock_ms == pytest.approx(3.0 + first.modeled.total_ms)  # jumped from 0 to 3 ms
    joined = next(r for r in records if "r0" in [c.request_id for c in r.batch])
    assert joined.modeled.clock_ms - joined.modeled.total_ms == pytest.approx(250.0)  # idle until it came
    assert not any(e.kind == "idle" for r in records for e in r.events)
    m = {x["request_id"]: x for x in engine.metrics()["requests"]}
    assert m["r0"]["ttft_ms"] == pytest.approx(joined.modeled.clock_ms - 250.0)
    assert run_metrics(records)["requests"][0]["ttft_ms"] == pytest.approx(m["r0"]["ttft_ms"])


def test_arrivals_by_time_need_a_deployment(lab_model):
    engine = Engine(EngineConfig(model=lab_model))
    with pytest.raises(WorkloadError, match="arrival_ms needs a deployment"):
        submit(engine, [WorkloadItem("ROMEO:", arrival_ms=5.0)])


def test_recompute_and_swap_reasons_quote_their_modeled_cost(lab_model):
    for mode, kind in (("swap", "swapped_out"), ("recompute", "recompute_started")):
        _, records = _run(lab_model, PRESETS["burst"](), num_gpu_blocks=20, preemption_mode=mode, block_size=8)
        reasons = [e.reason for r in records for e in r.events if e.kind == kind]
        assert reasons and all("(modeled)" in reason and DEPLOYMENT.split("@")[0] in reason for reason in reasons)


def test_without_a_deployment_nothing_is_modeled(lab_model):
    engine = Engine(EngineConfig(model=lab_model))
    submit(engine, PRESETS["chat_mix"]()[:2])
    records = engine.run()
    assert all(r.modeled is None for r in records)
    assert engine.metrics()["aggregate"]["mfu"] is None
    assert engine.clock_ms == pytest.approx(sum(r.timings.total_ms for r in records))


def test_a_bad_deployment_names_the_knob():
    for bad in ("llama-3.1-8b@h800", "gpt@h100-sxm", "llama"):
        with pytest.raises(ValueError, match="deployment"):
            EngineConfig(deployment=bad)


def test_batching_is_nearly_free_on_the_modeled_clock(lab_model):
    """Sixteen requests decoding together cost little more per step than one alone: the whole case
    for continuous batching, which this machine's own clock cannot show."""
    items = [WorkloadItem(f"ROMEO:\nLine {i}.", max_tokens=24, ignore_eos=True) for i in range(16)]
    _, together = _run(lab_model, items, max_num_seqs=16)
    _, alone = _run(lab_model, items[:1], max_num_seqs=16)
    decode = [r.modeled.total_ms for r in together if r.budget.decode_tokens == 16]
    single = [r.modeled.total_ms for r in alone if r.budget.decode_tokens == 1]
    assert decode and single and max(decode) < 1.1 * min(single)
    assert list(itertools.accumulate(r.modeled.total_ms for r in together))[-1] < 1.3 * sum(
        r.modeled.total_ms for r in alone)


def test_queue_time_and_the_timeline_in_modeled_ms(lab_model):
    from lab.charts import roofline, timeline

    engine, records = _run(lab_model, PRESETS["burst"](), max_num_seqs=2)
    live = {m["request_id"]: m for m in engine.metrics()["requests"]}
    replayed = {m["request_id"]: m for m in run_metrics(records)["requests"]}
    assert any(m["queue_time_ms"] > 0 for m in live.values())  # two seats: the burst queues
    for rid, m in live.items():
        assert replayed[rid]["queue_time_ms"] == pytest.approx(m["queue_time_ms"])
    end = records[-1].modeled.clock_ms
    fig = timeline.metrics_figure(records, len(records), ms_until=end)
    mids = [r.modeled.clock_ms - r.modeled.total_ms / 2 for r in records]
    assert list(fig.data[0].x) == pytest.approx(mids) and list(fig.layout.xaxis.range) == [0, end]
    from lab.charts.window import RECENT_STEPS

    heat = timeline.requests_figure(records, len(records), ms_until=end).data[0]
    assert list(heat.x) == pytest.approx(mids[-RECENT_STEPS:])  # a long run: the recent window, in modeled ms
    roof = roofline.figure(records)
    parts = {t.name: t.x[0] for t in roof.data if t.type == "bar"}
    assert sum(parts.values()) == pytest.approx(records[-1].modeled.total_ms)
