"""Exports read only the records: a run file loads back to the same records, and the
trace and metrics drawn from records agree with what the live engine counted."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter

import pytest

from engine import Engine, EngineConfig
from engine.workload import WorkloadItem, submit
from lab.export import (
    CSV_COLUMNS,
    STEP_US,
    SavedRun,
    chrome_trace,
    chrome_trace_json,
    dump_run,
    figures_html,
    load_run,
    metrics_csv,
)
from lab.metrics import run_metrics

# Eight short requests arriving in pairs outgrow a 14-page pool of 4-token pages, so
# requests are preempted; the last can never fit (300 prompt tokens) and is rejected.
WORKLOAD = [WorkloadItem("ROMEO: but soft, what light"[: 8 + 3 * i], max_tokens=10 + i, arrival_step=i // 2,
                         ignore_eos=True) for i in range(8)] + [WorkloadItem("x" * 300, max_tokens=8)]
MODELED = {"deployment": "llama-3.1-8b@h100-sxm", "total_ms": 1.0, "parts": {}, "bound": "memory", "flops": 0.0,
           "bytes": 0.0, "mfu": 0.0, "mbu": 0.0, "swap_ms": 0.0, "clock_ms": 1.0}
PHASES = {"waiting", "prefill", "prefill chunk", "decode", "recompute", "preempted", "swapped", "stalled"}


def run(model: str, **knobs) -> tuple[EngineConfig, Engine, list]:
    config = EngineConfig(model=model, block_size=4, num_gpu_blocks=14, num_cpu_blocks=8, max_num_batched_tokens=24,
                          max_num_seqs=4, **knobs)
    engine = Engine(config)
    submit(engine, WORKLOAD)
    records = engine.run(max_steps=500)
    assert not engine.has_unfinished_requests()
    return config, engine, records


@pytest.fixture(scope="module", params=["recompute", "swap"])
def live(request, tiny_llama):
    return run(tiny_llama, preemption_mode=request.param)


# ---- run files ----------------------------------------------------------------------------------


def test_run_file_round_trips(live):
    config, engine, records = live
    loaded = load_run(dump_run(SavedRun(config, WORKLOAD, 7, records)))
    assert [r.to_dict() for r in loaded.records] == [r.to_dict() for r in records]
    assert (loaded.config, loaded.workload, loaded.seed) == (config, WORKLOAD, 7)


@pytest.fixture(scope="module")
def run_file(live) -> list[str]:
    config, _, records = live
    return dump_run(SavedRun(config, WORKLOAD, None, records[:4])).splitlines()


def corrupt(lines: list[str], number: int, edit) -> str:
    lines = list(lines)
    lines[number - 1] = edit(lines[number - 1])
    return "\n".join(lines)


def edit_json(edit):
    def apply(line: str) -> str:
        data = json.loads(line)
        edit(data)
        return json.dumps(data)
    return apply


@pytest.mark.parametrize("number, edit, message", [
    (3, lambda line: line[:-5], "line 3: a step record is not valid JSON"),
    (4, lambda line: "[1, 2]", "line 4: a step record must be a JSON object"),
    (1, edit_json(lambda d: d.update(version=99)), "line 1: this run file has format version 99"),
    (1, edit_json(lambda d: d.pop("format")), "line 1: not a Scheduler Loop Lab run file"),
    (1, edit_json(lambda d: d["config"].update(num_gpu_blocks=0)), "line 1: bad engine config in the header: "
     "num_gpu_blocks must be"),
    (1, edit_json(lambda d: d["config"].update(pool=3)), "unknown knob(s): pool"),
    (1, edit_json(lambda d: d["workload"][2].update(max_tokens=-1)), "line 1: workload request 2: "
     "field 'max_tokens'"),
    (1, edit_json(lambda d: d.update(seed="three")), "line 1: the header's 'seed' must be an integer"),
    (3, edit_json(lambda d: d.pop("budget")), "line 3: not a valid step record: StepRecord is missing field(s): "
     "budget"),
    (3, edit_json(lambda d: d.update(batch=5)), "line 3: not a valid step record"),
    (4, edit_json(lambda d: d.update(step=7)), "line 4: expected step 2, found step 7"),
    # Issue 32, case 13: files that passed the loader and broke a view when stepped.
    (3, edit_json(lambda d: d["budget"].update(tokens_used="abc")), "budget.tokens_used must be an integer, found "
     "'abc'"),
    (3, edit_json(lambda d: d["batch"][0].update(request_id="ghost")), "step 1 names request 'ghost'"),
    (3, edit_json(lambda d: d["batch"][0].update(kind="warp")), "step 1 has a chunk of unknown kind 'warp'"),
    (3, edit_json(lambda d: d["events"][0].update(kind="teleported")), "an event of unknown kind 'teleported'"),
    (3, edit_json(lambda d: d.update(modeled={**MODELED, "deployment": "<b>x</b>"})), "step 1 is priced on "
     "'<b>x</b>', not on the header's deployment"),
    (3, edit_json(lambda d: d["budget"].update(num_gpu_blocks=10**12)), "a pool of 1000000000000 pages"),
    (3, edit_json(lambda d: d.update(blocks=[{**d["blocks"][0], "block_id": 10**12}])), "page 1000000000000 "
     "outside the config's pools"),
    (3, edit_json(lambda d: next(iter(d["requests"].values())).update(status="<a href=x>")), "a request status "
     "'<a href=x>'"),
    (1, edit_json(lambda d: d.update(changes={"2": {"knobs": {"bogus": 1}}})), "'bogus' is not a knob that can "
     "change mid-run"),
    (1, edit_json(lambda d: d.update(changes={"2": {"knobs": {"num_gpu_blocks": 10**12}}})), "'num_gpu_blocks' is "
     "not a knob that can change mid-run"),
    (1, edit_json(lambda d: d.update(changes={"2": {"knobs": {"max_num_seqs": -1}}})), "max_num_seqs must be"),
    (2, lambda line: "[" * 100_000, "line 2: a step record is not valid JSON: nested too deeply"),
    (2, lambda line: '{"step": ' + "9" * 5000 + "}", "line 2: a step record is not valid JSON: Exceeds the limit"),
])
def test_bad_run_file_names_the_line_and_the_problem(run_file, number, edit, message):
    with pytest.raises(ValueError) as err:
        load_run(corrupt(run_file, number, edit))
    assert message in str(err.value)


def test_empty_run_file():
    with pytest.raises(ValueError, match="empty"):
        load_run("\n  \n")


# ---- metrics ------------------------------------------------------------------------------------


def test_metrics_from_records_equal_the_engines(live):
    _, engine, records = live
    live_metrics, replayed = engine.metrics(), run_metrics(records)
    assert engine.counters["num_preemptions"] > 0, "the workload must exercise preemption"
    assert replayed["requests"] == live_metrics["requests"]
    for key, value in live_metrics["aggregate"].items():
        assert replayed["aggregate"][key] == pytest.approx(value, abs=1e-6), key  # records round KV usage
    assert replayed["aggregate"]["peak_kv_cache_usage_perc"] == max(r.stats.kv_cache_usage_perc for r in records)


def test_metrics_of_a_loaded_run_equal_the_live_ones(live):
    config, _, records = live
    loaded = load_run(dump_run(SavedRun(config, WORKLOAD, None, records)))
    assert run_metrics(loaded.records) == run_metrics(records)


def test_metrics_csv_matches_the_engine_per_request(live):
    _, engine, records = live
    rows = list(csv.DictReader(io.StringIO(metrics_csv(run_metrics(records)))))
    assert tuple(rows[0]) == CSV_COLUMNS
    expected = engine.metrics()["requests"]
    assert [r["request_id"] for r in rows] == [m["request_id"] for m in expected]
    for row, m in zip(rows, expected, strict=True):
        for key in ("num_prompt_tokens", "num_generation_tokens", "num_preemptions", "queue_time_steps",
                    "ttft_steps", "e2e_steps"):
            assert row[key] == ("" if m.get(key) is None else str(m[key])), (m["request_id"], key)
        assert row["finish_reason"] == m["finish_reason"]
        gaps = m.get("itl_steps") or []
        assert row["itl_steps_max"] == (str(max(gaps)) if gaps else "")
        if gaps:
            assert float(row["itl_steps_mean"]) == pytest.approx(sum(gaps) / len(gaps))
            assert float(row["ttft_ms"]) == m["ttft_ms"]


# ---- Chrome trace -------------------------------------------------------------------------------


def test_chrome_trace_has_one_track_per_request_and_every_preemption(live):
    config, engine, records = live
    trace = json.loads(chrome_trace_json(records, config))
    events = trace["traceEvents"]
    for e in events:
        assert {"name", "ph", "pid"} <= set(e), e
        assert e["ph"] == "M" or isinstance(e["ts"], (int, float)), e
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    request_ids = {rid for r in records for rid in r.requests}
    assert sorted(n for tid, n in names.items() if tid != 0) == sorted(request_ids)
    assert len(set(names)) == len(names)

    slices = [e for e in events if e["ph"] == "X" and e["tid"] != 0]
    assert {e["name"] for e in slices} <= PHASES
    assert {"waiting", "decode", "preempted" if config.preemption_mode == "recompute" else "swapped"} <= \
        {e["name"] for e in slices}
    for tid in names:
        track = sorted((e for e in slices if e["tid"] == tid), key=lambda e: e["ts"])
        for before, after in zip(track, track[1:], strict=False):
            assert before["ts"] + before["dur"] <= after["ts"] + 1e-6, "a request's phases must not overlap"
        assert all(e["dur"] > 0 for e in track)

    instants = Counter(e["name"] for e in events if e["ph"] == "i")
    assert instants["preempted"] == engine.counters["num_preemptions"]
    assert instants["rejected"] == 1
    counters = Counter(e["name"] for e in events if e["ph"] == "C")
    assert counters == {"KV pages": len(records), "batch": len(records)}


def test_chrome_trace_draws_each_run_of_decode_steps_as_one_slice(live):
    _, _, records = live
    trace = chrome_trace(records, clock="steps")
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    drawn = sorted((names[e["tid"]], e["ts"] / STEP_US, (e["ts"] + e["dur"]) / STEP_US)
                   for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "decode")
    decode_steps: dict[str, list[int]] = {}
    for rec in records:
        for chunk in (c for c in rec.batch if c.kind == "decode"):
            decode_steps.setdefault(chunk.request_id, []).append(rec.step)
    expected = []  # (request, first step, one past the last step) of each run of consecutive decode steps
    for rid, steps in decode_steps.items():
        first = steps[0]
        for before, after in zip(steps, steps[1:] + [None], strict=True):
            if after != before + 1:
                expected.append((rid, first, before + 1))
                first = after
    assert drawn == sorted(expected)


def test_chrome_trace_clock(live):
    _, _, records = live
    steps = chrome_trace(records, clock="steps")["traceEvents"]
    step_slices = [e for e in steps if e["ph"] == "X" and e["tid"] == 0]
    assert [(e["ts"], e["dur"]) for e in step_slices] == [(i * STEP_US, STEP_US) for i in range(len(records))]
    ms = [e for e in chrome_trace(records, clock="auto")["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    assert ms[-1]["ts"] + ms[-1]["dur"] == pytest.approx(1000 * sum(r.timings.total_ms for r in records))
    with pytest.raises(ValueError, match="clock must be"):
        chrome_trace(records, clock="hours")


# ---- HTML ---------------------------------------------------------------------------------------


def test_figures_html_inlines_plotly_once_and_titles_each_section():
    import plotly.graph_objects as go

    sections = {"Bars <i>one</i>": go.Figure(go.Bar(x=["a"], y=[1])),
                "Lines": go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))}
    page = figures_html(sections, title="A <b>run</b>", about="r<0> & co")
    assert page.startswith("<!DOCTYPE html>") and "A &lt;b&gt;run&lt;/b&gt;" in page
    assert "<p>r&lt;0&gt; &amp; co</p>" in page
    assert page.count("class='figure'") == 2
    assert page.index("<h2>Bars &lt;i&gt;one&lt;/i&gt;</h2>") < page.index("<h2>Lines</h2>")
    assert page.count("Plotly.newPlot") == 2
    assert page.count("plotly.js v") == 1, "plotly.js must be inlined exactly once, so the page works offline"
    assert '<script charset="utf-8" src=' not in page, "no script may be fetched from the network"
