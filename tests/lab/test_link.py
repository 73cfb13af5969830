"""A scenario link round-trips exactly, and a bad link never breaks the lab: each bad
parameter falls back to its default with a warning that names it."""

from __future__ import annotations

import dataclasses
from urllib.parse import parse_qsl, urlencode

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine import EngineConfig
from engine.hardware import SUGGESTED
from engine.knobs import KNOB, KNOBS, LINK_KNOBS, Knob
from engine.workload import PRESETS, GeneratorSpec, WorkloadItem, WorkloadSource, generate_workload
from lab.link import (
    LINK_LIST,
    Scenario,
    changed_knobs,
    decode_scenario,
    encode_scenario,
    scenario_config,
    scenario_workload,
)

DEFAULTS = EngineConfig()

def knob_values(knob: Knob) -> st.SearchStrategy:
    """Any value the knob's row accepts, drawn from the row itself: a new knob is covered by itself."""
    if knob.choices:
        values = st.sampled_from(knob.choices)
    elif knob.type is bool:
        values = st.booleans()
    elif knob.type is int:
        values = st.integers(int(knob.low), int(knob.high))
    elif knob.type is float:
        values = st.floats(knob.low, knob.high, exclude_min=knob.open_low, exclude_max=knob.open_high)
    else:  # free text: the deployments the lab suggests
        values = st.sampled_from(SUGGESTED)
    return values | st.none() if knob.optional else values


# A valid value for every knob a link may carry, from the knob table.
KNOB_VALUES = {name: knob_values(KNOB[name]) for name in LINK_KNOBS}


def test_every_knob_a_link_may_carry_is_drawn():
    assert set(KNOB_VALUES) == {k.name for k in KNOBS if k.link} and len(KNOB_VALUES) == len(KNOBS) - 2


@st.composite
def knob_sets(draw) -> dict:
    names = draw(st.lists(st.sampled_from(sorted(KNOB_VALUES)), unique=True, max_size=6))
    knobs = {n: draw(KNOB_VALUES[n]) for n in names}
    if knobs.get("enable_prefix_caching") and knobs.get("kv_allocation") == "contiguous":
        del knobs["kv_allocation"]
    if knobs.get("slo_admission"):  # it admits by a TTFT target priced on a deployment
        knobs |= dict(slo_ttft_ms=knobs.get("slo_ttft_ms") or 500.0, deployment=knobs.get("deployment") or SUGGESTED[0])
    if knobs.get("async_scheduling"):  # vLLM v1's loop, without CPU drafts (a preset could bring another)
        knobs |= dict(step_order="decode_first", preemption_mode="recompute", speculative_method="none")
        knobs.pop("engine_preset", None)
    low, high = (knobs.get(k, getattr(DEFAULTS, k)) for k in ("prompt_lookup_min", "prompt_lookup_max"))
    if low > high:  # the n-grams run from the longest down to the shortest
        knobs["prompt_lookup_min"] = knobs["prompt_lookup_max"] = high
    # A scenario holds only the knobs that differ from the defaults, in the config's order.
    return {k: knobs[k] for k in LINK_KNOBS if k in knobs and knobs[k] != getattr(DEFAULTS, k)}


ranges = st.tuples(st.integers(1, 500), st.integers(0, 500)).map(lambda p: (p[0], p[0] + p[1]))
specs = st.builds(GeneratorSpec, seed=st.integers(0, 2**32), num_requests=st.integers(1, 500),
                  arrival_rate=st.floats(0.01, 100), prompt_tokens=ranges, output_tokens=ranges,
                  priorities=st.integers(1, 10))
prompts = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=60).filter(str.strip)
items = st.builds(WorkloadItem, prompt=prompts, max_tokens=st.integers(1, 4096), priority=st.integers(-5, 5),
                  arrival_step=st.integers(0, 100_000), temperature=st.floats(0, 5), ignore_eos=st.booleans())
scenarios = st.builds(
    Scenario,
    lesson=st.none() | st.from_regex(r"[\w.-]{1,20}", fullmatch=True).filter(str.isascii),
    knobs=knob_sets(),
    workload=st.none() | st.just(LINK_LIST) | st.sampled_from(sorted(PRESETS)).map(lambda p: WorkloadSource(preset=p))
    | specs.map(lambda spec: WorkloadSource(generator=spec)),
    requests=st.lists(items, max_size=4),
    step=st.integers(0, 100_000),
)


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios)
# Async scheduling travels too (the generator once drew it beside swap preemption, which the engine refuses).
@example(scenario=Scenario(lesson=None, knobs={"block_size": 1, "async_scheduling": True}, workload=None,
                           requests=[], step=0))
def test_link_round_trips(scenario):
    params = encode_scenario(scenario)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())
    assert decode_scenario(params) == (scenario, [])
    # ... and survives being written into a real URL and read back.
    assert decode_scenario(dict(parse_qsl(urlencode(params), keep_blank_values=True))) == (scenario, [])


@settings(max_examples=200, deadline=None)
@given(params=st.dictionaries(
    st.sampled_from(["lesson", "preset", "seed", "gen.rate", "gen.prompt", "step", "req.0", "req.0.max_tokens",
                     "req.1.ignore_eos", "k.watermark", "k.max_model_len", "k.block_size", "k.step_order",
                     "k.enable_prefix_caching", "k.kv_allocation", "k.model", "other"]) | st.text(max_size=12),
    st.text(max_size=12) | st.sampled_from(["0", "1", "-3", "true", "none", "8-96", "0.5", "nan", "1e400"]),
    max_size=8))
def test_any_link_decodes_without_raising_to_a_stable_scenario(params):
    scenario, warnings = decode_scenario(params)
    assert all(isinstance(w, str) for w in warnings)
    assert decode_scenario(encode_scenario(scenario)) == (scenario, [])
    scenario_config(scenario)  # whatever a link held, the config it gives is valid


def test_example_link():
    scenario, warnings = decode_scenario({"lesson": "4", "k.num_gpu_blocks": "24", "k.enable_prefix_caching": "true",
                                          "k.max_model_len": "none", "preset": "burst", "step": "12"})
    assert warnings == []
    assert scenario == Scenario(lesson="4", knobs={"num_gpu_blocks": 24, "enable_prefix_caching": True},
                                workload=WorkloadSource(preset="burst"), step=12)
    config = scenario_config(scenario)
    assert (config.num_gpu_blocks, config.enable_prefix_caching, config.block_size) == (24, True, 16)
    assert scenario_workload(scenario) == PRESETS["burst"]()


def test_generated_workload_and_requests():
    spec = GeneratorSpec(seed=3, arrival_rate=2.0, prompt_tokens=(4, 9))
    extra = WorkloadItem("ROMEO: hi", max_tokens=8, temperature=0.7)
    scenario = Scenario(workload=WorkloadSource(generator=spec), requests=[extra])
    params = encode_scenario(scenario)
    assert params == {"seed": "3", "gen.rate": "2.0", "gen.prompt": "4-9", "req.0": "ROMEO: hi",
                      "req.0.max_tokens": "8", "req.0.temperature": "0.7"}
    assert scenario_workload(decode_scenario(params)[0]) == generate_workload(spec) + [extra]


def test_knobs_relative_to_other_defaults():
    base = EngineConfig(num_gpu_blocks=24)
    config = dataclasses.replace(base, max_num_seqs=2)
    knobs = changed_knobs(config, base)
    assert knobs == {"max_num_seqs": 2}
    params = encode_scenario(Scenario(knobs=knobs), base)
    assert params == {"k.max_num_seqs": "2"}
    assert scenario_config(decode_scenario(params, base)[0], base) == config


@pytest.mark.parametrize("params, bad_key, why", [
    ({"k.pool_size": "3"}, "k.pool_size", "unknown knob 'pool_size'"),
    ({"k.num_gpu_blocks": "0"}, "k.num_gpu_blocks", "num_gpu_blocks must be an integer in [1, 1000000]"),
    ({"k.watermark": "1.5"}, "k.watermark", "watermark must be a fraction in [0, 0.99]"),
    ({"k.watermark": "nan"}, "k.watermark", "expected a number"),
    ({"k.enable_chunked_prefill": "maybe"}, "k.enable_chunked_prefill", "expected true or false"),
    ({"k.step_order": "random"}, "k.step_order", "step_order must be one of"),
    ({"k.model": "/etc"}, "k.model", "cannot be set from a link"),
    ({"k.enable_prefix_caching": "true", "k.kv_allocation": "contiguous"}, "k.kv_allocation",
     "enable_prefix_caching needs kv_allocation='paged'"),
    ({"preset": "rush_hour"}, "preset", "no such preset"),
    ({"seed": "-1", "gen.rate": "2"}, "seed", "seed must be an integer >= 0"),
    ({"seed": "1", "gen.prompt": "96-8"}, "gen.prompt", "prompt_tokens must be"),
    ({"seed": "1", "gen.rate": "fast"}, "gen.rate", "expected a number"),
    ({"preset": "burst", "seed": "3"}, "seed", "also names a preset"),
    ({"step": "twelve"}, "step", "expected an integer"),
    ({"step": "-2"}, "step", "the step must be in [0, 100000]"),
    ({"step": "4.5"}, "step", "expected an integer"),
    ({"lesson": "../../etc"}, "lesson", "a lesson id is"),
    ({"req.0": " "}, "req.0", "field 'prompt'"),
    ({"req.0": "hi", "req.0.max_tokens": "0"}, "req.0.max_tokens", "field 'max_tokens'"),
    ({"req.0": "hi", "req.0.colour": "red"}, "req.0.colour", "unknown request field 'colour'"),
    ({"req.3.priority": "1"}, "req.3.priority", "there is no req.3"),
    ({"utm_source": "mail"}, "utm_source", "unknown parameter"),
])
def test_bad_parameter_warns_and_falls_back(params, bad_key, why):
    scenario, warnings = decode_scenario(params)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"link parameter {bad_key}=") and why in warnings[0], warnings[0]
    # The bad parameter left its default: dropping it from the link gives the same scenario.
    assert decode_scenario({k: v for k, v in params.items() if k != bad_key}) == (scenario, [])


def test_good_parameters_survive_bad_ones():
    scenario, warnings = decode_scenario({"lesson": "4", "k.num_gpu_blocks": "24", "k.bogus": "1",
                                          "preset": "nope", "step": "x", "req.0": "ROMEO:"})
    assert scenario == Scenario(lesson="4", knobs={"num_gpu_blocks": 24}, requests=[WorkloadItem("ROMEO:")])
    assert [w.split("=")[0] for w in warnings] == ["link parameter k.bogus", "link parameter preset",
                                                   "link parameter step"]


def test_lessons_are_checked_when_known():
    assert decode_scenario({"lesson": "4"}, lessons=["1", "4"])[0].lesson == "4"
    scenario, warnings = decode_scenario({"lesson": "9"}, lessons=["1", "4"])
    assert scenario.lesson is None and "no such lesson (lessons: 1, 4)" in warnings[0]


def test_knobs_are_relative_to_the_lessons_config():
    lessons = {"04_kv_cache_full": EngineConfig(block_size=4, num_gpu_blocks=16), "01_the_loop": DEFAULTS}
    base = lessons["04_kv_cache_full"]
    wanted = dataclasses.replace(base, num_gpu_blocks=12, preemption_mode="swap")
    scenario = Scenario(lesson="04_kv_cache_full", knobs=changed_knobs(wanted, base))
    params = encode_scenario(scenario, base)
    assert params == {"lesson": "04_kv_cache_full", "k.num_gpu_blocks": "12", "k.preemption_mode": "swap"}
    decoded, warnings = decode_scenario(params, lessons=lessons)
    assert (decoded, warnings) == (scenario, [])
    assert scenario_config(decoded, base) == wanted
    # A knob set back to the lesson's own value is not carried: the link stays short.
    assert decode_scenario({**params, "k.block_size": "4"}, lessons=lessons) == (scenario, [])


def test_a_link_without_a_workload_keeps_the_default_one():
    mine = [WorkloadItem("KING: What news?")]
    scenario = decode_scenario({"req.0": "PAGE: My lord"})[0]
    assert scenario_workload(scenario, default=mine) == mine + [WorkloadItem("PAGE: My lord")]


def test_a_preset_with_a_knob_set_back_to_v1s_value_survives_a_link():
    config = EngineConfig.for_preset("sglang", step_order="decode_first")
    params = encode_scenario(Scenario(knobs=changed_knobs(config)))
    scenario, warnings = decode_scenario(params)
    assert not warnings and scenario_config(scenario) == config


def test_a_link_asking_for_async_scheduling_beside_swap_keeps_the_swap_and_says_why():
    scenario, errors = decode_scenario({"k.async_scheduling": "true", "k.preemption_mode": "swap"})
    assert scenario.knobs == {"preemption_mode": "swap"}
    assert errors == ["link parameter k.async_scheduling='true' ignored: async_scheduling needs "
                      "step_order='decode_first', preemption_mode='recompute' and speculative_method='none' (vLLM "
                      "v1's loop; vLLM 0.32 refuses it with n-gram drafts proposed on the CPU); got "
                      "preemption_mode='swap'"]
