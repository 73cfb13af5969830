"""Links, files and replays in the running app (AppTest).

A link must reproduce what its sender saw step for step, mid-run changes
included; a run exported as JSONL must load back as the same records and replay
without the engine; a bad link or file must say what is wrong and keep the app
(and the user's run) going.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from engine.workload import WorkloadItem, WorkloadSource, dump_workload
from lab.export import downloads, step_figures
from lab.link import Scenario, decode_scenario, encode_scenario, scenario_changes
from lab.recording import Recording
from tests.ui.test_app import APP, charts, click, run_of, scrubber, session_of
from ui.link import REPLAY_PARAM, SERVER_PARAM


@pytest.fixture
def lab_env(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)


def open_app(params: dict[str, str] | None = None) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params.update(params or {})
    app.run()
    assert not app.exception, app.exception
    return app


def timeless(records) -> list:
    return [r.without_timings() for r in records]


def link_of(app: AppTest) -> dict[str, str]:
    """The query parameters the app last wrote to the address bar, less the server's mark (a link
    opened on the same server ignores it)."""
    return {k: v[-1] if isinstance(v, list) else v for k, v in app.query_params.items() if k != SERVER_PARAM}


def export(app: AppTest, label: str) -> str:
    """The contents the sidebar's download button with this label would hand the browser."""
    (data,) = [d for lbl, _, d, _, _ in downloads(run_of(app)) if lbl.startswith(label)]
    return data()


def upload_run(app: AppTest, name: str, text: str | bytes) -> AppTest:
    data = text.encode() if isinstance(text, str) else text
    app.file_uploader(key="run_upload").set_value((name, data, "application/jsonl")).run()
    assert not app.exception, app.exception
    return app


def test_link_round_trips_mid_run_changes():
    """The two things a plain scenario could not say: a live knob set mid-run, and a request added
    before its arrival step (it must be submitted then, not at step 0, or ids and rejections move)."""
    late = WorkloadItem("PAGE:\nMy lord?", max_tokens=4, arrival_step=9)
    scenario = Scenario(workload=WorkloadSource(preset="burst"), requests=[WorkloadItem("KING:"), late], step=12,
                        live_knobs={3: {"max_num_seqs": 2, "step_order": "prefill_first"}}, added_at={1: 5})
    params = encode_scenario(scenario)
    assert params["at3.max_num_seqs"] == "2" and params["req.1.at"] == "5" and "req.0.at" not in params
    assert decode_scenario(params) == (scenario, [])
    assert scenario_changes(scenario) == {3: ({"max_num_seqs": 2, "step_order": "prefill_first"}, []),
                                          5: ({}, [late])}
    _, warnings = decode_scenario({"at2.num_gpu_blocks": "8", "at2.watermark": "2", "req.0": "hi", "req.0.at": "x"})
    why = {w.split("=")[0].removeprefix("link parameter "): w for w in warnings}
    assert sorted(why) == ["at2.num_gpu_blocks", "at2.watermark", "req.0.at"]
    assert "only a live knob can change mid-run" in why["at2.num_gpu_blocks"]


def test_a_link_reproduces_the_run_step_for_step(lab_env):
    app = open_app()
    app.selectbox(key="preset").set_value("burst")
    click(app, "load_preset")
    app.number_input(key="knob_num_gpu_blocks").set_value(12).run()  # restarts the run
    app.number_input(key="run_n").set_value(3)
    click(app, "run_steps")
    app.number_input(key="knob_max_num_seqs").set_value(3).run()  # live, from step 3
    app.text_area(key="add_prompt").set_value("KING:\nWho goes there?")
    app.number_input(key="add_arrival").set_value(6)
    app.button[[b.label for b in app.button].index("Add request")].click().run()  # added before 3, arrives at 6
    app.number_input(key="run_n").set_value(5)
    click(app, "run_steps")
    run = run_of(app)
    scrubber(app).set_value(6).run()  # the step on screen is in the link too
    link = link_of(app)
    assert link == {"k.num_gpu_blocks": "12", "preset": "burst", "req.0": "KING:\nWho goes there?",
                    "req.0.max_tokens": "24", "req.0.arrival_step": "6", "req.0.at": "3", "at3.max_num_seqs": "3",
                    "step": "6"}
    assert any(code.value.endswith("step=6") for code in app.code)  # the sidebar's share link ...
    assert any("Opens the lab **at step 6**" in c.value for c in app.caption)  # ... saying where it opens

    opened = open_app(link)
    assert not opened.warning
    copy = run_of(opened)
    assert copy.cursor == 6 and timeless(copy.records) == timeless(run.records[:7])
    assert copy.changes == run.changes
    copy.step(len(run.records) - 7)  # and it goes on exactly as the original did
    assert timeless(copy.records) == timeless(run.records)


def test_a_link_to_an_uploaded_workload_lists_its_requests(lab_env):
    items = [WorkloadItem("HAMLET:\nWords.", max_tokens=3), WorkloadItem("OPHELIA:\nMy lord.", arrival_step=2)]
    app = open_app()
    app.file_uploader(key="upload").set_value(("mine.jsonl", dump_workload(items, "jsonl").encode(), "x")).run()
    click(app, "step")
    link = link_of(app)
    assert link["preset"] == "none" and link["req.1.arrival_step"] == "2"
    assert run_of(open_app(link)).items() == items


def test_a_bad_link_warns_about_each_parameter_and_opens_the_rest(lab_env):
    app = open_app({"preset": "burst", "k.num_gpu_blocks": "0", "step": "two", "k.watermark": "0.5", "colour": "red"})
    (warning,) = app.warning
    for key in ("k.num_gpu_blocks", "step", "colour"):
        assert f"link parameter {key}=" in warning.value
    run = run_of(app)
    assert run.config.num_gpu_blocks == 64 and run.config.watermark == 0.5 and run.cursor == -1
    assert link_of(app) == {"preset": "burst", "k.watermark": "0.5"}  # the address bar drops what was ignored
    click(app, "step")  # and the lab works as usual


@pytest.mark.parametrize("params", [
    {"[Session expired - log in again](http://evil.example/login)": "1"},
    {"foo": "![a](http://127.0.0.1:9/p.png)"},
    {"colour": ":red[<a href='http://evil.example'>x</a>] `ticks` ``"},
])
def test_a_links_parameters_are_shown_as_typed_never_as_markdown(lab_env, params):
    """Issue 32, case 4: a parameter's name drew a clickable link in the lab's own warning, and a value
    made the page fetch a remote image. Each is shown as code: as typed, never read."""
    app = open_app(params)
    (warning,) = app.warning
    (key, value), = params.items()
    body = warning.proto.body
    code_spans = re.findall(r"(`+) (.*?) \1", body)
    assert any(key in text for _, text in code_spans), body
    outside = re.sub(r"(`+) .*? \1", "", body)
    assert "](" not in outside and "http" not in outside and "<a" not in outside and ":red[" not in outside


def test_a_link_asking_for_a_pool_over_the_budget_keeps_the_default_pool_and_opens_the_rest(lab_env):
    app = open_app({"preset": "burst", "k.num_gpu_blocks": "1000000", "k.watermark": "0.5", "step": "3"})
    assert not app.error
    (warning,) = app.warning
    assert "k.num_gpu_blocks" in warning.value and "MiB" in warning.value and "kept its default size" in warning.value
    run = run_of(app)
    assert run.config.num_gpu_blocks == 64 and run.config.watermark == 0.5 and run.cursor == 3
    assert "k.num_gpu_blocks" not in link_of(app)


def test_a_step_past_the_end_shows_the_last_step(lab_env):
    app = open_app({"preset": "burst", "step": "5000"})
    run = run_of(app)
    assert run.done and run.cursor == len(run.records) - 1 < 5000
    assert "the run ends at step" in app.warning[0].value


def test_export_then_import_replays_the_same_records_without_the_engine(lab_env):
    app = open_app({"preset": "burst"})
    app.number_input(key="run_n").set_value(6)
    click(app, "run_steps")
    live = run_of(app)
    upload_run(app, "mine.jsonl", export(app, "Run"))
    replay = run_of(app)
    assert isinstance(replay, Recording) and replay is not live
    assert timeless(replay.records) == timeless(live.records) and replay.config == live.config
    assert "Replay of** ` mine.jsonl `" in app.info[0].value
    assert app.session_state["session"].run.cursor == -1
    click(app, "run_steps")  # moves through the recording (10 asked, 6 recorded)
    assert replay.cursor == 5 and app.button(key="step").disabled
    assert "Step 5 is the last recorded step" in app.info[0].value
    click(app, "back")
    assert replay.cursor == 4 and not app.button(key="step").disabled
    assert link_of(app) == {REPLAY_PARAM: "mine.jsonl"}  # a file has no link, only its name as a mark
    click(app, "back_to_live")
    assert run_of(app) is live


def test_continue_live_re_runs_the_file_on_the_engine(lab_env):
    app = open_app({"preset": "burst", "step": "6"})
    original = run_of(app)
    upload_run(app, "r.jsonl", export(app, "Run"))
    click(app, "run_steps")
    click(app, "back")  # continue from a step inside the recording: the live run shows that step
    click(app, "continue_live")
    run = run_of(app)
    assert not isinstance(run, Recording) and (run.cursor, len(run.records)) == (5, 7)
    click(app, "step")
    click(app, "step")  # past the file's last step: the engine runs it
    original.step(1)
    assert timeless(run.records) == timeless(original.records)


def test_a_bad_run_file_names_the_line_and_keeps_the_run(lab_env):
    app = open_app({"preset": "burst", "step": "2"})
    run = run_of(app)
    lines = export(app, "Run").splitlines()
    lines[2] = lines[2].replace('"step": 1', '"step": 7')
    upload_run(app, "broken.jsonl", "\n".join(lines))
    assert "broken.jsonl" in app.error[0].value and "line 3" in app.error[0].value
    assert run_of(app) is run and run.cursor == 2
    upload_run(app, "binary.jsonl", b"\xff\xfe\x00")  # not even text
    assert "binary.jsonl ` is not UTF-8 text" in app.error[0].value and run_of(app) is run


def test_trace_metrics_and_charts_exports(lab_env):
    app = open_app({"preset": "burst", "step": "3"})
    run = run_of(app)
    trace = json.loads(export(app, "Trace"))
    assert {e["name"] for e in trace["traceEvents"] if e.get("cat") == "step"} == {f"step {i}" for i in range(4)}
    rows = list(csv.DictReader(io.StringIO(export(app, "Metrics"))))
    arrived = {rid for record in run.records for rid in record.requests}
    assert sorted(r["request_id"] for r in rows) == sorted(arrived)
    page = export(app, "Charts")
    # Every figure of the registry that a step exports (no roofline: this run is unpriced), as the page shows it.
    assert page.count("class='figure'") == len(step_figures(run)) == 6 and "Plotly.newPlot" in page
    assert all(f"<h2>{html.escape(name)}</h2>" in page for name in step_figures(run))
    assert f"{len(run.items())} requests under vllm_v1's rules, at step 3 of 4 run." in page
    assert len(page) < 6_000_000  # plotly.js once (about 4.6 MB) and five windowed figures
    assert "ui.perfetto.dev" in " ".join(c.value for c in app.caption)


def _font_sizes(fig: dict) -> list[float]:
    """Every font size a figure sets, wherever it sets one (layout, traces, annotations, axes)."""
    found = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key.endswith("font") and isinstance(value, dict) and isinstance(value.get("size"), int | float):
                    found.append(value["size"])
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({"data": fig["data"], "layout": fig["layout"]})
    return found


def test_presenter_mode_from_a_link(lab_env):
    plain = open_app({"preset": "burst", "step": "3"})
    app = open_app({"present": "1", "preset": "burst", "step": "3"})
    assert app.session_state["session"].presenting and not app.warning
    before, after = charts(plain), charts(app)
    assert set(before) == set(after) and "queues" in after
    for name, fig in after.items():  # every text on the projector grows, card labels and titles too
        assert len(_font_sizes(fig)) == len(_font_sizes(before[name])) > 0
        assert all(a > b for a, b in zip(_font_sizes(fig), _font_sizes(before[name]), strict=True)), name
        assert fig["layout"]["height"] > before[name]["layout"]["height"]
    assert [c.key for c in app.get("bidi_component")] == ["step_keys"]  # the arrow keys' listener
    assert link_of(app)["present"] == "1"
    click(app, "exit_presenter")
    assert not app.session_state["session"].presenting and "present" not in link_of(app)
    assert not any("stSidebarCollapsedControl" in m.value for m in app.markdown)  # the projector style is gone
    assert [c.key for c in app.get("bidi_component")] == ["step_keys"]  # the keys stay: they work out of it too


HOSTILE = "</script><img src=x onerror=alert(1)>"


def _raw_html(app: AppTest) -> str:
    """Everything the page renders as HTML (markdown with unsafe_allow_html): where injection would land."""
    return "\n".join(m.value for m in app.markdown if m.proto.allow_html)


def test_a_hostile_prompt_or_request_id_never_becomes_html(lab_env):
    """A link's prompt and an uploaded run's request id carry <img onerror>: the page and the
    charts export show them as text, never as an element."""
    app = open_app({"req.0": HOSTILE, "req.0.max_tokens": "3", "step": "2"})
    click(app, "step")
    assert HOSTILE not in _raw_html(app) and "<img" not in _raw_html(app)
    page = export(app, "Charts")
    assert "<img src=x" not in page and HOSTILE not in page

    lines = export(app, "Run").splitlines()
    crafted = "\n".join([lines[0], *(line.replace('"r0"', json.dumps(HOSTILE)) for line in lines[1:])])
    upload_run(app, "crafted.jsonl", crafted)
    assert HOSTILE in run_of(app).records[0].requests  # the crafted id is in the replayed records
    click(app, "step")
    shown = _raw_html(app)
    assert "<img" not in shown and html.escape(HOSTILE) in shown


def test_an_upload_over_the_budget_is_refused_by_name_and_size(lab_env):
    from lab.budgets import UPLOAD_BYTES

    app = open_app({"preset": "burst"})
    before = run_of(app)
    big = b'{"prompt": "x"}\n' * (UPLOAD_BYTES // 16 + 10)
    upload_run(app, "huge.jsonl", big)
    error = "\n".join(e.value for e in app.error)
    assert "huge.jsonl" in error and "at most 5 MiB" in error and run_of(app) is before
    app.file_uploader(key="upload").set_value(("huge.jsonl", big, "application/jsonl")).run()
    assert not app.exception and run_of(app) is before and "at most 5 MiB" in "\n".join(e.value for e in app.error)


def test_a_run_file_carries_mid_run_changes_so_continue_live_reproduces_them(lab_env):
    """A knob set at step 3 and a request added at step 5 used to be lost from the file, so Continue
    live refused ('did not reproduce its steps'); the file now holds the whole script."""
    app = open_app({"preset": "burst", "step": "2"})
    app.number_input(key="knob_max_num_seqs").set_value(2).run()
    app.number_input(key="run_n").set_value(2)
    click(app, "run_steps")
    live = run_of(app)
    live.add_request(WorkloadItem("KING: Speak.", max_tokens=3))
    live.step(3)
    assert sorted(live.changes) == [3, 5]
    text = export(app, "Run")
    upload_run(app, "changed.jsonl", text)
    click(app, "continue_live")
    run = run_of(app)
    assert not isinstance(run, Recording) and not app.error
    assert timeless(run.records) == timeless(live.records) and run.changes == live.changes
    run.seek(len(run.records) - 1)  # the replay opened at its start; at its end, the knob set at step 3 is in force
    assert run.config_next() == live.config_next() and run.config_next().max_num_seqs == 2


def test_a_run_files_text_reaches_the_page_escaped(lab_env):
    """Issue 32, case 3: a run file's request status and event kind reached HTML unescaped (an <a>
    overlay over the whole page was drawn)."""
    app = open_app({"preset": "burst", "step": "2"})
    lines = export(app, "Run").splitlines()
    evil = "<a href='http://evil.example' style='position:fixed;inset:0'>x</a>"
    lines[1] = lines[1].replace('"kind": "arrived"', f'"kind": {json.dumps(evil)}', 1)
    live = run_of(app)
    upload_run(app, "evil.jsonl", "\n".join(lines))
    # Case 13: the loader's schema check refuses the kind, and its message quotes it escaped.
    said = app.error[0].value
    assert "has an event of unknown kind" in said and "\\<a ` href='http://evil.example' ` " in said
    assert run_of(app) is live
    click(app, "step")
    body = "\n".join(m.proto.body for m in app.markdown)
    assert "<a href='http://evil.example'" not in body


@pytest.mark.parametrize(("knob", "value"), [("slo_percentile", "1e-300"), ("watermark", "0.995"),
                                             ("slo_percentile", "0.5"), ("watermark", "0.99")])
def test_a_knob_from_a_link_is_one_the_sidebar_can_show(lab_env, knob, value):
    """Issue 32, case 10: ?k.slo_percentile=1e-300 was accepted by the engine but not by the sidebar's
    slider, which raised on every rerun. One closed range per knob, the knob table's, for all three."""
    from engine.knobs import KNOB

    app = open_app({f"k.{knob}": value})  # open_app asserts no exception
    accepted = KNOB[knob].accepts(float(value))
    assert (getattr(run_of(app).config, knob) == float(value)) == accepted
    assert bool(app.warning) != accepted
    slider = app.slider(key=f"knob_{knob}")
    assert (slider.min, slider.max) == (KNOB[knob].low, KNOB[knob].high)


def test_a_path_link_with_digits_int_refuses_is_named_not_raised(lab_env):
    """?done=² passed str.isdigit() and then raised in int(): the page showed a traceback."""
    app = open_app({"done": "1,²"})
    assert "² is not a lesson number" in app.warning[0].value
    assert session_of(app).visit(next(iter(session_of(app).visits))).done_before


def test_the_export_panel_offers_the_run_as_an_offline_player(lab_env):
    """Issue 39: the whole run so far, opening at the step on screen."""
    import base64
    import gzip

    app = open_app()
    app.number_input(key="run_n").set_value(6)
    click(app, "run_steps")
    scrubber(app).set_value(2).run()
    assert "Offline player (HTML)" in [b.proto.label for b in app.get("download_button")]
    page = export(app, "Offline player (HTML)")
    packed = re.search(r'id="p-data">([^<]*)<', page).group(1)
    data = json.loads(gzip.decompress(base64.b64decode(packed)))
    assert [s["step"] for s in data["steps"]] == list(range(6)) and data["start"] == 2
