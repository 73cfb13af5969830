"""CUDA-graph padding in the deployment model (engine/cudagraph.py). Its sizes and padding are held to
vLLM's own code by tests/reference/vllm_cudagraph.py; these tests hold the prices and the records to it."""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.cudagraph import capture_sizes, dispatch
from engine.hardware import Deployment

H100_8B = Deployment("llama-3.1-8b", "h100-sxm")
SIZES = capture_sizes(256, 8192, "h100-sxm")  # vLLM's defaults on an H100 at max_num_seqs=256: up to 512


def test_a_step_replays_the_next_captured_size_or_runs_eager_past_the_largest():
    assert capture_sizes(16, 256, "h100-sxm") == (1, 2, 4, 8, 16, 24, 32)
    assert capture_sizes(256, 8192, "b200")[-1] == 512 and capture_sizes(600, 8192, "b200")[-1] == 1024
    assert dispatch(SIZES, 9, decodes_only=True).padded_tokens == 16  # 9 sequences cost what 16 do
    assert dispatch(SIZES, 9, decodes_only=True).mode == "full"
    assert dispatch(SIZES, 9, decodes_only=False).mode == "piecewise"
    assert dispatch(SIZES, 257, decodes_only=True).padded_tokens == 272
    eager = dispatch(SIZES, 513, decodes_only=False)
    assert (eager.mode, eager.padded_tokens) == ("eager", 513)
    assert dispatch((), 3, decodes_only=True).mode == "eager"


def test_padding_costs_the_matmul_rows_it_adds_and_no_useful_flops():
    nine = H100_8B.step_cost([(1, 2000)] * 9, graph_sizes=SIZES)
    sixteen = H100_8B.step_cost([(1, 2000)] * 16, graph_sizes=SIZES)
    eager = H100_8B.step_cost([(1, 2000)] * 9)
    assert (nine.graph, nine.tokens, nine.padded_tokens) == ("full", 9, 16)
    assert (eager.graph, eager.padded_tokens) == ("eager", 9)
    assert nine.parts["elementwise"] == pytest.approx(sixteen.parts["elementwise"])  # 16 rows either way
    assert nine.parts["attention"] == pytest.approx(eager.parts["attention"])  # on the real sequences only
    assert nine.flops == pytest.approx(eager.flops) and nine.flops < sixteen.flops  # padding is no useful work
    assert nine.total_ms >= eager.total_ms


def test_past_the_ridge_decode_cost_climbs_in_steps_of_the_captured_sizes():
    """In the compute-bound region every row costs, so batches that replay one graph cost the same and the
    cost jumps at each captured size: the staircase a sweep of max_num_seqs walks along."""
    linear = {n: H100_8B.step_cost([(1, 512)] * n, graph_sizes=SIZES).parts["linear"] for n in range(337, 370)}
    jump = linear[353] - linear[352]  # 16 more rows through every layer
    inside = [linear[n + 1] - linear[n] for n in (*range(337, 352), *range(353, 368))]
    assert all(0 < step < jump / 10 for step in inside)  # only the sampled sequence's lm_head row is new
    unpadded = [H100_8B.step_cost([(1, 512)] * n).parts["linear"] for n in range(352, 355)]
    assert unpadded[2] - unpadded[1] == pytest.approx(unpadded[1] - unpadded[0])  # eager: every row its price


def test_the_engine_records_the_graph_each_priced_step_replays(lab_model):
    engine = Engine(EngineConfig(model=lab_model, deployment="llama-3.1-8b@h100-sxm", max_num_seqs=6,
                                 max_num_batched_tokens=64))
    for i in range(5):
        engine.add_request([3 + i, 9, 27, 4, 8] * (2 + i), SamplingParams(max_tokens=6, ignore_eos=True))
    records = engine.run()
    sizes = capture_sizes(6, 64, "h100-sxm")
    assert sizes == (1, 2, 4, 6, 8)  # up to twice max_num_seqs, max_num_seqs itself included
    for r in records:
        if not r.batch:
            continue
        tokens = sum(c.num_tokens for c in r.batch)
        decodes_only = all(c.kind == "decode" for c in r.batch)
        want = dispatch(sizes, tokens, decodes_only)
        assert (r.modeled.graph, r.modeled.tokens, r.modeled.padded_tokens) == (want.mode, tokens,
                                                                                want.padded_tokens), r.step
    assert {r.modeled.graph for r in records if r.batch} >= {"full", "eager"}


def test_with_drafts_a_decode_is_one_plus_k_tokens_and_graphs_are_captured_for_batches_of_them():
    sizes = capture_sizes(4, 256, "h100-sxm", query_len=4)  # 3 drafts: every decode computes 4 tokens
    assert sizes == (1, 2, 4, 8, 16, 24, 32)  # up to twice 4 decodes of 4 tokens; 4, 8 and 16 decodes' sizes
    cost = H100_8B.step_cost([(4, 100)] * 3, graph_sizes=sizes, query_len=4)
    assert (cost.graph, cost.tokens, cost.padded_tokens) == ("full", 12, 16)
    mixed = H100_8B.step_cost([(4, 100), (1, 100)], graph_sizes=sizes, query_len=4)  # one found no draft
    assert (mixed.graph, mixed.padded_tokens) == ("piecewise", 8)
