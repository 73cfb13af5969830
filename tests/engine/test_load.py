"""Load in time: the shipped trace against its published statistics, the rate generator against its
parameters, SLO verdicts and goodput, and a queue that grows once the offered rate passes what the
engine can serve."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import numpy as np
import pytest

from engine import Engine, EngineConfig
from engine.metrics import Slo, serving_metrics
from engine.workload import WorkloadSource, submit
from engine.workload.load import MAX_TOTAL_TOKENS, TRACES, LengthDist, RateSpec, TraceSpec, trace_rows
from lab.metrics import run_metrics

DEPLOYMENT = "llama-3.1-8b@h100-sxm"


@pytest.mark.parametrize(("name", "count", "prompt_median", "output_median"),
                         [("azure-conv", 19366, 1020, 129), ("azure-code", 8819, 1469, 13)])
def test_the_shipped_traces_match_their_published_statistics(name, count, prompt_median, output_median):
    rows = trace_rows(name)
    assert len(rows) == count
    assert statistics.median(r[1] for r in rows) == prompt_median
    assert statistics.median(r[2] for r in rows) == output_median
    assert all(a[0] <= b[0] for a, b in zip(rows, rows[1:], strict=False))  # arrivals in order


def test_a_trace_rescaled_to_a_rate_keeps_its_lengths_and_sets_its_average():
    spec = TraceSpec("azure-conv", rate=4.0, duration_s=60, length_scale=0.1)
    items = spec.items()
    assert len(items) == 240 and max(i.arrival_ms for i in items) < 60_000
    rows = trace_rows("azure-conv")[:240]
    for item, (_, prompt, output) in zip(items, rows, strict=True):
        assert item.prompt_tokens + item.max_tokens <= MAX_TOTAL_TOKENS and item.length_scale == 0.1
        assert item.max_tokens == min(max(1, round(output * 0.1)), MAX_TOTAL_TOKENS // 2)
        assert item.prompt_tokens == min(max(1, round(prompt * 0.1)), MAX_TOTAL_TOKENS - item.max_tokens)
    native = TraceSpec("azure-code", duration_s=120).items()  # its own timing: the first two minutes
    assert [i.arrival_ms for i in native] == [round(r[0] * 1000, 3) for r in trace_rows("azure-code") if r[0] < 120]
    assert set(TRACES) == {"azure-conv", "azure-code"}


@pytest.mark.parametrize("cv", [1.0, 3.0])
def test_drawn_arrivals_have_the_rate_and_burstiness_asked_for(cv):
    spec = RateSpec(rate=20.0, cv=cv, duration_s=3600, seed=7)
    arrivals = spec.arrivals_s()[:400]  # capped at a workload's 500 requests
    gaps = np.diff(spec.arrivals_s())
    n = len(gaps)
    assert abs(gaps.mean() - 1 / 20) < 4 * (cv / 20) / math.sqrt(n)  # within four standard errors
    assert abs(gaps.std() / gaps.mean() - cv) < 0.25 * cv
    assert len(arrivals) == 400


def test_length_distributions_have_the_medians_and_ranges_asked_for():
    rng = np.random.default_rng(0)
    lognormal = LengthDist("lognormal", 1000, 0.8).draw(rng, 20_000)
    assert abs(np.median(lognormal) / 1000 - 1) < 0.03
    assert abs(np.std(np.log(lognormal)) - 0.8) < 0.02
    uniform = LengthDist("uniform", 10, 50).draw(rng, 20_000)
    assert uniform.min() >= 10 and uniform.max() <= 50 and abs(uniform.mean() - 30) < 0.5
    assert set(LengthDist("fixed", 64).draw(rng, 5)) == {64}
    for bad in (dict(kind="normal"), dict(kind="uniform", a=10, b=5), dict(a=0)):
        with pytest.raises(ValueError):
            LengthDist(**bad)


def _serve(lab_model, source: WorkloadSource, **knobs) -> Engine:
    engine = Engine(EngineConfig(model=lab_model, deployment=DEPLOYMENT, num_gpu_blocks=128, max_num_seqs=32,
                                 slo_ttft_ms=300, slo_tpot_ms=30, **knobs))
    submit(engine, source.items())
    engine.run()
    return engine


def test_slo_verdicts_goodput_and_attainment(lab_model):
    engine = _serve(lab_model, WorkloadSource(load=TraceSpec("azure-conv", rate=8.0, duration_s=15)))
    metrics = engine.metrics()
    agg = metrics["aggregate"]
    slo = Slo(300, 30, 90)
    finished = [m for m in metrics["requests"] if m["finish_reason"] == "length"]
    scale = TraceSpec("azure-conv").length_scale  # each of its later tokens stands for 1/scale real ones
    for m in finished:
        n = m["num_generation_tokens"]
        expected_tpot = (m["e2e_ms"] - m["ttft_ms"]) / (n - 1) * scale if n > 1 else None
        assert m["tpot_ms"] == pytest.approx(expected_tpot) if expected_tpot else m["tpot_ms"] is None
        assert m["slo_missed"] == slo.missed(m)
    good = sum(not m["slo_missed"] for m in finished)
    assert agg["slo_attainment"] == good / len(finished) and 0 <= agg["slo_attainment"] <= 1
    assert agg["goodput"] <= agg["request_throughput"]
    assert agg["goodput"] == pytest.approx(good / (engine.clock_ms / 1000))
    assert agg["slo_met"] == (agg["slo_attainment"] >= 0.9)
    replayed = run_metrics(_records_of(lab_model), slo)["aggregate"]  # the same from records alone
    assert replayed["goodput"] == pytest.approx(agg["goodput"])
    flat = serving_metrics(agg)
    assert flat["ttft_ms_p90"] == agg["ttft_ms"]["p90"] and flat["median_tpot_ms"] == agg["tpot_ms"]["p50"]


def _records_of(lab_model) -> list:
    engine = Engine(EngineConfig(model=lab_model, deployment=DEPLOYMENT, num_gpu_blocks=128, max_num_seqs=32,
                                 slo_ttft_ms=300, slo_tpot_ms=30))
    submit(engine, TraceSpec("azure-conv", rate=8.0, duration_s=15).items())
    return engine.run()


def test_ttft_rises_with_the_offered_rate_and_goodput_falls_past_the_knee(lab_model):
    runs = [_serve(lab_model, WorkloadSource(load=TraceSpec("azure-conv", rate=r, duration_s=15))).metrics()
            ["aggregate"] for r in (2.0, 8.0, 32.0)]
    ttft = [a["ttft_ms"]["p90"] for a in runs]
    assert ttft[0] < ttft[1] < ttft[2]
    assert runs[0]["slo_attainment"] > runs[2]["slo_attainment"]
    assert runs[2]["goodput"] < runs[2]["request_throughput"]


def test_a_trace_run_is_deterministic(lab_model):
    first, second = (_records_of(lab_model) for _ in range(2))
    assert [r.without_timings() for r in first] == [r.without_timings() for r in second]


def test_the_cli_runs_a_trace_and_writes_metrics_named_as_the_serving_benchmark(lab_model, tmp_path):
    out = tmp_path / "metrics.json"
    proc = subprocess.run([sys.executable, "-m", "engine", "--model", lab_model, "--trace", "azure-code", "--rate",
                           "4", "--duration-s", "5", "--deployment", DEPLOYMENT, "--slo-ttft-ms", "500",
                           "--slo-tpot-ms", "50", "--metrics-json", str(out), "--sweep-rate", "1,4"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert {"request_throughput", "goodput", "ttft_ms_p90", "tpot_ms_p90", "mean_ttft_ms"} <= set(data)
    assert "SLO attainment" in proc.stdout and "offered load" in proc.stdout
    for args, said in ((["--trace", "azure-conv", "--rate", "-1"], "--rate"),
                       (["--trace", "nope"], "invalid choice"),
                       (["--trace", "azure-conv", "--slo-tpot-ms", "0"], "--slo-tpot-ms"),
                       (["--trace", "azure-conv"], None)):
        bad = subprocess.run([sys.executable, "-m", "engine", "--model", lab_model, *args]
                             + (["--deployment", DEPLOYMENT] if said else []) + (["--duration-s", "1"]),
                             capture_output=True, text=True, timeout=300)
        assert bad.returncode == 2 and (said or "--deployment") in bad.stderr, bad.stderr


def test_a_scaled_request_is_priced_at_full_size_its_swaps_included(lab_model):
    """A request at a tenth of its size stands for ten times the tokens: each of its decode tokens is
    ten real decode steps (each reading every weight, so memory-bound however many requests decode:
    issue 31, bug 8 priced them as one compute-bound pass of ten tokens each), a prompt chunk is ten
    times the tokens in one real step, and a swap copies ten times the bytes, once."""
    from engine.hardware import Deployment

    engine = Engine(EngineConfig(model=lab_model, deployment=DEPLOYMENT, num_gpu_blocks=24, block_size=8,
                                 preemption_mode="swap", max_num_seqs=16))
    submit(engine, TraceSpec("azure-conv", rate=16.0, duration_s=3, length_scale=0.1).items())
    records = engine.run()
    dep = Deployment.parse(DEPLOYMENT)
    copied = [r for r in records if any(e.kind in ("swapped_out", "swapped_in") for e in r.events)]
    assert copied, "the pool was meant to be tight enough to swap"
    for r in copied:
        blocks = sum(len(e.data["blocks"]) for e in r.events if e.kind in ("swapped_out", "swapped_in"))
        assert r.modeled.parts["swap"] == pytest.approx(dep.swap_ms(blocks * 8 / 0.1))
    weights_ms = dep.step_cost([(1, 0)]).parts["linear"]  # one real step's read of every weight
    for r in records:
        real_tokens = sum(c.num_tokens for c in r.batch) / 0.1
        decodes = any(c.kind == "decode" for c in r.batch)
        assert r.modeled.parts["linear"] >= (10 if decodes else 1) * weights_ms * 0.999  # each real step reads them
        assert r.modeled.flops >= 2 * dep.weight_bytes / 2 * real_tokens * 0.9  # every real token's matmuls
        if all(c.kind == "decode" for c in r.batch):
            assert r.modeled.bound == "memory", (r.step, len(r.batch))
            assert r.modeled.parts["linear"] == pytest.approx(10 * dep.step_cost([(1, 0)] * len(r.batch))
                                                             .parts["linear"])


@pytest.mark.parametrize(("args", "said"), [
    (["--sweep-rate", "1,inf"], "--sweep-rate"),
    (["--sweep-rate", "1,2000"], "rate"),
    (["--metrics-json", "/nonexistent/m.json"], "--metrics-json: cannot write /nonexistent/m.json (no such folder)"),
])
def test_the_cli_names_a_bad_output_or_rate_before_it_runs_anything(lab_model, args, said):
    """Issue 32, case 11: these failed after the first load had run (or the whole run), with exit 1."""
    proc = subprocess.run([sys.executable, "-m", "engine", "--model", lab_model, "--trace", "azure-conv",
                           "--duration-s", "2", "--deployment", DEPLOYMENT, *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert "requests finished" not in proc.stderr and "request  status" not in proc.stdout  # nothing ran
