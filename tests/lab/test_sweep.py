"""The knob sweep: values read and checked as the engine checks them, each point equal to an
independent run of that config, the same table every time, and a page that survives bad input."""

from __future__ import annotations

import dataclasses
import json

import pytest
from streamlit.testing.v1 import AppTest

from engine import Engine, EngineConfig
from engine.knobs import SWEEP_KNOBS
from engine.metrics import METRICS
from engine.workload import PRESETS, submit
from lab.metrics import run_metrics
from lab.sweep import COLUMNS, MAX_VALUES, PANELS, figure, parse_values, run_sweep, table
from tests.ui.test_app import open_page

WALL_TIME = {"throughput (tokens/s)", "TTFT p95 (ms)", "ITL p95 (ms)", "request throughput (requests/s)",
             "TTFT p90 (ms)", "TPOT p90 (ms)"}  # this machine's wall time


@pytest.fixture(scope="module")
def base(tiny_llama) -> EngineConfig:
    return EngineConfig(model=tiny_llama, block_size=8, num_gpu_blocks=20, num_cpu_blocks=16)


@pytest.mark.parametrize(("knob", "text", "expected"), [
    ("max_num_seqs", " 1, 2,4 ,2", [1, 2, 4]),  # spaces ignored, repeats dropped, order kept
    ("enable_chunked_prefill", "true, false", [True, False]),
    ("watermark", "0, 0.1", [0.0, 0.1]),
    ("step_order", "prefill_first,decode_first", ["prefill_first", "decode_first"]),
])
def test_values_are_read_as_the_knob_takes_them(base, knob, text, expected):
    assert parse_values(knob, text, base) == expected


@pytest.mark.parametrize(("knob", "text", "words"), [
    ("max_num_seqs", "", "give the values of max_num_seqs"),
    ("max_num_seqs", "4, four", "max_num_seqs = 'four' cannot be run: expected an integer"),
    ("max_num_seqs", "0", "max_num_seqs = '0' cannot be run: max_num_seqs must be an integer in [1,"),
    ("step_order", "decode_first, random", "step_order = 'random' cannot be run: step_order must be one of"),
    ("max_num_seqs", ",".join(map(str, range(1, MAX_VALUES + 2))), f"at most {MAX_VALUES} values"),
    ("model", "gpt2", "a sweep can vary"),
])
def test_bad_values_name_the_knob_and_the_value(base, knob, text, words):
    with pytest.raises(ValueError) as info:
        parse_values(knob, text, base)
    assert words in str(info.value)


def test_every_suggestion_is_a_valid_sweep(base):
    for knob, text in SWEEP_KNOBS.items():
        assert len(parse_values(knob, text, dataclasses.replace(base, num_gpu_blocks=64))) >= 2


def test_each_point_is_the_run_of_its_config_and_the_sweep_repeats_exactly(base):
    workload, base = PRESETS["burst"](), dataclasses.replace(base, num_gpu_blocks=128)  # seats, not pages, limit
    values = [1, 3, 8]
    progress = []
    points = run_sweep(base, workload, "max_num_seqs", values, progress=progress.append)
    assert progress == [1, 2, 3] and [p.value for p in points] == values and all(p.finished for p in points)
    for point in points:  # an engine of the same config, stepped here, gives the same numbers
        engine = Engine(dataclasses.replace(base, max_num_seqs=point.value))
        submit(engine, workload)
        expected = run_metrics(engine.run())["aggregate"]
        for m in COLUMNS:
            if m.heading not in WALL_TIME:
                value = expected[m.key][m.stat] if m.stat else expected[m.key]
                assert table("max_num_seqs", [point])[0][m.heading] == value
    steps = [row["steps to finish"] for row in table("max_num_seqs", points)]
    assert steps[0] > steps[-1]  # one seat at a time serves the burst in many more steps than eight
    again = run_sweep(base, workload, "max_num_seqs", values)
    strip = [{k: v for k, v in row.items() if k not in WALL_TIME} for row in table("max_num_seqs", again)]
    assert strip == [{k: v for k, v in row.items() if k not in WALL_TIME} for row in table("max_num_seqs", points)]


def test_figure_draws_the_table(base):
    points = run_sweep(base, PRESETS["burst"]()[:4], "preemption_mode", ["recompute", "swap"])
    rows = table("preemption_mode", points)
    fig = figure("preemption_mode", points, current="swap")
    assert [(shape.x0, shape.x1) for shape in fig.layout.shapes] == [(0.7, 1.3)] * len(PANELS)  # "swap" is x=1
    assert not figure("preemption_mode", points[:1], current="swap").layout.shapes  # not swept: no band
    lines = [line for _, panel in PANELS for line in panel]
    assert len(fig.data) == len(lines)
    for trace, (name, metric_id) in zip(fig.data, lines, strict=True):
        assert trace.name == name and list(trace.x) == ["recompute", "swap"]
        assert list(trace.y) == [row[METRICS[metric_id].heading] for row in rows]


# ---- the page ----------------------------------------------------------------------------------


@pytest.fixture
def page(lab_model, monkeypatch) -> AppTest:
    monkeypatch.setenv("LAB_MODEL", lab_model)
    return open_page("sweep")


def run(app: AppTest, knob: str | None = None, values: str | None = None) -> AppTest:
    if knob is not None:
        app.selectbox(key="sweep_knob").set_value(knob).run()
    if values is not None:
        app.text_input(key="sweep_values").set_value(values)
    app.button(key="sweep_run").click().run()
    assert not app.exception, app.exception
    return app


def shown_rows(app: AppTest) -> list[dict]:
    (frame,) = [d.value for d in app.dataframe]
    return frame.to_dict("records")


def test_page_runs_a_sweep_and_keeps_it_through_a_bad_one(page):
    run(page, knob="num_gpu_blocks")
    assert page.text_input(key="sweep_values").value == SWEEP_KNOBS["num_gpu_blocks"]  # the knob's suggestion
    rows = shown_rows(page)
    assert [r["num_gpu_blocks"] for r in rows] == [str(v) for v in parse_values(
        "num_gpu_blocks", SWEEP_KNOBS["num_gpu_blocks"], EngineConfig())]
    (chart,) = page.get("plotly_chart")
    assert json.loads(chart.proto.spec)["layout"]["uirevision"] == "sweep"
    run(page, values="16, lots")
    assert "num_gpu_blocks = 'lots' cannot be run" in page.error[0].value
    assert shown_rows(page) == rows  # the previous sweep is still there


def test_a_rate_sweep_redraws_the_load_at_each_rate_and_finds_the_knee(base):
    from engine.workload import WorkloadSource
    from engine.workload.load import TraceSpec
    from lab.sweep import LOAD_PANELS, RATE

    priced = dataclasses.replace(base, deployment="llama-3.1-8b@h100-sxm", num_gpu_blocks=128, max_num_seqs=32,
                                 slo_ttft_ms=300, slo_tpot_ms=30)
    source = WorkloadSource(load=TraceSpec("azure-conv", rate=2.0, duration_s=8))
    rates = parse_values(RATE, "2, 32", priced)
    points = run_sweep(priced, source, RATE, rates)
    low, high = (p.metrics["aggregate"] for p in points)
    assert low["num_steps"] and low["request_throughput"] < high["request_throughput"]
    assert low["ttft_ms"]["p90"] < high["ttft_ms"]["p90"] and low["slo_attainment"] > high["slo_attainment"]
    fig = figure(RATE, points, 2.0, LOAD_PANELS)
    assert [t.name for t in fig.data] == [line for _, lines in LOAD_PANELS for line, _ in lines]
    with pytest.raises(ValueError, match="load in time"):
        run_sweep(priced, PRESETS["burst"](), RATE, [1.0])
    with pytest.raises(ValueError, match="requests/s"):
        parse_values(RATE, "0", priced)


def test_the_page_names_its_workload_and_sweeps_a_preset_picked_there_leaving_the_lab_alone(page):
    from engine.workload import PRESETS

    s = page.session_state["session"]
    lab_items, lab_label = s.run.items(), s.source.label
    box = page.selectbox(key="sweep_workload")
    assert box.format_func(box.value) == f"the lab's: {lab_label}, {len(lab_items)} requests"
    box.set_value("burst").run()
    run(page, knob="max_num_batched_tokens", values="64, 128")
    assert (s.sweep["workload"], s.sweep["requests"]) == ("preset burst", len(PRESETS["burst"]()))
    assert "2 runs of preset burst" in "\n".join(m.value for m in page.markdown)
    lengths = [len(p.metrics["requests"]) for p in s.sweep["points"]]
    assert lengths == [len(PRESETS["burst"]())] * 2, "the sweep ran the lab's workload, not the preset"
    assert (s.run.items(), s.source.label) == (lab_items, lab_label)
