"""The A/B page (AppTest): two configs on one workload, stepped in lock-step and compared."""

from __future__ import annotations

import json
import threading
import time

import pytest
from streamlit.testing.v1 import AppTest

from engine import Engine
from engine.workload import submit
from lab import budgets
from lab.budgets import heavy_job
from lab.compare import diff_table
from tests.ui.test_app import open_page


@pytest.fixture
def ab(lab_model, monkeypatch) -> AppTest:
    monkeypatch.setenv("LAB_MODEL", lab_model)
    return open_page("ab")


def press(app: AppTest, label: str) -> AppTest:
    app.button[[b.label for b in app.button].index(label)].click().run()
    assert not app.exception, app.exception
    return app


def start_b(app: AppTest, **knobs) -> AppTest:
    for knob, value in knobs.items():
        widget = app.selectbox if isinstance(value, str) else app.toggle if isinstance(value, bool) else \
            app.number_input
        widget(key=f"ab_B_{knob}").set_value(value)
    return press(app, "Start A/B at step 0")


def figure(app: AppTest, key: str) -> dict:
    (spec,) = [json.loads(c.proto.spec) for c in app.get("plotly_chart") if c.proto.id.endswith(f"-{key}")]
    return spec


def test_both_sides_start_as_the_lab_and_say_so(ab):
    lab = ab.session_state["session"].run
    a, b = ab.session_state["session"].ab_configs
    assert a == b == lab.config_next()
    assert "same knobs" in ab.info[0].value
    assert ab.number_input(key="ab_A_num_gpu_blocks").value == lab.config_next().num_gpu_blocks


def test_choosing_a_preset_for_b_sets_its_rules_and_says_which(ab):
    """Issue 31: choosing only engine_preset = sglang for B changed nothing: the form pinned vLLM v1's
    rules. Now B runs SGLang's rules, the form shows them, and a note names them; a rule changed in the
    same submit wins over the preset's."""
    from engine.presets import PRESET_RULES

    start_b(ab, engine_preset="sglang")
    a, b = ab.session_state["session"].ab_configs
    assert a.engine_preset == "vllm_v1" and b.engine_preset == "sglang"
    assert all(getattr(b, rule) == value for rule, value in PRESET_RULES["sglang"].items())
    assert ab.selectbox(key="ab_B_step_order").value == "prefill_first"
    note = next(m.value for m in ab.info if "set its rules" in m.value)
    assert "`step_order = prefill_first`" in note and "`admission_reserve = output_estimate`" in note
    start_b(ab, engine_preset="vllm_v0", step_order="decode_first")
    b = ab.session_state["session"].ab_configs[1]
    assert b.engine_preset == "vllm_v0" and b.step_order == "decode_first" and b.preemption_mode == "swap"


def test_lock_step_runs_each_config_on_the_same_workload(ab):
    start_b(ab, num_gpu_blocks=12, preemption_mode="swap")
    assert not ab.info  # the configs differ now
    press(ab, "Step both")
    ab.number_input(key="ab_n").set_value(5)
    press(ab, "Run")
    run = ab.session_state["session"].ab
    records_a, records_b = run.records
    assert len(records_a) == len(records_b) == 6  # lock-step
    assert {r.budget.num_gpu_blocks for r in records_b} == {12} and records_a[0].budget.num_gpu_blocks == 64
    # Each side is exactly the engine that config gives on the lab's workload.
    lab = ab.session_state["session"].run
    for config, records in zip(ab.session_state["session"].ab_configs, run.records, strict=True):
        engine = Engine(config)
        submit(engine, lab.items())
        assert [engine.step().without_timings() for _ in records] == [r.without_timings() for r in records]
    shown = "\n".join(m.value for m in ab.markdown)
    assert "### A <span" in shown and "step 5" in shown
    assert "num_gpu_blocks = **12** · preemption_mode = **swap**" in "\n".join(c.value for c in ab.caption)
    # Both block maps are drawn from their own side's last record.
    for side, records in zip("AB", run.records, strict=True):
        cells = [z for row in figure(ab, f"ab_blocks_{side}")["data"][0]["z"] for z in row if z is not None]
        assert len(cells) == records[-1].budget.num_gpu_blocks


def test_run_to_the_end_fills_the_comparison(ab):
    start_b(ab, max_num_seqs=2)
    press(ab, "Run to the end")
    run = ab.session_state["session"].ab
    assert run.done and ab.button(key="ab_step").disabled
    table = ab.dataframe[0].value
    expected = diff_table(*run.metrics())
    assert list(table["metric"]) == [row["metric"] for row in expected]
    steps = table[table["metric"] == "steps to finish"].iloc[0]
    assert (steps["A"], steps["B"]) == (len(run.records[0]), len(run.records[1]))
    assert steps["B"] > steps["A"]  # two sequences at a time take longer than sixteen
    for key in ("ab_ttft", "ab_itl", "ab_kv"):  # one line per side, overlaid
        assert [t["name"] for t in figure(ab, key)["data"]] == ["A", "B"]
    tokens_per_step = figure(ab, "ab_throughput")["data"][0]["y"]
    assert tokens_per_step == [m["aggregate"]["throughput_tokens_per_step"] for m in run.metrics()]


def test_a_bad_config_says_which_and_keeps_the_comparison(ab):
    before = ab.session_state["session"].ab
    press(ab, "Step both")
    start_b(ab, enable_prefix_caching=True, kv_allocation="contiguous")
    assert "Config B" in ab.error[0].value and "enable_prefix_caching needs kv_allocation='paged'" in ab.error[0].value
    assert ab.session_state["session"].ab is before and len(before.records[0]) == 1
    press(ab, "Both from the lab's knobs")
    assert ab.toggle(key="ab_B_enable_prefix_caching").value is False
    press(ab, "Step both")  # the page still works
    assert len(before.records[0]) == 2


def test_a_run_that_waits_for_a_turn_says_its_place_in_line(ab):
    """Both of the server's heavy-job turns are held by others: Run to the end waits, saying so from
    its callback (drawn while it waits), then runs when a turn frees up."""
    start_b(ab, max_num_seqs=2)
    release, holding = threading.Event(), []

    def other_job():
        with heavy_job():
            holding.append(1)
            release.wait(30)

    others = [threading.Thread(target=other_job) for _ in range(budgets.HEAVY_JOBS)]
    for t in others:
        t.start()
    while len(holding) < budgets.HEAVY_JOBS:
        time.sleep(0.01)

    def free_a_turn_once_ours_waits():
        while budgets.jobs_waiting() == 0:
            time.sleep(0.01)
        release.set()

    threading.Thread(target=free_a_turn_once_ours_waits).start()
    press(ab, "Run to the end")
    for t in others:
        t.join(5)
    assert ab.session_state["session"].ab.done
    assert any("yours is number 1 in line" in i.value for i in ab.info)


def test_the_form_picks_the_workload_and_the_page_names_it_leaving_the_lab_alone(ab):
    from engine.workload import PRESETS

    s = ab.session_state["session"]
    lab_items = s.run.items()
    assert f"Both run **{s.source.label}**, {len(lab_items)} requests." in "\n".join(c.value for c in ab.caption)
    ab.selectbox(key="ab_workload").set_value("shared_system_prompt")
    start_b(ab, max_num_seqs=2)
    preset = PRESETS["shared_system_prompt"]()
    assert s.ab.workload == preset and s.run.items() == lab_items
    assert f"Both run **preset shared_system_prompt**, {len(preset)} requests." in \
        "\n".join(c.value for c in ab.caption)
