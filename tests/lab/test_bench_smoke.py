"""The benchmarks run end to end in their --quick mode and write results that add up.

No assertion here is about speed (that is what the benchmarks report, never what a
test checks); they check that each benchmark measured what it says it measured.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from engine import DEFAULT_MODEL


def _read(out: Path, name: str) -> dict:
    data = json.loads((out / f"{name}.json").read_text())
    assert data["benchmark"] == name and data["quick"] is True
    return data


def test_throughput_quick(tmp_path):
    from bench import throughput

    throughput.main(["--quick", "--out", str(tmp_path)])
    data = _read(tmp_path, "throughput")
    (model,) = data["models"]  # --quick benches only the tiny random Llama
    runs = {k: v["runs"] for k, v in model["tokens_per_s"].items()}
    assert set(runs) == {"engine", "hf_static", "hf_continuous"}
    assert all(t > 0 for r in runs.values() for t in r)
    for baseline in ("hf_static", "hf_continuous"):
        # The reported speed-up is the median of the per-repeat ratios of the listed runs.
        ratios = [e / b for e, b in zip(runs["engine"], runs[baseline], strict=True)]
        assert model["ratios"][f"vs_{baseline}"] == pytest.approx(statistics.median(ratios))
        # Same greedy tokens from all three: the systems did the same work.
        assert model["output_agreement_with_engine"][baseline] == 1.0
    assert model["engine_deterministic"]
    assert model["workload"]["num_requests"] == 8
    assert model["engine_settings"]["num_gpu_blocks"] >= 8
    assert model["decode"]["decode_steps"] > 0 and model["decode"]["gflops"] > 0
    assert model["decode"]["fraction_of_matmul_rate"] > 0


def test_scheduler_scale_quick(tmp_path):
    from bench import scheduler_scale

    scheduler_scale.main(["--quick", "--out", str(tmp_path)])
    data = _read(tmp_path, "scheduler_scale")
    assert [(r["prefix_caching"], r["policy"]) for r in data["headline"]] == [
        (False, "fcfs"), (True, "fcfs"), (False, "priority")]
    for row in data["headline"] + data["by_running"] + data["by_blocks"]:
        assert row["steps"] > 0 and row["us_per_step_p50"] > 0
        # Timed once the batch was full: every seat taken, so the times are per full batch.
        assert row["mean_batch"] == pytest.approx(row["running"], rel=0.1)
    assert [r["running"] for r in data["by_running"]] == [16, 32]
    assert sorted({r["blocks"] for r in data["by_blocks"]}) == [1_000, 10_000]
    for snap in data["snapshot"]:
        assert 0 < snap["pages_shown"] <= snap["blocks"]
    assert all(a["us_per_call"] > 0 for a in data["accounting"])


def test_scheduler_stub_serves_every_request():
    """The stub loop drives the real scheduler to completion and frees every page."""
    from bench.scheduler_scale import NEW_TOKENS, Setup, StubLoop

    loop = StubLoop(Setup(running=8, blocks=64, requests=40, prefix_caching=True))
    for _ in range(1000):
        if loop.done:
            break
        loop.step()
    assert loop.done
    assert all(len(r.output_token_ids) == NEW_TOKENS for r in loop.requests.values())
    assert loop.blocks.num_free_blocks == 64 and not loop.blocks.req_blocks
    # Everything freed still holds its prefix: cached-free pages are counted without a scan.
    cached_free = sum(loop.blocks.ref_count(b) == 0 for holders in loop.blocks.prefix.cached.values()
                      for b in holders)
    assert loop.blocks.num_cached_free_blocks == cached_free > 0


@pytest.mark.skipif(not Path(DEFAULT_MODEL).is_dir(), reason="the default model is not trained yet")
def test_step_latency_quick(tmp_path):
    from bench import step_latency

    step_latency.main(["--quick", "--out", str(tmp_path)])
    data = _read(tmp_path, "step_latency")
    assert len(data["lessons"]) == 2
    for lesson in data["lessons"]:
        assert lesson["steps"] > 0
        assert set(lesson["per_figure_ms_p50"]) >= set(data["page_figures"])
        # The page is part of the whole, and both include the engine step.
        assert lesson["step_ms"]["p50"] <= lesson["page_ms"]["p50"] <= lesson["all_figures_ms"]["p50"]
        assert [b["replayed_steps"] for b in lesson["branch"]] == [2]
        assert lesson["scrub_ms"]["n"] == 2


def test_pricing_quick(tmp_path):
    from bench import pricing

    pricing.main(["--quick", "--out", str(tmp_path)])
    data = _read(tmp_path, "pricing")
    (run,) = data["runs"]
    assert run["priced_over_plain"] == pytest.approx(run["step_ms_p50_priced"] / run["step_ms_p50_plain"])
    assert 0 < run["pricing_share_of_step"] < 1
    assert set(data["step_cost_us"]) == {"1", "16", "64"} and all(v > 0 for v in data["step_cost_us"].values())


def test_load_quick(tmp_path):
    from bench import load

    load.main(["--quick", "--out", str(tmp_path)])
    data = _read(tmp_path, "load")
    run = data["median_run"]
    assert run["requests"] == 20 and run["steps"] > 0 and run["wall_s"] > 0
    assert run["ms_per_step"] == pytest.approx(1000 * run["wall_s"] / run["steps"])


def test_records_memory_quick(tmp_path):
    from bench import records_memory

    records_memory.main(["--quick", "--out", str(tmp_path)])
    runs = _read(tmp_path, "records_memory")["runs"]
    assert [r["steps"] for r in runs] == [100, 1000]
    # Sharing never costs more than whole copies, and saves more as the run grows.
    assert all(0 < r["shared_mb"] <= r["whole_mb"] for r in runs)
    assert runs[1]["ratio"] >= runs[0]["ratio"]


def test_fleet_quick(tmp_path):
    from bench import fleet
    from engine.fleet.fleet import ROUTER_CLASSES

    fleet.main(["--quick", "--out", str(tmp_path)])
    data = _read(tmp_path, "fleet")
    run = data["serve"]
    assert run["requests"] > 0 and run["replica_steps"] >= run["requests"]  # each request takes a step at least
    assert run["trace_s_per_wall_s"] == pytest.approx(run["trace_s"] / run["wall_s"])
    assert {r["router"] for r in data["routing"]} == set(ROUTER_CLASSES)
    assert all(r["replicas"] == 16 and r["us_per_decision"] > 0 for r in data["routing"])
