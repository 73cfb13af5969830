"""A/B runs: the same workload under two configs, stepped together; the summary and
figures report each side's own records."""

from __future__ import annotations

import dataclasses

import pytest

from engine import Engine, EngineConfig
from engine.metrics import METRICS, metric_values
from engine.workload import WorkloadItem, submit
from lab.compare import NO_DIRECTION, ABRun, diff_table, kv_usage_figure, latency_ecdf, throughput_figure
from lab.metrics import run_metrics

WORKLOAD = [WorkloadItem("JULIET: O Romeo, Romeo"[: 6 + 2 * i], max_tokens=8 + i, arrival_step=i // 3,
                         ignore_eos=True) for i in range(6)]


def config(model: str, **knobs) -> EngineConfig:
    return EngineConfig(model=model, block_size=4, num_gpu_blocks=24, max_num_batched_tokens=32, max_num_seqs=4,
                        **knobs)


def test_identical_configs_give_identical_records(tiny_llama):
    ab = ABRun(config(tiny_llama), config(tiny_llama), WORKLOAD)
    ab.run()
    a, b = ab.records
    assert a and [r.without_timings() for r in a] == [r.without_timings() for r in b]
    rows = {row["metric"] + row["unit"]: row for row in diff_table(*ab.metrics())}
    assert rows["TTFT p95steps"]["delta"] == 0 and rows["TTFT p95steps"]["better"] == "no difference"


@pytest.fixture(scope="module")
def small_pool(tiny_llama) -> ABRun:
    """B has a third of A's pool, so its requests outgrow it and get preempted."""
    big = config(tiny_llama)
    ab = ABRun(big, dataclasses.replace(big, num_gpu_blocks=8), WORKLOAD)
    ab.run()
    return ab


def test_each_side_matches_a_solo_run(small_pool):
    """Stepping in lock-step changes nothing: each side is the run its config gives alone."""
    for engine, records in zip(small_pool.engines, small_pool.records, strict=True):
        solo = Engine(dataclasses.replace(engine.config))
        submit(solo, WORKLOAD)
        assert [r.without_timings() for r in solo.run()] == [r.without_timings() for r in records]


def test_the_side_that_finishes_first_idles(small_pool):
    a, b = small_pool.records
    assert len(a) < len(b), "the small pool must take longer"
    ab = ABRun(small_pool.engines[0].config, small_pool.engines[1].config, WORKLOAD)
    for _ in range(len(a)):
        ab.step()
    assert not ab.done
    rec_a, rec_b = ab.step()
    assert rec_a is None and rec_b.step == len(a)
    assert len(ab.records[0]) == len(a)


def test_smaller_pool_shows_more_preemptions(small_pool):
    metrics_a, metrics_b = small_pool.metrics()
    rows = {(row["metric"], row["unit"]): row for row in diff_table(metrics_a, metrics_b)}
    preemptions = rows["preemptions", "count"]
    assert preemptions["A"] == small_pool.engines[0].counters["num_preemptions"] == 0
    assert preemptions["B"] == small_pool.engines[1].counters["num_preemptions"] > 0
    assert preemptions["delta"] == preemptions["B"] and preemptions["better"] == "A"
    assert rows["recomputed tokens", "tokens"]["B"] > 0
    assert rows["peak KV usage", "fraction"]["better"] == NO_DIRECTION  # issue 31: the table read "None"
    steps = rows["steps to finish", "steps"]
    assert (steps["A"], steps["B"]) == tuple(len(r) for r in small_pool.records)
    assert steps["change_pct"] == pytest.approx(100 * (steps["B"] - steps["A"]) / steps["A"])
    for row in rows.values():  # each value is the aggregate the metrics hold, under its row's name
        assert row["A"] is not None and row["B"] is not None, row


def test_figures_draw_both_sides(small_pool):
    metrics_a, metrics_b = small_pool.metrics()
    for key in ("ttft_steps", "itl_steps"):
        fig = latency_ecdf(metrics_a, metrics_b, key)
        assert [t.name for t in fig.data] == ["A", "B"]
        for trace, metrics in zip(fig.data, (metrics_a, metrics_b), strict=True):
            assert list(trace.x) == sorted(metric_values(metrics["requests"], key))
            assert trace.y[-1] == 1.0
    kv = kv_usage_figure(*small_pool.records, labels=("24 pages", "8 pages"))
    assert [t.name for t in kv.data] == ["24 pages", "8 pages"]
    assert max(kv.data[1].y) == 100 * run_metrics(small_pool.records[1])["aggregate"]["peak_kv_cache_usage_perc"]
    bars = throughput_figure(metrics_a, metrics_b)
    assert list(bars.data[0].y) == [m["aggregate"]["throughput_tokens_per_step"] for m in (metrics_a, metrics_b)]


def test_the_same_workload_priced_on_two_links_schedules_alike_and_costs_apart(lab_model):
    """Swap over PCIe Gen3 against NVLink-C2C: the engine makes the same decisions step for step;
    only the modeled copy time, and with it every ms latency, differs."""
    from engine.workload import PRESETS

    base = EngineConfig(model=lab_model, num_gpu_blocks=20, block_size=8, preemption_mode="swap")
    ab = ABRun(dataclasses.replace(base, deployment="llama-3.1-8b@h100-sxm+pcie-gen3"),
               dataclasses.replace(base, deployment="llama-3.1-8b@h100-sxm+nvlink-c2c"), PRESETS["burst"]())
    ab.run()
    slow, fast = ab.records
    assert [r.batch for r in slow] == [r.batch for r in fast] and any(r.modeled.swap_ms for r in slow)
    for a, b in zip(slow, fast, strict=True):
        if a.modeled.swap_ms:
            assert a.modeled.swap_ms > b.modeled.swap_ms
        else:
            assert a.modeled.total_ms == b.modeled.total_ms
    rows = {(row["metric"], row["unit"]): row for row in diff_table(*ab.metrics())}
    assert rows["TTFT p95", "ms"]["better"] in ("B", "no difference")
    assert rows["steps to finish", "steps"]["better"] == "no difference"


def test_step_identical_runs_show_no_difference_and_wall_time_is_never_judged(tiny_llama):
    """Two identical configs: every deterministic row reads 'no difference' with a 0% change (not
    None), and on this machine's clock the ms and tokens/s rows are shown but not called better."""
    from lab.compare import CLOCKED, WALL_TIME

    config = EngineConfig(model=tiny_llama, num_gpu_blocks=12, block_size=4)
    items = [WorkloadItem(f"r{i} hello there", max_tokens=8 + i, ignore_eos=True) for i in range(4)]
    ab = ABRun(config, config, items)
    ab.run()
    rows = diff_table(*ab.metrics(), measured=True)
    for row in rows:
        clocked = any(row["metric"] == METRICS[m].label and row["unit"] == METRICS[m].unit for m in CLOCKED)
        if clocked:
            assert row["better"] == WALL_TIME
        elif row["better"] not in (None, NO_DIRECTION):
            assert row["better"] == "no difference" and row["change_pct"] == 0.0, row
    preemptions = next(r for r in rows if r["metric"] == METRICS["num_preemptions"].label)
    assert preemptions["change_pct"] == 0.0
