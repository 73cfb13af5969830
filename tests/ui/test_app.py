"""The Streamlit app driven headlessly with AppTest: clicks, knobs, files and time travel.

Each test checks both the session's Run (what the engine did) and what the page
shows (the step header, the event log), and that a bad knob or file leaves the
run as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import patch

import pytest
from streamlit.testing.v1 import AppTest

from engine.workload import WorkloadItem, dump_workload
from lab.charts import budget, queues
from ui.session import readable_lessons
from ui.widgets.scrubber import scrubber_key
from ui.widgets.step_bar import _set_playing

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture
def at(lab_model, monkeypatch) -> AppTest:
    monkeypatch.setenv("LAB_MODEL", lab_model)
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert not app.exception
    return app


def open_page(page: str) -> AppTest:
    """One page of the lab on its own, e.g. page='ab' runs ui.pages.ab.page()."""
    app = AppTest.from_string(f"from ui.pages import {page}\n{page}.page()", default_timeout=120).run()
    assert not app.exception, app.exception
    return app


def run_of(app: AppTest):
    return session_of(app).run


def session_of(app: AppTest):
    """The browser session's state: one object (ui/session.py)."""
    return app.session_state["session"]


def click(app: AppTest, key: str) -> AppTest:
    app.button(key=key).click().run()
    assert not app.exception, app.exception
    return app


def scrubber(app: AppTest):
    """The time-travel slider: one per length of the history and key press (ui/widgets/scrubber.py)."""
    return app.select_slider(key=scrubber_key("scrubber", len(run_of(app).records), session_of(app).keys_applied))


def markdown(app: AppTest) -> str:
    return "\n".join(m.value for m in app.markdown)


def step_header(app: AppTest) -> str:
    return next(m.value for m in app.markdown if m.value.startswith("### "))


def test_first_page_lists_the_workload_and_steps_on_click(at):
    assert step_header(at) == "### Ready at step 0"
    assert "| → | Step: run one scheduler step |" in markdown(at)  # the step bar's Keys popover
    assert len(at.dataframe[0].value) == len(run_of(at).items())
    click(at, "step")
    run = run_of(at)
    assert (run.cursor, len(run.records)) == (0, 1)
    assert step_header(at).startswith("### Step 0")
    arrived = [e for e in run.record.events if e.kind == "arrived"]
    assert arrived and arrived[0].reason in markdown(at)  # the "why" list shows the engine's reasons
    captions = [c.value for c in at.caption]  # each chart's notation is said beside it
    assert queues.KEY in captions and budget.KEY in captions
    cards = charts(at)["queues"]["data"][0]["text"]
    view = run.record.requests[run.record.running[0]]
    assert f"<b>{view.request_id}</b><br>{view.num_prompt_tokens}+{view.num_output_tokens}" in cards  # "17+5"


def test_run_back_and_scrubber_move_through_history(at):
    at.number_input(key="run_n").set_value(6)
    click(at, "run_steps")
    run = run_of(at)
    assert (run.cursor, len(run.records)) == (5, 6)
    click(at, "back")
    assert run.cursor == 4 and step_header(at).startswith("### Step 4")
    scrubber(at).set_value(1).run()
    assert run.cursor == 1 and len(run.records) == 6
    assert step_header(at).startswith("### Step 1")
    assert "Looking back at step 1" in "\n".join(c.value for c in at.caption)
    events_shown = markdown(at)
    assert all(e.reason in events_shown for e in run.records[1].events)


def test_stepping_from_the_past_branches_and_replays_exactly(at):
    at.number_input(key="run_n").set_value(6)
    click(at, "run_steps")
    run = run_of(at)
    old = [r.without_timings() for r in run.records]
    scrubber(at).set_value(2).run()
    click(at, "step")
    assert (run.cursor, len(run.records)) == (3, 4)  # the later steps are gone: a new branch
    assert [r.without_timings() for r in run.records] == old[:4]  # nothing changed, so the same steps


def test_reset_returns_to_step_zero(at):
    click(at, "step")
    click(at, "step")
    click(at, "reset")
    run = run_of(at)
    assert (run.cursor, run.records) == (-1, [])
    assert step_header(at) == "### Ready at step 0"


def test_restore_default_knobs_restarts_on_the_labs_own_knobs_with_the_same_workload(at):
    assert at.button(key="default_knobs").disabled  # nothing to restore yet
    defaults, workload = run_of(at).config, run_of(at).items()
    at.number_input(key="knob_max_num_seqs").set_value(2).run()
    at.number_input(key="knob_num_gpu_blocks").set_value(24).run()  # a pool knob: restarts at step 0
    click(at, "step")
    click(at, "reset")  # Reset keeps the knobs shown
    assert (run_of(at).config.max_num_seqs, run_of(at).config.num_gpu_blocks) == (2, 24)
    click(at, "default_knobs")
    run = run_of(at)
    assert run.config_next() == defaults and run.items() == workload and run.records == []
    assert at.number_input(key="knob_max_num_seqs").value == defaults.max_num_seqs
    assert at.button(key="default_knobs").disabled
    assert any("Default knobs restored" in m.value for m in at.info)


def test_live_knob_applies_from_the_next_step_and_is_kept_in_history(at):
    click(at, "step")
    at.number_input(key="knob_max_num_seqs").set_value(2).run()
    run = run_of(at)
    assert run.changes[1].knobs == {"max_num_seqs": 2}
    assert any("applies from step 1" in s.value for s in at.success)
    click(at, "step")
    assert run.records[0].budget.seq_cap == 16 and run.record.budget.seq_cap == 2
    assert "you set" in markdown(at)
    # Time travel shows the knobs as they were: before the change, the sidebar reads 16 again.
    scrubber(at).set_value(-1).run()
    assert at.number_input(key="knob_max_num_seqs").value == 16
    scrubber(at).set_value(1).run()
    assert at.number_input(key="knob_max_num_seqs").value == 2


def test_lowering_the_cap_under_running_requests_says_why_more_run_than_it_allows(at):
    """Issue 31, bug 4: with 7 running, max_num_seqs 16 -> 4 showed "7 / 4 seqs" beside a reason that
    said "4 requests already run"."""
    click(at, "step")
    click(at, "step")
    running = len(run_of(at).record.running)
    assert running > 1
    at.number_input(key="knob_max_num_seqs").set_value(1).run()
    click(at, "step")
    record = run_of(at).record
    assert record.budget.seqs_used == running > record.budget.seq_cap == 1
    caps = [e.reason for e in record.events if e.data.get("limit") == "seq_cap"]
    assert caps and all(f"{running} requests run and the cap is now 1" in r for r in caps)
    assert any(f"{running} requests run under a cap of 1" in c.value for c in at.caption)
    assert f"sequences</b> {running} / 1 (cap lowered while they ran)" in json.dumps(charts(at)["budget"])


def test_engine_preset_in_the_sidebar_sets_its_rules_and_a_later_knob_overrides_one(at):
    click(at, "step")
    at.selectbox(key="knob_engine_preset").set_value("sglang").run()
    run = run_of(at)
    assert run.changes[1].knobs["engine_preset"] == "sglang"
    assert at.selectbox(key="knob_step_order").value == "prefill_first"
    assert at.selectbox(key="knob_admission_reserve").value == "output_estimate"
    at.selectbox(key="knob_step_order").set_value("decode_first").run()
    config = run.config_next()
    assert (config.engine_preset, config.step_order, config.victim_rule) == \
        ("sglang", "decode_first", "fewest_generated")
    click(at, "step")
    assert not at.exception


def test_restart_knob_restarts_the_run(at):
    click(at, "step")
    at.number_input(key="knob_num_gpu_blocks").set_value(32).run()
    run = run_of(at)
    assert run.records == [] and run.config.num_gpu_blocks == 32
    assert any("restarted" in i.value for i in at.info)
    click(at, "step")
    assert run.record.budget.num_gpu_blocks == 32


def test_bad_knob_combination_shows_the_message_and_keeps_the_run(at):
    at.toggle(key="knob_enable_prefix_caching").set_value(True).run()
    click(at, "step")
    click(at, "step")
    run = run_of(at)
    before = [r.without_timings() for r in run.records]
    at.selectbox(key="knob_kv_allocation").set_value("contiguous").run()
    assert not at.exception
    assert any("enable_prefix_caching needs kv_allocation='paged'" in e.value for e in at.error)
    assert [r.without_timings() for r in run.records] == before
    assert run.config_next().kv_allocation == "paged"
    assert at.selectbox(key="knob_kv_allocation").value == "paged"  # the widget shows what the run uses


def test_bad_upload_names_line_and_field_and_keeps_the_run(at):
    click(at, "step")
    run = run_of(at)
    items = run.items()
    bad = b'{"prompt": "ROMEO:"}\n{"prompt": "JULIET:", "max_tokens": -3}\n'
    at.file_uploader(key="upload").set_value(("bad.jsonl", bad, "application/jsonl")).run()
    errors = " ".join(e.value for e in at.error)
    assert "line 2" in errors and "max_tokens" in errors
    assert run.items() == items and len(run.records) == 1


def test_good_upload_replaces_the_workload_and_download_round_trips(at):
    new = [WorkloadItem("HAMLET:\nWords, words, words.", max_tokens=5, arrival_step=1),
           WorkloadItem("OPHELIA:\nGood my lord.", max_tokens=3, priority=1)]
    at.file_uploader(key="upload").set_value(("mine.csv", dump_workload(new, "csv").encode(), "text/csv")).run()
    assert not at.exception and not at.error
    run = run_of(at)
    assert run.items() == new and run.records == []
    assert at.get("download_button")  # both formats offered
    assert "file mine.csv" in "\n".join(c.value for c in at.caption)


def test_add_request_joins_at_the_next_step(at):
    click(at, "step")
    at.text_area(key="add_prompt").set_value("KING:\nWho goes there?")
    at.number_input(key="add_max_tokens").set_value(4)
    at.button[[b.label for b in at.button].index("Add request")].click().run()
    run = run_of(at)
    assert not at.error and run.changes[1].requests[0].prompt == "KING:\nWho goes there?"
    new_id = f"r{len(run.items()) - 1}"
    click(at, "step")
    assert any(e.kind == "arrived" and e.request_id == new_id for e in run.record.events)
    assert "you added" in markdown(at)


def test_play_steps_and_pause_stops(at):
    click(at, "play")
    assert at.session_state["session"].playing and run_of(at).cursor == 0  # the live part stepped once
    assert "playing at" in markdown(at)  # the header says so, with the speed
    click(at, "pause")
    cursor = run_of(at).cursor
    at.run()
    assert not at.session_state["session"].playing and run_of(at).cursor == cursor


def test_play_and_pause_are_two_buttons_so_a_pause_delivered_twice_stays_paused(at):
    """Streamlit can deliver a click twice when it lands during auto-play's redraw: with one toggling
    button, the second delivery pressed Play again (1 Pause in 6 in a browser) and the run went on."""
    click(at, "play")
    assert [b.key for b in at.button if b.key in ("play", "pause")] == ["pause"]
    click(at, "pause")
    assert [b.key for b in at.button if b.key in ("play", "pause")] == ["play"]
    session = at.session_state["session"]
    with patch("ui.widgets.step_bar.session", return_value=session):
        _set_playing(False)  # the same Pause, delivered again
    assert not session.playing


def charts(app: AppTest) -> dict[str, dict]:
    """Plotly figures on the page, by widget key, as the JSON the browser receives."""
    return {json.loads(c.proto.spec)["layout"]["uirevision"]: json.loads(c.proto.spec)
            for c in app.get("plotly_chart")}


def test_live_charts_are_drawn_from_the_record_on_screen(at):
    at.number_input(key="run_n").set_value(4)
    click(at, "run_steps")
    record = run_of(at).record
    figs = charts(at)
    assert {"queues", "budget", "blocks", "timeline"} <= set(figs)
    token_bar = figs["budget"]["data"][0]
    assert sum(x for x, c in zip(token_bar["x"], token_bar["marker"]["color"], strict=True) if c != "#F1F1F1") \
        == record.budget.tokens_used
    gpu_cells = [z for row in figs["blocks"]["data"][0]["z"] for z in row if z is not None]
    assert len(gpu_cells) == record.budget.num_gpu_blocks


def test_history_tabs_render_only_when_open(at):
    at.number_input(key="run_n").set_value(4)
    click(at, "run_steps")
    run = run_of(at)
    assert [t.label for t in at.tabs] == ["Timeline", "Metrics", "Generated text", "Event log", "Replay"]
    at.session_state["history_tab"] = "Metrics"
    at.run()
    assert {"metrics", "latency"} <= set(charts(at)) and "timeline" not in charts(at)
    at.session_state["history_tab"] = "Generated text"
    at.run()
    shown = markdown(at)
    for rid in run.record.running:
        view = run.record.requests[rid]
        assert f">{rid}</span> <span style='color:#666'>running, {view.num_output_tokens}/{view.max_tokens} tokens" \
            in shown
    at.session_state["history_tab"] = "Event log"
    at.run()
    assert len(at.dataframe[0].value) == sum(len(r.events) for r in run.records)
    at.session_state["history_tab"] = "Replay"
    at.run()
    assert not at.exception
    assert len(charts(at)["replay"]["frames"]) == len(run.records)


def test_sessions_do_not_share_runs(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    one = AppTest.from_file(APP, default_timeout=120).run()
    two = AppTest.from_file(APP, default_timeout=120).run()
    click(one, "step")
    click(one, "step")
    assert run_of(one) is not run_of(two)
    assert len(run_of(one).records) == 2 and run_of(two).records == []
    assert run_of(one).engine.loaded is run_of(two).engine.loaded  # the weights are shared, loaded once


def test_bad_request_shows_the_message_and_keeps_the_run(at):
    click(at, "step")
    run = run_of(at)
    items = run.items()
    at.text_area(key="add_prompt").set_value("   ")
    at.button[[b.label for b in at.button].index("Add request")].click().run()
    assert any("prompt" in e.value and "not added" in e.value for e in at.error)
    assert run.items() == items and run.changes == {} and len(run.records) == 1


# ---- the Run itself: time travel over a script with live changes ---------------------------------


@pytest.fixture
def scripted_run(lab_model):
    """Ten steps with a live knob change before step 3 and a request added before step 5."""
    from engine import EngineConfig
    from lab.run import Run

    run = Run(EngineConfig(model=lab_model, num_gpu_blocks=24, max_num_batched_tokens=64),
              [WorkloadItem(f"ROMEO:\nLine {i}, my lord.", max_tokens=20, arrival_step=i, ignore_eos=True)
               for i in range(5)])
    run.step(3)
    run.set_knobs(max_num_seqs=3, step_order="prefill_first")
    run.step(2)
    run.add_request(WorkloadItem("JULIET:\nGood night.", max_tokens=6, ignore_eos=True))
    run.step(5)
    return run


def test_replay_through_live_changes_is_exact(scripted_run):
    run = scripted_run
    recorded = [r.without_timings() for r in run.records]
    assert run.records[2].budget.seq_cap == 16 and run.records[3].budget.seq_cap == 3
    assert any(e.kind == "arrived" and e.request_id == "r5" for e in run.records[5].events)
    run.seek(7)
    run.step()  # branches at 7: replays the script (knob change, added request) and steps once
    assert [r.without_timings() for r in run.records] == recorded[:9]
    run.step(1)
    assert run.records[9].without_timings() == recorded[9]


def test_a_change_in_the_past_drops_the_recorded_future(scripted_run):
    run = scripted_run
    run.seek(1)
    assert run.config_next().max_num_seqs == 16  # the knobs step 2 ran with
    run.set_knobs(max_num_seqs=2)
    assert len(run.records) == 2 and set(run.changes) == {2}  # later changes (and steps) are gone
    assert len(run.items()) == 5  # the request added before step 5 went with them
    run.step()
    assert run.record.step == 2 and run.record.budget.seq_cap == 2


def test_a_rejected_change_in_the_past_keeps_the_future(scripted_run):
    run = scripted_run
    recorded = [r.without_timings() for r in run.records]
    run.seek(4)
    with pytest.raises(ValueError, match="watermark"):
        run.set_knobs(watermark=1.5)
    assert [r.without_timings() for r in run.records] == recorded and run.cursor == 4


def test_a_cold_first_visit_is_welcomed_and_offered_lesson_1(at):
    assert at.button(key="welcome_lesson") and "Scheduler Loop Lab" in markdown(at)
    click(at, "welcome_lesson")
    assert at.session_state["session"].lesson_id == next(iter(readable_lessons()))
    assert not [b for b in at.button if b.key == "welcome_lesson"]


def test_the_welcome_steps_aside_for_a_link_and_for_exploring(lab_model, monkeypatch, at):
    click(at, "welcome_dismiss")
    assert not [b for b in at.button if b.key == "welcome_dismiss"]
    assert at.session_state["session"].lesson_id is None
    monkeypatch.setenv("LAB_MODEL", lab_model)
    linked = AppTest.from_file(APP, default_timeout=120)
    linked.query_params["preset"] = "burst"
    linked.run()
    assert not [b for b in linked.button if b.key == "welcome_lesson"]


def test_a_pool_too_small_for_any_request_says_why_and_which_knob(at):
    """num_gpu_blocks = 1: no request could ever fit, so there is no step worth running; the
    page names the requests, the reason and the knob instead of 'Press Step'."""
    at.number_input(key="knob_num_gpu_blocks").set_value(1).run()
    assert not at.exception
    run = run_of(at)
    assert run.done and run.refused and not run.records
    assert "Nothing can run" in markdown(at) and "Press **Step**" not in markdown(at)
    error = "\n".join(e.value for e in at.error)
    assert "num_gpu_blocks" in error and "KV pages" in error and run.refused[0].request_id in error
    at.number_input(key="knob_num_gpu_blocks").set_value(64).run()
    assert not run_of(at).refused and "Ready at step 0" in markdown(at)


@pytest.mark.parametrize(("knob", "bad"),
                         [("max_num_seqs", 0), ("num_gpu_blocks", -4), ("max_num_batched_tokens", 10**9)])
def test_an_out_of_range_knob_names_its_range_and_the_value_in_force(at, knob, bad):
    run = run_of(at)
    before = getattr(run.config, knob)
    at.number_input(key=f"knob_{knob}").set_value(bad).run()
    assert not at.exception
    error = "\n".join(e.value for e in at.error)
    assert f"{knob} = {bad!r}" in error and "it takes" in error and f"Still in force: **{knob} = {before!r}**" in error
    assert getattr(run_of(at).config, knob) == before and at.number_input(key=f"knob_{knob}").value == before


def test_the_pages_icons_need_no_emoji_font():
    """Issue 31: the sidebar's emoji icons drew as empty boxes on a machine without an emoji font;
    Streamlit's Material icons ship with it."""
    import re

    icons = re.findall(r'(?:icon|page_icon)="([^"]*)"', Path(APP).read_text(encoding="utf-8"))
    assert len(icons) == 7 and all(re.fullmatch(r":material/[a-z_]+:", icon) for icon in icons), icons
