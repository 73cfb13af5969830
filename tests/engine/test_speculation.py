"""Speculative decoding with n-gram drafts (engine/speculation.py): the proposer's rule by hand, drafts
taking the token budget and KV slots, what the records say of each draft, sampled output unchanged, and
the bad values named. The proposer and the scheduling are held to vLLM's own code by tests/reference
(vllm_parts.py, and vllm_oracle.py --speculative); greedy output to generate's by test_engine_reference.py."""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.speculation import NgramProposer, verify
from lab.metrics import run_metrics

SPEC = dict(speculative_method="ngram", num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=3)
# A text that repeats itself, so the proposer finds n-grams in it.
PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]


def test_the_longest_ngram_first_its_earliest_occurrence_and_at_most_k_tokens():
    propose = NgramProposer(min_n=1, max_n=3, k=2, max_model_len=100).propose
    assert propose([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3]) == [9, 1]  # "1 2 3" first seen at 0, followed by 9 1
    assert propose([4, 8, 4, 9, 4]) == [8, 4]  # only "4" matches; its first occurrence is followed by 8 4
    assert propose([1, 2, 3, 4]) == []  # nothing repeats
    assert NgramProposer(2, 3, 2, 100).propose([4, 8, 4, 9, 4]) == []  # a 1-gram is below prompt_lookup_min
    assert NgramProposer(1, 3, 5, 12).propose([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3]) == [9]  # room for one more token


def test_verify_keeps_the_drafts_the_model_agrees_with_and_one_token_more():
    model = [10, 11, 12, 13].__getitem__  # the model's token after j drafts
    assert verify([10, 11, 99], model) == [10, 11, 12]  # two accepted, the third replaced by the model's own
    assert verify([10, 11, 12], model) == [10, 11, 12, 13]  # all accepted, and a bonus token
    assert verify([77], model) == [10]
    assert verify([], model) == [10]


def _run(lab_model, prompts, max_tokens=24, temperature=0.0, **knobs):
    engine = Engine(EngineConfig(model=lab_model, **knobs))
    for i, p in enumerate(prompts):
        engine.add_request(p, SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=i,
                                             ignore_eos=True))
    return engine, engine.run()


def test_drafts_take_budget_and_slots_and_the_records_count_each_one(lab_model):
    engine, records = _run(lab_model, [PROMPT, PROMPT[2:], PROMPT[:7]], **SPEC)
    verified = [c for r in records for c in r.batch if c.draft_token_ids]
    assert verified, "the repeating prompts were meant to draw drafts"
    for r in records:
        assert r.budget.tokens_used == sum(c.num_tokens for c in r.batch) <= r.budget.token_budget
        assert r.budget.draft_tokens == sum(len(c.draft_token_ids) for c in r.batch)
        for c in r.batch:
            if c.draft_token_ids:  # the last token, then the drafts; accepted ones came out as tokens
                assert c.num_tokens == 1 + len(c.draft_token_ids) and c.kind == "decode"
                kept = c.new_token_ids[:c.num_accepted]  # (a stop cuts them short: max_tokens reached)
                assert kept == c.draft_token_ids[:len(kept)]
                assert len(c.new_token_ids) == c.num_accepted + 1 or r.requests[c.request_id].finish_reason
    drafted = sum(len(c.draft_token_ids) for c in verified)
    accepted = sum(c.num_accepted for c in verified)
    agg = run_metrics(records)["aggregate"]  # from the records alone
    assert (agg["num_draft_tokens"], agg["num_accepted_tokens"]) == (drafted, accepted)
    assert agg["spec_acceptance_rate"] == pytest.approx(accepted / drafted)
    assert engine.metrics()["aggregate"]["spec_acceptance_rate"] == agg["spec_acceptance_rate"]
    assert 0 < accepted < drafted
    sampled = [c.new_token_ids for r in records for c in r.batch if c.new_token_ids]
    assert len(sampled) < sum(map(len, sampled))  # accepted drafts: tokens won without a step of their own
    plain, _ = _run(lab_model, [PROMPT, PROMPT[2:], PROMPT[:7]])
    for rid in plain.requests:
        assert engine.requests[rid].output_token_ids == plain.requests[rid].output_token_ids


def test_a_rejected_drafts_slots_stay_with_its_request_to_be_written_again(lab_model):
    engine = Engine(EngineConfig(model=lab_model, block_size=4, **SPEC))
    engine.add_request(PROMPT, SamplingParams(max_tokens=24, ignore_eos=True))
    held = []
    while engine.has_unfinished_requests():
        record = engine.step()
        req = engine.requests["r0"]
        chunk = next(iter(record.batch), None)
        if chunk and chunk.draft_token_ids and chunk.num_accepted < len(chunk.draft_token_ids) and not req.is_finished:
            # Computed tokens roll back to the last accepted one; the pages for the rejected slots are kept.
            assert req.num_computed_tokens == req.num_tokens - 1
            assert engine.blocks.num_held("r0") * 4 >= chunk.start + chunk.num_tokens
            held.append(record.step)
    assert held, "some draft was meant to be rejected"


def test_sampled_output_is_the_same_with_drafts(lab_model):
    """Each draw is seeded by the request and its position, and a draft is kept only when the draw equals it,
    so speculation changes how many steps a sampled request takes, not what it says."""
    prompts = [PROMPT, PROMPT[3:]]
    spec, _ = _run(lab_model, prompts, temperature=0.8, **SPEC)
    plain, _ = _run(lab_model, prompts, temperature=0.8)
    assert spec.counters["num_draft_tokens"] > 0
    for rid in plain.requests:
        assert spec.requests[rid].output_token_ids == plain.requests[rid].output_token_ids


def test_a_verify_step_is_priced_on_all_its_tokens(lab_model):
    _, records = _run(lab_model, [PROMPT], deployment="llama-3.1-8b@h100-sxm", **SPEC)
    for r in records:
        if r.batch:
            assert r.modeled.tokens == sum(c.num_tokens for c in r.batch)  # drafts included


@pytest.mark.parametrize(("knobs", "named"), [
    (dict(speculative_method="ngram", num_speculative_tokens=0), r"num_speculative_tokens must be an integer in \[1, "),
    (dict(speculative_method="ngram", num_speculative_tokens=100), r"num_speculative_tokens must be an integer in \["),
    (dict(prompt_lookup_min=0), r"prompt_lookup_min must be an integer in \[1, 16\]"),
    (dict(prompt_lookup_max=0), r"prompt_lookup_max must be an integer in \[1, 16\]"),
    (dict(prompt_lookup_min=4, prompt_lookup_max=2), r"prompt_lookup_min \(4\) must be at most prompt_lookup_max"),
    (dict(speculative_method="eagle"), "speculative_method must be one of 'none', 'ngram'"),
])
def test_bad_speculation_knobs_are_named(knobs, named):
    with pytest.raises(ValueError, match=named):
        EngineConfig(**knobs)
