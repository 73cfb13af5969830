"""The Fleet page (AppTest): step, look back, open a replica, change the fleet, open a link; bad input
named with the fleet on screen kept."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from lab.fleet.link import DEFAULTS, encode, scenario_of
from tests.ui.test_app import session_of
from ui.widgets.scrubber import scrubber_key

APPLY = "FormSubmitter:fleet_knobs-Apply"


def open_fleet(params: dict | None = None) -> AppTest:
    app = AppTest.from_string("from ui.pages.fleet import page\npage.page()", default_timeout=120)
    app.query_params.update(params or {})
    app.run()
    assert not app.exception, app.exception
    return app


@pytest.fixture
def fleet_page(lab_model, monkeypatch) -> AppTest:
    monkeypatch.setenv("LAB_MODEL", lab_model)
    return open_fleet()


def click(app: AppTest, key: str) -> AppTest:
    app.button(key=key).click().run()
    assert not app.exception, app.exception
    return app


def texts(app: AppTest) -> str:
    return "\n".join(m.value for m in app.markdown)


def figure(app: AppTest, key: str) -> dict:
    (spec,) = [json.loads(c.proto.spec) for c in app.get("plotly_chart") if c.proto.id.endswith(f"-{key}")]
    return spec


def test_it_opens_on_the_default_fleet_before_its_first_event(fleet_page):
    run = session_of(fleet_page).fleet
    assert run.cursor == -1 and run.fleet == DEFAULTS.fleet and run.config.enable_prefix_caching
    assert f"{run.num_requests} requests will arrive" in fleet_page.info[0].value
    assert fleet_page.selectbox(key="fleet_router").value == "dynamo"
    assert fleet_page.number_input(key="fleet_num_replicas").value == 4


def test_step_routes_the_first_arrival_and_shows_why(fleet_page):
    click(fleet_page, "step")
    run = session_of(fleet_page).fleet
    record = run.record
    assert record.kind == "route" and run.cursor == 0
    shown = texts(fleet_page)
    assert f"{record.decision.request_id} arrives at 0.0 ms and is routed to replica {record.replica}" in shown
    assert record.decision.why in shown
    (table,) = [d.value for d in fleet_page.dataframe]
    assert list(table.columns) == [f"replica {c.replica}" for c in record.decision.candidates]
    assert [float(v) for v in table.loc["total"]] == [c.total for c in record.decision.candidates]
    assert list(table.loc["chosen"]) == ["✓" if c.replica == record.replica else "" for c in record.decision.candidates]
    strips = figure(fleet_page, "fleet_replicas")
    assert len(strips["data"][0]["y"]) == 4
    assert fleet_page.query_params["event"] == "0"


def test_run_back_and_the_slider_look_at_past_events_without_running_them(fleet_page):
    fleet_page.number_input(key="fleet_run_n").set_value(40)
    click(fleet_page, "run_steps")
    run = session_of(fleet_page).fleet
    assert run.cursor == 39
    click(fleet_page, "back")
    assert run.cursor == 38 and len(run.records) == 40
    key = scrubber_key("fleet_scrubber", len(run.records), session_of(fleet_page).keys_applied)
    fleet_page.select_slider(key=key).set_value(10).run()
    assert run.cursor == 10 and len(run.records) == 40
    assert "### Event 10" in texts(fleet_page)
    click(fleet_page, "step")
    assert run.cursor == 11 and len(run.records) == 40  # forward through what was already run


def test_opening_a_replica_shows_its_own_queues_and_block_map_at_that_moment(fleet_page):
    fleet_page.number_input(key="fleet_run_n").set_value(60)
    click(fleet_page, "run_steps")
    run = session_of(fleet_page).fleet
    replica = next(r.replica for r in reversed(run.records) if r.kind == "step")
    fleet_page.segmented_control(key="fleet_open").set_value(replica).run()
    steps = run.replica_steps(replica)
    assert f"replica {replica}, after its step {steps[-1].step}" in texts(fleet_page)
    blocks = figure(fleet_page, "fleet_replica_blocks")
    assert f"{steps[-1].budget.gpu_blocks_used} used" in json.dumps(blocks["layout"])


def test_applying_knobs_starts_the_fleet_again_with_them(fleet_page):
    click(fleet_page, "step")
    fleet_page.selectbox(key="fleet_router").set_value("round_robin")
    fleet_page.number_input(key="fleet_num_replicas").set_value(3)
    fleet_page.button(key=APPLY).click().run()
    run = session_of(fleet_page).fleet
    assert (run.fleet.router, run.fleet.num_replicas, run.cursor) == ("round_robin", 3, -1)
    assert "starts again at event 0" in fleet_page.info[0].value
    assert fleet_page.query_params["f.router"] == "round_robin"


def test_a_live_knob_applied_at_a_past_event_branches_there_and_the_link_keeps_the_branch(fleet_page):
    fleet_page.number_input(key="fleet_run_n").set_value(12)
    click(fleet_page, "run_steps")
    click(fleet_page, "back")
    click(fleet_page, "back")  # event 9 on screen
    fleet_page.number_input(key="fleet_prefix_cache_scorer_weight").set_value(0.0)
    fleet_page.selectbox(key="fleet_kv_link").set_value("eth-100")
    fleet_page.button(key=APPLY).click().run()
    run = session_of(fleet_page).fleet
    assert run.cursor == 9 and len(run.records) == 10
    assert run.changes == {10: {"kv_link": "eth-100", "prefix_cache_scorer_weight": 0.0}}
    assert "From event 10 on, the fleet runs with" in fleet_page.info[0].value
    assert fleet_page.query_params["at10.f.kv_link"] == "eth-100"
    assert fleet_page.selectbox(key="fleet_kv_link").value == "eth-100"  # the sidebar shows this event's knobs
    for _ in range(2):
        click(fleet_page, "back")  # event 7: the next event, 8, is before the change
    assert fleet_page.selectbox(key="fleet_kv_link").value == "ib-ndr"
    assert fleet_page.number_input(key="fleet_prefix_cache_scorer_weight").value == 3.0
    fleet_page.number_input(key="fleet_run_n").set_value(3)
    click(fleet_page, "run_steps")  # forward through the recorded events 8 and 9, then event 10 is run
    assert session_of(fleet_page).fleet.cursor == 10 and len(run.records) == 11
    assert fleet_page.selectbox(key="fleet_kv_link").value == "eth-100"
    other = open_fleet(dict(fleet_page.query_params))
    again = session_of(other).fleet
    assert again.changes == run.changes and again.cursor == 10
    assert again.fleet_next().kv_link == "eth-100" and again.fleet.kv_link == "ib-ndr"


def test_a_link_may_look_at_an_event_before_its_last_change(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    app = open_fleet({"at20.f.kv_link": "eth-100", "event": "5"})
    run = session_of(app).fleet
    assert (run.cursor, len(run.records), run.changes) == (5, 20, {20: {"kv_link": "eth-100"}})
    assert app.selectbox(key="fleet_kv_link").value == "ib-ndr"  # event 5's knobs
    assert not app.warning


def test_a_bad_knob_is_named_and_the_fleet_on_screen_is_kept(fleet_page):
    fleet_page.number_input(key="fleet_run_n").set_value(5)
    click(fleet_page, "run_steps")
    before = session_of(fleet_page).fleet
    fleet_page.text_input(key="fleet_replica_gpu_blocks").set_value("64,64")
    fleet_page.button(key=APPLY).click().run()
    assert not fleet_page.exception
    (error,) = fleet_page.error
    assert "replica_gpu_blocks must list 4 pool sizes" in error.value
    assert session_of(fleet_page).fleet is before and before.cursor == 4


def test_a_fleet_past_the_budget_is_refused_by_name(fleet_page):
    fleet_page.number_input(key="fleet_num_replicas").set_value(64)
    fleet_page.number_input(key="fleet_num_gpu_blocks").set_value(100_000)
    fleet_page.button(key=APPLY).click().run()
    assert "a lab session may use 256 MiB" in fleet_page.error[0].value
    assert session_of(fleet_page).fleet.fleet.num_replicas == 4


def test_a_link_reopens_the_same_fleet_at_the_same_event(fleet_page, lab_model, monkeypatch):
    fleet_page.selectbox(key="fleet_router").set_value("llmd")
    fleet_page.button(key=APPLY).click().run()
    fleet_page.number_input(key="fleet_run_n").set_value(30)
    click(fleet_page, "run_steps")
    run = session_of(fleet_page).fleet
    params = encode(scenario_of(run), DEFAULTS)
    assert dict(fleet_page.query_params) == params  # the address bar holds it
    other = open_fleet(params)
    again = session_of(other).fleet
    assert again.cursor == run.cursor == 29 and again.fleet == run.fleet
    assert [r.to_dict()["replicas"] for r in again.records] == [r.to_dict()["replicas"] for r in run.records]


def test_a_link_with_bad_parameters_opens_with_one_warning_naming_them(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    app = open_fleet({"f.router": "llmd", "f.num_replicas": "999", "load": "/etc/passwd", "event": "12", "zz": "1"})
    run = session_of(app).fleet
    assert run.fleet.router == "llmd" and run.fleet.num_replicas == 4 and run.cursor == 12
    (warning,) = app.warning
    for named in ("f.num_replicas", "load:", "zz"):
        assert named in warning.value


def test_presenter_mode_from_a_link_hides_the_knobs(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    app = open_fleet({"present": "1", "event": "3"})
    assert session_of(app).presenting and session_of(app).fleet.cursor == 3
    assert not app.sidebar.button and app.button(key="exit_presenter")
    assert app.query_params["present"] == "1"


def test_ab_compares_the_fleet_on_screen_with_another_router(fleet_page):
    from engine import load_model
    from lab.fleet.compare import row, run_to_end
    from lab.fleet.run import FleetLoad

    fleet_page.number_input(key="fleet_load_duration_s").set_value(3.0)
    fleet_page.button(key=APPLY).click().run()
    fleet_page.selectbox(key="fleet_ab_router").set_value("round_robin")
    click(fleet_page, "fleet_ab_run")
    (table,) = [d.value for d in fleet_page.dataframe if "fleet" in d.value.columns]
    assert list(table["router"]) == ["dynamo", "round_robin"]
    run = session_of(fleet_page).fleet
    assert run.load == FleetLoad(duration_s=3.0)
    a, _ = run_to_end(run.config, run.fleet, run.load, load_model)
    assert table.iloc[0]["goodput (requests/s)"] == row(a)["goodput (requests/s)"]


def test_a_sweep_draws_one_point_per_value_and_a_bad_value_is_named(fleet_page):
    fleet_page.number_input(key="fleet_load_duration_s").set_value(2.0)
    fleet_page.button(key=APPLY).click().run()
    fleet_page.selectbox(key="fleet_sweep_knob").set_value("num_replicas").run()
    assert fleet_page.text_input(key="fleet_sweep_values").value == "1, 2, 4, 8"
    fleet_page.text_input(key="fleet_sweep_values").set_value("1, 0")
    click(fleet_page, "fleet_sweep_run")
    assert "num_replicas = '0' cannot be run" in fleet_page.error[0].value
    fleet_page.text_input(key="fleet_sweep_values").set_value("1, 2")
    click(fleet_page, "fleet_sweep_run")
    spec = figure(fleet_page, "fleet_sweep")
    assert [trace["x"] for trace in spec["data"]][0] == ["1", "2"]
    assert len([d for d in fleet_page.dataframe if "num_replicas" in d.value.columns][0].value) == 2


LESSON = "13_where_a_request_lands"


def test_a_fleet_lesson_holds_step_at_its_question_and_grades_the_answer_from_the_event(fleet_page):
    from lab.fleet.lessons import load_fleet_lessons

    lesson = next(lesson for lesson in load_fleet_lessons() if lesson.id == LESSON)
    first = lesson.checkpoints[0]
    fleet_page.selectbox(key="fleet_lesson_box").set_value(LESSON).run()
    run = session_of(fleet_page).fleet
    assert run.fleet == lesson.scenario.fleet and run.cursor == -1
    assert f"#### {lesson.number}. {lesson.title}" in texts(fleet_page)
    fleet_page.number_input(key="fleet_run_n").set_value(500)
    click(fleet_page, "run_steps")
    assert run.cursor == first.at_event - 1  # held before the event the question is about
    click(fleet_page, "step")
    assert run.cursor == first.at_event - 1 and "answer it beside the views first" in fleet_page.info[0].value
    assert len(run.records) == first.at_event  # the event the question is about has not run
    wrong = next(o for o in first.options if o != "2")
    fleet_page.radio(key=f"fleet_answer_{first.id}").set_value(wrong).run()
    click(fleet_page, "fleet_check")
    assert run.cursor == first.at_event
    grade = session_of(fleet_page).fleet_grades[first.id]
    assert grade.right_answer == first.answer_from(run.record) and not grade.correct
    assert f"you said {wrong}" in fleet_page.warning[0].value
    click(fleet_page, "run_steps")  # on to the next question
    assert run.cursor == lesson.checkpoints[1].at_event - 1


def test_changing_the_fleets_knobs_closes_its_lesson(fleet_page):
    fleet_page.selectbox(key="fleet_lesson_box").set_value(LESSON).run()
    fleet_page.selectbox(key="fleet_router").set_value("llmd")
    fleet_page.button(key=APPLY).click().run()
    assert session_of(fleet_page).fleet_lesson is None
    assert "Where a request lands" not in texts(fleet_page)


def test_a_lesson_link_reopens_the_lesson_at_its_event(fleet_page, lab_model, monkeypatch):
    fleet_page.selectbox(key="fleet_lesson_box").set_value(LESSON).run()
    fleet_page.number_input(key="fleet_run_n").set_value(10)
    click(fleet_page, "run_steps")
    assert dict(fleet_page.query_params) == {"lesson": LESSON, "event": "9"}
    other = open_fleet({"lesson": LESSON, "event": "9", "f.router": "llmd"})
    s = session_of(other)
    assert s.fleet_lesson == LESSON and s.fleet.cursor == 9 and s.fleet.fleet.router == "dynamo"
    assert "f.router: a lesson's fleet has its own knobs" in other.warning[0].value
    unknown = open_fleet({"lesson": "99_nothing"})
    assert session_of(unknown).fleet_lesson is None and "names no fleet lesson" in unknown.warning[0].value


def test_a_sweep_question_runs_the_lessons_sweep_and_grades_the_answer_on_it(fleet_page):
    from lab.fleet.lessons import load_fleet_lessons

    lesson = next(lesson for lesson in load_fleet_lessons() if lesson.sweeps)
    question = lesson.sweeps[0]
    fleet_page.selectbox(key="fleet_lesson_box").set_value(lesson.id).run()
    fleet_page.radio(key=f"fleet_answer_{question.id}").set_value(question.options[0]).run()
    click(fleet_page, f"fleet_check_{question.id}")
    s = session_of(fleet_page)
    results = s.fleet_swept[lesson.id]
    grade = s.fleet_grades[question.id]
    assert grade.right_answer == question.answer_from(results)
    assert grade.correct == (question.options[0] == grade.right_answer)
    spec = figure(fleet_page, f"fleet_sweep_{question.id}")
    assert [trace["name"] for trace in spec["data"]] == list(question.fleets)
    # the second question grades on the same sweep, without running it again
    second = lesson.sweeps[1]
    fleet_page.radio(key=f"fleet_answer_{second.id}").set_value(second.options[-1]).run()
    click(fleet_page, f"fleet_check_{second.id}")
    assert s.fleet_swept[lesson.id] is results and second.id in s.fleet_grades
