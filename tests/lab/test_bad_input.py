"""Bad input, case by case: every knob, request field and link parameter a user (or a crafted link)
can get wrong gets a message naming what is wrong. The app-level cases (uploads, the knob boxes,
links opened in the app) are in test_app*.py; these are the engine's and the link decoder's own."""

from __future__ import annotations

import math

import pytest

from engine import EngineConfig, SamplingParams
from lab.link import decode_scenario

INT_KNOBS = ("block_size", "num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs")
BAD_INTS = (0, -1, 10**12, "8", math.nan, True, 2.5)
KNOB_CASES = [(k, v) for k in INT_KNOBS for v in BAD_INTS]
KNOB_CASES += [(k, v) for k in ("num_cpu_blocks", "long_prefill_token_threshold", "seed") for v in (-1, "8", True, 2.5)]
KNOB_CASES += [("max_model_len", v) for v in (1, -5, "512", math.nan)]
KNOB_CASES += [(k, v) for k in ("watermark", "slo_ttft_ms", "slo_tpot_ms", "slo_percentile")
               for v in (-1, math.nan, math.inf, "x", True)]
KNOB_CASES += [("watermark", 1.0), ("slo_ttft_ms", 0), ("slo_percentile", 0), ("slo_percentile", 101)]
KNOB_CASES += [(k, v) for k in ("enable_chunked_prefill", "enable_prefix_caching", "preempt_on_admission")
               for v in (1, "yes", None)]
KNOB_CASES += [(k, v) for k in ("step_order", "scheduling_policy", "preemption_mode", "victim_rule",
                                "admission_reserve", "engine_preset", "kv_allocation", "device", "dtype")
               for v in ("nope", 3, "")]
KNOB_CASES += [("deployment", v) for v in ("nope", "llama-3.1-8b@nogpu", "llama-3.1-8b@h100-sxm+nolink", 3)]


@pytest.mark.parametrize(("knob", "value"), KNOB_CASES, ids=[f"{k}={v!r}" for k, v in KNOB_CASES])
def test_a_bad_knob_is_refused_by_name(knob, value):
    with pytest.raises(ValueError, match=knob):
        EngineConfig(**{knob: value})


SAMPLING_CASES = [("max_tokens", 0), ("max_tokens", -1), ("max_tokens", 1.5), ("max_tokens", "8"),
                  ("temperature", -1), ("temperature", math.nan), ("temperature", 6), ("top_p", 0), ("top_p", 1.5),
                  ("top_p", math.nan), ("seed", -3), ("stop_token_ids", [-1]), ("stop_token_ids", ["a"])]


@pytest.mark.parametrize(("field", "value"), SAMPLING_CASES, ids=[f"{f}={v!r}" for f, v in SAMPLING_CASES])
def test_bad_sampling_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


REQUEST_CASES = [
    (dict(prompt=""), "prompt"), (dict(prompt=[]), "prompt"), (dict(prompt=[10**9]), "token ids"),
    (dict(prompt=[-1]), "token ids"), (dict(prompt=[1.5]), "token ids"), (dict(prompt="hi", priority=1.5), "priority"),
    (dict(prompt="hi", priority="a"), "priority"), (dict(prompt="hi", arrival_step=-1), "arrival_step"),
    (dict(prompt="hi", arrival_ms=-5.0), "arrival_ms"), (dict(prompt="hi", length_scale=0), "length_scale"),
    (dict(prompt="hi", length_scale=2), "length_scale")]


@pytest.mark.parametrize(("kwargs", "named"), REQUEST_CASES, ids=[str(k)[:40] for k, _ in REQUEST_CASES])
def test_a_bad_request_is_refused_by_name_and_the_engine_carries_on(tiny_llama, kwargs, named):
    from engine import Engine

    engine = Engine(EngineConfig(model=tiny_llama))
    engine.add_request("fine", SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match=named):
        engine.add_request(**kwargs)
    assert len(engine.requests) == 1 and len(engine.run()) >= 2  # the good request still runs


def test_a_request_that_can_never_fit_is_rejected_with_its_reason(tiny_llama):
    from engine import Engine

    engine = Engine(EngineConfig(model=tiny_llama, max_model_len=64))
    rid = engine.add_request("x " * 500, SamplingParams(max_tokens=10**9), arrival_step=3)
    records = engine.run()  # refused when it arrives (issue 31, bug 7: it was refused in step 0's events)
    assert [r.step for r in records] == [0, 1, 2, 3]
    assert not any(e.kind == "rejected" for r in records[:3] for e in r.events)
    assert any(e.kind == "rejected" and e.request_id == rid and "max_model_len" in e.reason for e in records[3].events)
    assert records[3].requests[rid].finish_reason == "rejected"


LINK_CASES = [
    ({"k.num_gpu_blocks": "abc"}, "k.num_gpu_blocks"), ({"k.num_gpu_blocks": "-3"}, "k.num_gpu_blocks"),
    ({"k.watermark": "nan"}, "k.watermark"), ({"k.model": "/etc"}, "k.model"), ({"k.device": "cuda"}, "k.device"),
    ({"k.nope": "1"}, "k.nope"), ({"zzz": "1"}, "zzz"), ({"step": "-4"}, "step"), ({"step": "1e99"}, "step"),
    ({"seed": "x"}, "seed"), ({"preset": "nope"}, "preset"), ({"gen.rate": "fast"}, "gen.rate"),
    ({"req.0": "hi", "req.0.max_tokens": "0"}, "req.0"), ({"trace": "nope"}, "trace"),
    ({"lesson": "../../etc"}, "lesson"), ({"k.engine_preset": "nope"}, "k.engine_preset"),
]


@pytest.mark.parametrize(("params", "named"), LINK_CASES, ids=[str(p)[:40] for p, _ in LINK_CASES])
def test_a_bad_link_parameter_is_named_and_the_rest_is_kept(params, named):
    scenario, warnings = decode_scenario({**params, "k.max_num_seqs": "3"}, EngineConfig())
    assert any(named in w for w in warnings), warnings
    assert scenario.knobs.get("max_num_seqs") == 3  # the good parameter beside it still applies


@pytest.mark.parametrize("text", ["²", "١٢", "1" * 5000])
def test_digits_that_int_refuses_are_named_not_raised(text):
    """str.isdigit() takes '²' (and a 5,000-digit run), which int() refuses: each reader that
    checked with it raised from a visitor's link, file or knob instead of naming the value."""
    from engine.fleet.config import FleetConfig
    from engine.request import id_order

    assert id_order(f"r{text}") == (1 << 62, f"r{text}")
    with pytest.raises(ValueError, match="replica_gpu_blocks must list"):
        FleetConfig(num_replicas=1, replica_gpu_blocks=text)
