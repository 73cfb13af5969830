"""The Fleet page's lab side: a fleet run with time travel, what its views read from the records, and
its link. Each view's numbers are checked against what the engines themselves recorded."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import EngineConfig, load_model
from engine.fleet.config import FLEET_KNOBS, ROUTERS, FleetConfig
from engine.fleet.metrics import fleet_metrics
from engine.knobs import KNOB
from lab.budgets import FLEET_EVENTS, BudgetError
from lab.charts.fleet import link_text, replicas_figure, timeline_figure
from lab.fleet.link import DEFAULTS, ENGINE_KNOBS, PARAMS, FleetScenario, decode, encode, scenario_of
from lab.fleet.run import FleetLoad, FleetRun
from lab.fleet.views import decision_rows, describe, journeys, on_link
from lab.run import ReplayError

LOAD = FleetLoad("mooncake-conv", duration_s=4.0)


def fleet_run(lab_model, router="dynamo", replicas=3, load=LOAD, **fleet) -> FleetRun:
    config = EngineConfig(model=lab_model, enable_prefix_caching=True)
    return FleetRun(config, FleetConfig(num_replicas=replicas, router=router, **fleet), load)


@pytest.fixture(scope="module")
def finished(lab_model) -> FleetRun:
    run = fleet_run(lab_model)
    run.step(FLEET_EVENTS)
    assert run.done and not run.live.has_unfinished_requests()
    return run


def test_every_event_is_kept_and_looking_back_runs_nothing(lab_model):
    run = fleet_run(lab_model)
    run.step(30)
    seen = [r.to_dict() for r in run.records]
    run.seek(5)
    assert run.record.index == 5 and len(run.records) == 30
    run.back()
    assert run.cursor == 4
    run.step(3)  # forward through the events already run: nothing new
    assert run.cursor == 7 and len(run.records) == 30
    run.step(30)  # then on past the end: 7 + 30
    assert run.cursor == 37 and len(run.records) == 38
    assert [r.to_dict() for r in run.records[:30]] == seen


def test_a_released_fleet_is_rebuilt_by_re_running_its_events_and_a_changed_one_is_caught(lab_model):
    run = fleet_run(lab_model, replicas=2)
    run.step(25)
    run.release()
    run.step(5)  # re-runs 25 events into a fresh fleet, checking each, then 5 more
    twin = fleet_run(lab_model, replicas=2)
    twin.step(30)
    assert [r.to_dict()["replicas"] for r in run.records] == [r.to_dict()["replicas"] for r in twin.records]
    run.release()
    run.records[10].replica = (run.records[10].replica + 1) % 2
    with pytest.raises(ReplayError, match="event 10"):
        run.step(1)


def test_a_live_knob_changed_at_a_past_event_branches_there_and_replays_exactly(lab_model, finished):
    run = fleet_run(lab_model)
    run.step(40)
    old = [_data(r) for r in run.records]
    run.seek(11)
    assert run.set_knobs(overlap_score_credit=0.0, prefill_load_scale=2.0) is False  # live: no restart
    assert len(run.records) == 12 and run.changes == {12: {"overlap_score_credit": 0.0, "prefill_load_scale": 2.0}}
    assert [_data(r) for r in run.records] == old[:12]
    assert run.fleet.overlap_score_credit == 1.0 and run.fleet_next().overlap_score_credit == 0.0
    run.step(FLEET_EVENTS)  # to the end
    routed = [r.decision for r in run.records[12:] if r.kind == "route"]
    assert routed and all(c.terms["prefill_blocks"] == 2.0 * (c.inputs["active_prefill_tokens"] + c.inputs[
        "prompt_tokens"]) / run.config.block_size for d in routed for c in d.candidates)
    twin = fleet_run(lab_model)  # the same script, from a link, gives the same events
    twin.follow(run.changes)
    twin.step(FLEET_EVENTS)
    assert [_data(r) for r in twin.records] == [_data(r) for r in run.records]
    assert [_data(r) for r in finished.records[:40]] == old  # the same fleet, unchanged, to the end ...
    assert [_data(r) for r in run.records[12:]] != [_data(r) for r in finished.records[12:]]  # ... took another course
    run.seek(20)
    run.release()
    run.set_knobs(kv_link="eth-100")  # rebuilt through the first change, checking every event, then branched
    assert len(run.records) == 21 and run.changes == {12: {"overlap_score_credit": 0.0, "prefill_load_scale": 2.0},
                                                       21: {"kv_link": "eth-100"}}


def test_a_knob_that_builds_the_fleet_starts_it_again_and_a_bad_value_changes_nothing(lab_model):
    run = fleet_run(lab_model)
    run.step(10)
    with pytest.raises(ValueError, match="overlap_score_credit"):
        run.set_knobs(overlap_score_credit=-1.0)
    assert len(run.records) == 10 and run.changes == {}
    assert run.set_knobs(num_replicas=2) is True
    assert run.cursor == -1 and run.records == [] and run.fleet.num_replicas == 2


def _data(record) -> dict:
    data = record.to_dict()
    data.get("step", {}).pop("timings", None)  # this machine's wall time
    return data


def test_each_replica_strip_is_what_that_replica_recorded(finished):
    """After a replica's step, its strip's counts are its own StepRecord's: pages in use and cached-free,
    and the requests running; every strip fits its pool."""
    checked = 0
    for record in finished.records:
        for state in record.replicas:
            assert state.kv_used >= 0 and state.kv_cached >= 0
            assert state.kv_used + state.kv_cached <= state.num_gpu_blocks
            assert state.in_flight >= 0 and state.waiting >= 0
        if record.kind == "step":
            state, budget = record.replicas[record.replica], record.step.budget
            assert (state.kv_used, state.kv_cached) == (budget.gpu_blocks_used, budget.gpu_blocks_cached)
            assert state.running == len(record.step.running)
            assert state.clock_ms == record.step.modeled.clock_ms
            checked += 1
    assert checked > 50
    assert all(s.in_flight == 0 and s.kv_used == 0 for s in finished.records[-1].replicas)


def test_replica_steps_are_that_replicas_own_history(finished):
    finished.seek(len(finished.records) // 2)
    for replica in range(3):
        steps = finished.replica_steps(replica)
        assert [s.step for s in steps] == list(range(len(steps)))  # its own steps, none missing, in order
        # each began by the event on screen (a step may end after it: the engine computes it whole)
        assert all(s.modeled.clock_ms - s.modeled.total_ms <= finished.record.clock_ms + 1e-6 for s in steps)
        mine = [i for i, r in enumerate(finished.records) if r.kind == "step" and r.replica == replica]
        assert len(steps) == len([i for i in mine if i <= finished.cursor])  # none after it, none missing
    finished.seek(len(finished.records) - 1)


def test_the_timeline_agrees_with_the_fleet_metrics(finished):
    """Each journey's replica and finish time, read from the records, are the engine's own."""
    paths = journeys(finished.records)
    metrics = {m["request_id"]: m for m in fleet_metrics(finished.live)["requests"]}
    assert set(paths) == set(metrics)
    for rid, j in paths.items():
        assert j.replica == metrics[rid]["replica"]
        request = finished.live.replicas[j.replica].requests[rid]  # the engine's own request
        assert (j.arrival_ms, j.finished_ms) == (request.arrival_ms, request.token_ms[-1])
    fig = timeline_figure(journeys(finished.records), finished.records[-1].clock_ms)
    drawn = {y for trace in fig.data for y in trace.y if y is not None}
    assert drawn == set(paths)


def test_a_decision_table_has_each_candidate_and_marks_the_winner(finished):
    routes = [r for r in finished.records if r.kind == "route"]
    assert routes
    for record in routes:
        rows = decision_rows(record.decision)
        assert [row["replica"] for row in rows] == [c.replica for c in record.decision.candidates]
        (chosen,) = [row for row in rows if row["chosen"]]
        assert chosen["replica"] == record.decision.replica == record.replica
        assert describe(record).startswith(f"{record.decision.request_id} arrives")


def test_the_replicas_figure_marks_the_replica_the_event_touched(finished):
    record = next(r for r in finished.records if r.kind == "step")
    fig = replicas_figure(record)
    labels = list(fig.data[0].y)
    assert sum("◀" in label for label in labels) == 1 and "◀" in labels[record.replica]
    assert [sum(t.x[i] for t in fig.data) for i in range(3)] == [s.num_gpu_blocks for s in record.replicas]


def test_disaggregated_events_say_where_the_kv_went(lab_model):
    run = fleet_run(lab_model, replicas=3, num_prefill_replicas=1)
    run.step(FLEET_EVENTS)
    arrived = [r for r in run.records if r.kind == "kv_arrived"]
    assert arrived
    assert run.metrics()["aggregate"]["num_requests_finished"] == run.num_requests  # each counted once, not twice
    handoffs = {r.handoff.request_id: r.handoff for r in arrived}
    for record in (r for r in run.records if r.kind == "route"):  # each arrival says why it went apart or not
        rid = record.decision.request_id
        assert record.placed and f"({record.placed})" in describe(record)
        if rid in handoffs:
            assert record.prefill is not None and record.placed == handoffs[rid].decided
    for record in arrived:
        h = record.handoff
        assert f"arrives on replica {h.decode_replica}" in describe(record)
        j = journeys(run.records)[h.request_id]
        assert (j.prefill_replica, j.replica) == (h.prefill_replica, h.decode_replica)
        assert j.transfer_end_ms == h.transfer_end_ms == record.clock_ms


def test_the_replicas_figure_draws_each_kv_copy_on_the_link_from_its_prefill_to_its_decode_replica(lab_model):
    run = fleet_run(lab_model, replicas=3, num_prefill_replicas=1)
    run.step(FLEET_EVENTS)
    checked = 0
    for i, record in enumerate(run.records):
        crossing = on_link(journeys(run.records[: i + 1]).values(), record.clock_ms)
        now = record.clock_ms
        expected = {j.request_id for j in journeys(run.records).values() if j.transfer_start_ms is not None
                    and j.transfer_start_ms <= now <= j.transfer_end_ms}
        assert {j.request_id for j in crossing} == expected
        if record.kind == "kv_arrived":  # the copy that arrives is drawn with its time on the link
            h = record.handoff
            assert f"{h.request_id} 0→{h.decode_replica}: {h.bytes / 2**20:,.0f} MiB, " \
                   f"{h.transfer_end_ms - h.transfer_start_ms:,.1f} ms on the link" in map(link_text, crossing)
        fig = replicas_figure(record, crossing).to_dict()
        arrows = {a["text"]: a for a in fig["layout"].get("annotations", []) if a.get("showarrow")}
        assert len(arrows) == min(len(crossing), 6)
        for j in crossing[:6]:
            labels = fig["data"][0]["y"]
            assert (arrows[j.request_id]["ay"], arrows[j.request_id]["y"]) == (labels[j.prefill_replica],
                                                                               labels[j.replica])
        h = record.handoff
        if record.kind == "kv_transfer" and h.transfer_start_ms is not None and h.transfer_start_ms <= now:
            said = f"{h.request_id} 0→{h.decode_replica}: {h.bytes / 2**20:,.0f} MiB"
            assert arrows[h.request_id]["hovertext"] == said
            checked += 1
    assert checked


def test_a_fleet_past_the_sessions_kv_budget_is_refused_before_it_is_built(lab_model):
    with pytest.raises(BudgetError, match="replicas' KV pools"):
        fleet_run(lab_model, replicas=64, replica_gpu_blocks=",".join(["100000"] * 64))


def test_a_load_out_of_range_is_named():
    with pytest.raises(ValueError, match="duration_s"):
        FleetLoad(duration_s=1e6)
    with pytest.raises(ValueError, match="trace must be one of"):
        FleetLoad(trace="/etc/passwd")


# ---- the link ----------------------------------------------------------------------------------

scenarios = st.builds(
    FleetScenario,
    engine=st.fixed_dictionaries({}, optional={"num_gpu_blocks": st.integers(8, 512),
                                               "enable_prefix_caching": st.booleans(),
                                               "deployment": st.sampled_from(["llama-3.1-8b@a100-80gb", None])}),
    fleet=st.builds(FleetConfig, num_replicas=st.integers(2, 8), router=st.sampled_from(ROUTERS),
                    router_temperature=st.sampled_from([0.0, 0.5]), prefix_cache_scorer_weight=st.floats(0, 10)),
    load=st.builds(FleetLoad, trace=st.sampled_from(["mooncake-conv", "shared-prefix"]),
                   duration_s=st.sampled_from([2.0, 10.0, 30.5]), rate=st.sampled_from([None, 2.0])),
    event=st.integers(-1, 5000),
    changes=st.dictionaries(st.integers(0, 5000), st.fixed_dictionaries({}, optional={
        "overlap_score_credit": st.sampled_from([0.0, 2.5]), "kv_link": st.sampled_from(["eth-100", "nvlink-4"]),
        "disagg_decider": st.sampled_from(["llmd_prefix"])}).filter(bool), max_size=3))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_a_link_reads_back_as_the_scenario_it_was_written_from(scenario):
    params = encode(scenario, DEFAULTS)
    back, warnings = decode(params, DEFAULTS, EngineConfig(model="m"))
    assert warnings == []
    assert back.fleet == scenario.fleet and back.load == scenario.load and back.event == scenario.event
    assert back.changes == scenario.changes
    assert full(back.engine) == full(scenario.engine)


def full(engine: dict) -> dict:
    """Each replica's engine knobs a scenario names, in full (those it leaves out are the engine's defaults)."""
    return {name: engine.get(name, KNOB[name].default) for name in ENGINE_KNOBS}


def test_a_link_names_each_change_it_cannot_make():
    params = {"at3.f.num_replicas": "2", "at99999.f.kv_link": "eth-100", "at4.f.kv_link": "carrier-pigeon",
              "at5.f.overlap_score_credit": "2"}
    scenario, warnings = decode(params, DEFAULTS, EngineConfig(model="m"))
    assert scenario.changes == {5: {"overlap_score_credit": 2.0}}
    assert [w.split(":")[0].split("=")[0] for w in warnings] == ["at3.f.num_replicas", "at99999.f.kv_link",
                                                                  "at4.f.kv_link"]
    assert "only a live fleet knob" in warnings[0] and "[0, 19999]" in warnings[1]


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from([*(row.key for row in PARAMS), "event", "x"]),
                       st.one_of(st.text(max_size=30), st.sampled_from(["3", "0", "none", "llmd", "8,8", "-1"]))))
def test_a_hostile_link_never_raises_and_each_parameter_is_used_or_named(params):
    """Every parameter either takes effect or is named in a warning: none is dropped silently."""
    scenario, warnings = decode(params, DEFAULTS, EngineConfig(model="m"))
    assert isinstance(scenario.fleet, FleetConfig) and isinstance(scenario.load, FleetLoad)
    rows = {row.key: row for row in PARAMS}
    parts = {"engine": scenario.engine, "fleet": dataclasses.asdict(scenario.fleet),
             "load": dataclasses.asdict(scenario.load)}
    for key, text in params.items():
        if any(w.startswith(f"{key}:") or w.startswith(f"{key}=") or f", {key}" in w or w.startswith(f"{key},")
               for w in warnings):
            continue
        if key == "event":
            assert scenario.event == int(text)
        else:
            row = rows[key]
            assert parts[row.part][row.name] == row.parse(text), key


def test_every_fleet_knob_has_a_link_parameter():
    params = encode(FleetScenario(fleet=FleetConfig(**{k.name: _other(k) for k in FLEET_KNOBS})), DEFAULTS)
    assert {f"f.{k.name}" for k in FLEET_KNOBS} <= set(params)


def _other(knob):
    """A value of the knob other than its default (and valid beside the others)."""
    if knob.name == "replica_gpu_blocks":
        return "8,8,8"
    if knob.name == "replica_presets":
        return "vllm_v1,sglang,vllm_v1"
    if knob.name == "num_replicas":
        return 3
    if knob.name == "num_prefill_replicas":
        return 1
    if knob.choices:
        return next(c for c in knob.choices if c != knob.default)
    return knob.default + (1 if knob.type is int else 0.25) if knob.high is None or knob.default < knob.high \
        else knob.default - 0.25


def test_the_scenario_of_a_run_reproduces_it(lab_model):
    run = fleet_run(lab_model, router="llmd", replicas=2)
    run.step(20)
    scenario = scenario_of(run)
    params = encode(scenario, DEFAULTS)
    back, warnings = decode(params, DEFAULTS, EngineConfig(model=lab_model))
    assert not warnings and back.event == 19
    again = FleetRun(EngineConfig(model=lab_model).with_changes(**back.engine), back.fleet, back.load)
    again.step(back.event + 1)
    assert [r.to_dict()["replicas"] for r in again.records] == [r.to_dict()["replicas"] for r in run.records]


# ---- A/B and sweeps ----------------------------------------------------------------------------

def test_ab_runs_each_fleet_to_the_end_on_the_same_requests(lab_model):
    from lab.fleet.compare import compare, row, run_to_end

    config = EngineConfig(model=lab_model, enable_prefix_caching=True, slo_ttft_ms=1000.0, slo_tpot_ms=100.0)
    a, b = FleetConfig(num_replicas=2), FleetConfig(num_replicas=2, router="round_robin")
    rows = compare(config, a, b, LOAD, load_model)
    assert [(r["fleet"], r["router"]) for r in rows] == [("A", "dynamo"), ("B", "round_robin")]
    for r, fleet in zip(rows, (a, b), strict=True):
        aggregate, finished = run_to_end(config, fleet, LOAD, load_model)  # again, on its own
        assert r["finished"] and finished
        assert {k: v for k, v in r.items() if k in row(aggregate)} == row(aggregate)
        assert aggregate["num_requests_finished"] == len(LOAD.requests(load_model(lab_model).vocab_size))


def test_a_sweep_runs_one_fleet_per_value_and_names_a_bad_value(lab_model):
    from lab.fleet.compare import parse_values, sweep, sweep_rows

    fleet = FleetConfig(num_replicas=2)
    assert parse_values("num_replicas", "1, 3, 3", fleet) == [1, 3]
    for knob, text, named in (("num_replicas", "0", "num_replicas = '0'"), ("rate", "500", "rate = '500'"),
                              ("router", "llmd", "can vary"), ("num_prefill_replicas", "2", "at least one decode")):
        with pytest.raises(ValueError, match=named):
            parse_values(knob, text, fleet)
    config = EngineConfig(model=lab_model, enable_prefix_caching=True)
    points = sweep(config, fleet, LOAD, "rate", [2.0, 6.0], load_model)
    rows = sweep_rows("rate", points)
    assert [r["rate"] for r in rows] == ["2.0", "6.0"] and all(r["finished"] for r in rows)
    served = [p.metrics["aggregate"]["num_requests_finished"] for p in points]
    vocab = load_model(lab_model).vocab_size
    assert served == [len(dataclasses.replace(LOAD, rate=r).requests(vocab)) for r in (2.0, 6.0)] == [8, 24]
