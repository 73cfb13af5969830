"""The CUDA-graph padding view: the stairs a step of n decodes climbs as n sweeps up to max_num_seqs, and what
they cost on the deployment, drawn from the deployment model the engine prices every step with."""

from __future__ import annotations

from engine import Engine, EngineConfig, SamplingParams
from engine.cudagraph import capture_sizes
from lab.charts import padding
from lab.charts.registry import FIGURE, Frame

DEPLOYMENT = "llama-3.1-8b@h100-sxm"


def test_a_step_of_n_decodes_computes_the_next_captured_size():
    batches, rows, graphed, plain = padding.sweep(DEPLOYMENT, 16, 256, 512)
    assert batches == tuple(range(1, 17))
    assert [rows[n - 1] for n in (1, 3, 5, 9, 15, 16)] == [1, 4, 8, 16, 16, 16]  # 9 decodes pay for 16
    sizes = capture_sizes(16, 256, "h100-sxm")
    for n, padded, with_graphs, without in zip(batches, rows, graphed, plain, strict=True):
        assert padded == min(s for s in sizes if s >= n)
        assert with_graphs >= without and (with_graphs == without) == (padded == n)
    # max_num_seqs is captured itself: a full batch of 12 is never padded, 9 of them are.
    _, rows12, _, _ = padding.sweep(DEPLOYMENT, 12, 256, 512)
    assert rows12[11] == 12 and rows12[8] == 12


def test_the_view_marks_this_step_and_is_drawn_only_where_a_named_model_prices_it(lab_model):
    engine = Engine(EngineConfig(model=lab_model, deployment=DEPLOYMENT, max_num_seqs=16))
    for i in range(9):
        engine.add_request([5 + i] * 10, SamplingParams(max_tokens=4, ignore_eos=True))
    records = engine.run()
    frame = Frame(records[:2], len(records))  # step 1: nine decodes
    assert [c.kind for c in frame.record.batch] == ["decode"] * 9
    figure = FIGURE["padding"].build(frame)
    dots = [t for t in figure.data if t.name == "step 1"]
    assert [(d.x[0], d.y[0]) for d in dots][0] == (9, 16)
    assert FIGURE["padding"].applies(frame)
    unpriced = Engine(EngineConfig(model=lab_model))
    unpriced.add_request([5, 6, 7], SamplingParams(max_tokens=2))
    assert not FIGURE["padding"].applies(Frame(unpriced.run(), 2))
    own = Engine(EngineConfig(model=lab_model, deployment="this@l4"))
    own.add_request([5, 6, 7], SamplingParams(max_tokens=2))
    assert not FIGURE["padding"].applies(Frame(own.run(), 2))  # a record does not name the model's folder
