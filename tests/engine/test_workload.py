"""Workload files, presets and the generator: what a run replays must read back exactly,
fail with a message that names the line and field, and be the same every time."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from engine import DEFAULT_MODEL, Engine, EngineConfig
from engine.limits import MAX_OUTPUT_TOKENS, MAX_REQUESTS, MAX_STEPS
from engine.workload import (
    FORMATS,
    PRESETS,
    GeneratorSpec,
    WorkloadError,
    WorkloadItem,
    dump_workload,
    generate_workload,
    parse_workload,
    submit,
)

# Any text with something to say: control characters, quotes, commas, newlines and
# Unicode line separators included, since files must carry prompts verbatim.
items = st.builds(
    WorkloadItem,
    prompt=st.text(min_size=1, max_size=40).filter(str.strip),
    max_tokens=st.integers(1, MAX_OUTPUT_TOKENS),
    priority=st.integers(-1000, 1000),
    arrival_step=st.integers(0, MAX_STEPS),
    temperature=st.floats(0, 5, allow_nan=False),
    ignore_eos=st.booleans(),
    stop_token=st.sampled_from([None, "\n", ".]", ", "]),
)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None)
@given(workload=st.lists(items, min_size=1, max_size=6))
def test_round_trip(fmt, workload):
    assert parse_workload(dump_workload(workload, fmt), fmt) == workload


def test_dump_is_readable():
    text = dump_workload([WorkloadItem("ROMEO:", max_tokens=5, ignore_eos=True)], "csv")
    assert text == ("prompt,max_tokens,priority,arrival_step,temperature,ignore_eos,arrival_ms,prompt_tokens,"
                    "length_scale,stop_token\r\nROMEO:,5,0,0,0.0,true,,,1.0,\r\n")


def test_csv_defaults_and_column_subset():
    text = "max_tokens,prompt\n7,ROMEO:\n,\"JULIET:, with a comma\"\n"
    assert parse_workload(text, "csv") == [WorkloadItem("ROMEO:", max_tokens=7),
                                           WorkloadItem("JULIET:, with a comma")]


def test_jsonl_skips_blank_lines_and_byte_order_mark():
    text = '\ufeff{"prompt": "a"}\n\n  \r\n{"prompt": "b", "priority": -2}\r\n'
    assert parse_workload(text, "jsonl") == [WorkloadItem("a"), WorkloadItem("b", priority=-2)]


GOOD_LINE = '{"prompt": "ROMEO:"}\n'


@pytest.mark.parametrize(("fmt", "text", "expected"), [
    ("jsonl", GOOD_LINE + '{"prompt": "x", "max_tokens": 4,\n', ["line 2", "not valid JSON"]),
    ("jsonl", GOOD_LINE + '["ROMEO:"]\n', ["line 2", "JSON object"]),
    ("jsonl", GOOD_LINE + '{"max_tokens": 4}\n', ["line 2, field 'prompt'", "missing"]),
    ("jsonl", GOOD_LINE + '{"prompt": "   "}\n', ["line 2, field 'prompt'", "non-space"]),
    ("jsonl", GOOD_LINE * 2 + '{"prompt": "x", "max_tokens": -1}\n',
     ["line 3, field 'max_tokens'", "integer in [1, 100000]", "got -1"]),
    ("jsonl", GOOD_LINE + '{"prompt": "x", "max_tokens": "12"}\n', ["line 2, field 'max_tokens'", "got '12'"]),
    ("jsonl", GOOD_LINE + '{"prompt": "x", "max_tokens": true}\n', ["line 2, field 'max_tokens'"]),
    ("jsonl", GOOD_LINE + '{"prompt": "x", "max_token": 3}\n',
     ["line 2, field 'max_token'", "unknown field", "did you mean 'max_tokens'"]),
    ("jsonl", GOOD_LINE + '{"prompt": "x", "temperature": 9}\n', ["line 2, field 'temperature'", "[0, 5]"]),
    ("jsonl", GOOD_LINE + '{"prompt": "x", "arrival_step": -3}\n', ["line 2, field 'arrival_step'"]),
    ("jsonl", GOOD_LINE + '{"prompt": "x", "priority": 1.5}\n', ["line 2, field 'priority'"]),
    ("jsonl", GOOD_LINE + '{"prompt": "x", "ignore_eos": "yes"}\n', ["line 2, field 'ignore_eos'", "'yes'"]),
    ("csv", "text,max_tokens\nROMEO:,3\n", ["line 1", "'text'", "header row"]),
    ("csv", "ROMEO:,3\n", ["line 1", "unknown column", "header row"]),
    ("csv", "max_tokens,priority\n3,0\n", ["line 1", "no 'prompt' column"]),
    ("csv", "prompt,prompt\nROMEO:,JULIET:\n", ["line 1", "repeats"]),
    ("csv", "prompt,max_tokens\nROMEO:,3\nJULIET:,abc\n",
     ["line 3, field 'max_tokens'", "must be an integer in [1, 100000], got 'abc'"]),
    ("csv", "prompt,max_tokens\nROMEO:,3,1\n", ["line 2", "3 cells", "2 columns"]),
    # A quoted prompt spans lines 2-3, so the bad row starts on physical line 4.
    ("csv", 'prompt,ignore_eos\n"two\nlines",true\nROMEO:,maybe\n', ["line 4, field 'ignore_eos'", "'maybe'"]),
    ("jsonl", "", ["empty"]),
    ("jsonl", "\n  \n", ["empty"]),
    ("csv", "prompt,max_tokens\n", ["empty", "header row"]),
    ("yaml", GOOD_LINE, ["format", "'yaml'"]),
])
def test_bad_files_name_line_and_field(fmt, text, expected):
    with pytest.raises(WorkloadError) as info:
        parse_workload(text, fmt)
    for part in expected:
        assert part in str(info.value)


def test_error_carries_line_and_field():
    with pytest.raises(WorkloadError) as info:
        parse_workload(GOOD_LINE + '{"prompt": "x", "max_tokens": 0}', "jsonl")
    assert (info.value.line, info.value.field) == (2, "max_tokens")


@pytest.mark.parametrize("fmt", FORMATS)
def test_request_limit(fmt):
    at_limit = [WorkloadItem("ROMEO:")] * MAX_REQUESTS
    assert len(parse_workload(dump_workload(at_limit, fmt), fmt)) == MAX_REQUESTS
    with pytest.raises(WorkloadError, match=f"at most {MAX_REQUESTS}"):
        parse_workload(dump_workload(at_limit + [WorkloadItem("one more")], fmt), fmt)


def test_items_validate_on_construction():
    with pytest.raises(WorkloadError, match="field 'max_tokens'"):
        WorkloadItem("ROMEO:", max_tokens=0)
    assert WorkloadItem("ROMEO:", temperature=1).temperature == 1.0
    with pytest.raises(WorkloadError, match="field 'stop_token'"):
        WorkloadItem("ROMEO:", stop_token="")


def test_a_stop_token_stops_its_request_and_must_be_one_token(tiny_llama):
    engine = Engine(EngineConfig(model=tiny_llama))
    [plain] = submit(engine, [WorkloadItem("ROMEO:", max_tokens=8, ignore_eos=True)])
    engine.run()
    output = engine.requests[plain].output_token_ids
    encode = engine.loaded.tokenizer.encode
    token = next(t for t in output if encode(engine.loaded.token_text(t), add_special_tokens=False) == [t])
    engine = Engine(EngineConfig(model=tiny_llama))
    [rid] = submit(engine, [WorkloadItem("ROMEO:", max_tokens=8, ignore_eos=True,
                                         stop_token=engine.loaded.token_text(token))])
    engine.run()
    assert engine.requests[rid].output_token_ids == output[:output.index(token) + 1]
    assert engine.requests[rid].finish_reason.value == "stop"
    with pytest.raises(WorkloadError, match="stop_token 'ROMEO and JULIET' is [0-9]+ tokens of this model, not one"):
        submit(engine, [WorkloadItem("x", stop_token="ROMEO and JULIET")])


# ---- generator ----------------------------------------------------------------------------


def test_generator_is_deterministic_and_seeded():
    spec = GeneratorSpec(seed=3, num_requests=40, priorities=3)
    assert generate_workload(spec) == generate_workload(GeneratorSpec(seed=3, num_requests=40, priorities=3))
    assert generate_workload(spec) != generate_workload(GeneratorSpec(seed=4, num_requests=40, priorities=3))


def test_generator_respects_the_spec():
    spec = GeneratorSpec(seed=1, num_requests=200, prompt_tokens=(10, 20), output_tokens=(5, 9), priorities=3)
    work = generate_workload(spec)
    assert len(work) == 200
    assert all(5 <= w.max_tokens <= 9 for w in work)
    assert {w.priority for w in work} == {0, 1, 2}
    steps = [w.arrival_step for w in work]
    assert steps[0] == 0 and steps == sorted(steps)
    # Word counts follow the token range, less a few tokens for the speaker heading: 5-14 words.
    words = [len(w.prompt.split()) - 1 for w in work]
    assert min(words) >= 4 and max(words) <= 15
    assert len({w.prompt for w in work}) == len(work)
    for fmt in FORMATS:
        assert parse_workload(dump_workload(work, fmt), fmt) == work


@pytest.mark.parametrize("rate", [0.25, 0.5, 2.0])
def test_arrivals_are_poisson(rate):
    """Mean gap between arrivals is 1/rate, and arrivals per step have variance close to
    their mean (a Poisson count's signature), over several seeds."""
    for seed in range(3):
        steps = np.array([w.arrival_step for w in generate_workload(
            GeneratorSpec(seed=seed, num_requests=500, arrival_rate=rate))])
        assert np.diff(steps).mean() == pytest.approx(1 / rate, rel=0.15)
        counts = np.bincount(steps)
        assert counts.mean() == pytest.approx(rate, rel=0.15)
        assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.3)


@pytest.mark.parametrize(("field", "value"), [
    ("num_requests", 0), ("num_requests", MAX_REQUESTS + 1), ("arrival_rate", 0.0), ("arrival_rate", float("inf")),
    ("prompt_tokens", (20, 10)), ("output_tokens", (0, 5)), ("priorities", 0), ("seed", -1),
])
def test_generator_spec_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        GeneratorSpec(**{field: value})


# ---- presets ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_is_a_valid_deterministic_workload(name, tiny_llama):
    work = PRESETS[name]()
    assert work == PRESETS[name](), "presets must be the same every time"
    assert 1 <= len(work) <= MAX_REQUESTS
    for fmt in FORMATS:
        assert parse_workload(dump_workload(work, fmt), fmt) == work
    eng = Engine(EngineConfig(model=tiny_llama))
    ids = submit(eng, work)
    assert ids == [f"r{i}" for i in range(len(work))]
    for rid, item in zip(ids, work, strict=True):
        req = eng.requests[rid]
        assert (req.priority, req.arrival_step, req.sampling.max_tokens, req.sampling.ignore_eos) == \
            (item.priority, item.arrival_step, item.max_tokens, item.ignore_eos)
    records = eng.run(max_steps=4)
    assert any(rec.batch for rec in records), "the preset's first requests run"


def test_presets_have_their_shape():
    """Each preset sets up the situation its lesson is about."""
    chat = PRESETS["chat_mix"]()
    assert len({w.arrival_step for w in chat}) >= 5 and len({w.max_tokens for w in chat}) >= 5
    long = PRESETS["long_prompts"]()
    assert sum(len(w.prompt.split()) >= 100 for w in long) == 3 and any(len(w.prompt.split()) < 15 for w in long)
    shared = [w.prompt for w in PRESETS["shared_system_prompt"]()]
    prefix = os.path.commonprefix(shared)
    assert len(prefix.split()) >= 25 and len(set(shared)) == len(shared)
    burst = PRESETS["burst"]()
    assert {w.arrival_step for w in burst} == {0} and len(burst) >= 12
    prio = PRESETS["mixed_priorities"]()
    first = min(w.arrival_step for w in prio)
    early = [w for w in prio if w.arrival_step == first]
    late = [w for w in prio if w.arrival_step > first]
    assert max(w.priority for w in late) < min(w.priority for w in early)
    assert min(w.max_tokens for w in early) > max(w.max_tokens for w in late)


@pytest.mark.parametrize(("name", "knobs", "counter"), [
    ("shared_system_prompt", {"enable_prefix_caching": True}, "prefix_cache_hits"),
    ("burst", {}, "num_preemptions"),
])
def test_preset_triggers_its_mechanism(tiny_llama, name, knobs, counter):
    """Under the default pool, the prefix preset gets cache hits and the burst preset preempts."""
    eng = Engine(EngineConfig(model=tiny_llama, **knobs))
    submit(eng, PRESETS[name]())
    while eng.counters[counter] == 0 and eng.step_index < 40:
        eng.step()
    assert eng.counters[counter] > 0


@pytest.fixture(scope="module")
def default_tokenizer():
    if not (Path(DEFAULT_MODEL) / "tokenizer.json").exists():
        pytest.skip("the default model is not in engine/default_model yet")
    return AutoTokenizer.from_pretrained(DEFAULT_MODEL)


def test_the_labs_first_workload_shows_each_limit_within_20_steps(default_tokenizer):
    """A newcomer's first 20 steps: a prompt split to fit the token budget, a pool that fills, and a
    request that waits for pages while decodes run. Before, chat_mix gave every request its first
    token in one step and a token-budget sweep was flat."""
    from ui.session import DEFAULT_SOURCE

    def run(**knobs) -> Engine:
        engine = Engine(EngineConfig(model=DEFAULT_MODEL, **knobs))
        submit(engine, DEFAULT_SOURCE.items())
        return engine

    engine = run()
    first = engine.run(max_steps=20)
    kinds = {e.kind for r in first for e in r.events}
    assert {"chunk_scheduled", "blocked"} <= kinds
    assert any(r.budget.tokens_used == r.budget.token_budget for r in first)
    assert max(r.budget.gpu_blocks_used for r in first) >= 0.75 * engine.config.num_gpu_blocks
    assert any(r.stats.num_requests_waiting and r.batch for r in first)
    ttft_p50 = {}
    for budget in (64, 256):
        engine = run(max_num_batched_tokens=budget)
        engine.run()
        ttft_p50[budget] = engine.metrics()["aggregate"]["ttft_steps"]["p50"]
    assert ttft_p50[64] > ttft_p50[256], f"a budget sweep is flat: {ttft_p50}"


def test_token_counts_on_the_default_model(default_tokenizer):
    """The sizes the presets' lessons rely on hold for the tokenizer students run."""
    def count(text: str) -> int:
        return len(default_tokenizer.encode(text))

    long = sorted(count(w.prompt) for w in PRESETS["long_prompts"]())
    assert long[-3] >= 150 and long[-1] <= 300 and long[0] < 20
    prefix = os.path.commonprefix([w.prompt for w in PRESETS["shared_system_prompt"]()])
    assert 3 * 16 < count(prefix) <= 72
    defaults = EngineConfig()
    pages = sum(-(-(count(w.prompt) + w.max_tokens) // defaults.block_size) for w in PRESETS["burst"]())
    assert pages > defaults.num_gpu_blocks
    for low, high in ((8, 96), (20, 40), (100, 200)):
        work = generate_workload(GeneratorSpec(seed=0, num_requests=100, prompt_tokens=(low, high)))
        assert np.mean([count(w.prompt) for w in work]) == pytest.approx((low + high) / 2, rel=0.1)
