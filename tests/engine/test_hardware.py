"""The deployment model against hand-computed rooflines and against published measurements.

The published points are data (engine/calibration.json, with their sources): operator-level
matmuls fit the compute fraction, decode steps the bandwidth fraction, and end-to-end prefill
times are kept apart as validation. The model must stay within each point's stated tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import DEFAULT_MODEL
from engine.hardware import (
    GPUS,
    LINK_FRACTION,
    LINKS,
    MODELS,
    STEP_OVERHEAD_MS,
    Deployment,
)

CALIBRATION = json.loads((Path(__file__).resolve().parents[2] / "engine" / "calibration.json").read_text())
POINTS = CALIBRATION["points"]
H100_8B = Deployment("llama-3.1-8b", "h100-sxm")


def modeled_error(point: dict) -> float:
    """The model's relative error at one point: matmul FLOP/s for a matmul, step time for a step."""
    if "gemm" in point:
        b, m, n, k = point["gemm"]
        flops, nbytes = 2 * b * m * n * k, 2 * b * (m * k + k * n + m * n)  # bf16 operands and result
        ms, _ = GPUS[point["gpu"]].roofline_ms(flops, nbytes)
        return flops / (ms * 1e-3) / (point["measured_tflops"] * 1e12) - 1
    modeled = Deployment.parse(point["deployment"]).step_cost([tuple(pair) for pair in point["batch"]]).total_ms
    return modeled / point["measured_ms"] - 1


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p['fits']}: {p.get('deployment', p.get('gpu'))}: "
                                                       f"{p['what']}")
def test_within_the_stated_tolerance_of_each_published_measurement(point):
    assert point["source"] in CALIBRATION["sources"]
    assert abs(modeled_error(point)) < point["tolerance"], (modeled_error(point), point)


def test_each_fitted_fraction_rests_on_points_of_its_own_kind_and_generation():
    """Hopper and Ampere each have operator-level matmuls for compute and decode steps for bandwidth."""
    for gpu in ("h100-sxm", "a100-80gb"):
        kinds = {p["fits"] for p in POINTS if p.get("gpu") == gpu or p.get("deployment", "").endswith(gpu)}
        assert {"compute", "bandwidth", "validation"} <= kinds, (gpu, kinds)


def test_end_to_end_prefill_times_bound_the_modeled_step_from_above():
    """A serving benchmark's time to first token holds the prefill step and the request handling around
    it, so the model's forward pass must come in under it; the README reports by how much."""
    for point in (p for p in POINTS if p["fits"] == "validation"):
        assert -point["tolerance"] < modeled_error(point) < 0, point


def test_the_catalogues_hold_what_the_lab_names():
    assert {"llama-2-7b", "llama-3-8b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen2.5-7b",
            "qwen2.5-72b"} <= set(MODELS)
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l4", "l40s", "rtx-4090", "mi300x",
            "b200"} <= set(GPUS)
    assert set(LINKS) == {"pcie-gen3", "pcie-gen4", "pcie-gen5", "nvlink-c2c"}
    assert all(gpu.link in LINKS for gpu in GPUS.values())


def test_one_decode_is_the_weights_read_at_the_achievable_bandwidth():
    """Hand roofline: llama-3.1-8b has 6.98e9 layer weights and a 525M lm_head, 2 bytes each."""
    weights = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 4096 * 128256
    assert H100_8B.weight_bytes == 2 * weights
    gpu = GPUS["h100-sxm"]
    cost = H100_8B.step_cost([(1, 0)])
    assert cost.parts["linear"] == pytest.approx(2 * weights / (gpu.bandwidth * gpu.bandwidth_fraction) * 1e3)
    assert cost.parts["overhead"] == STEP_OVERHEAD_MS and cost.parts["communication"] == 0
    assert cost.bound == "memory"


def test_a_long_prefill_is_the_matmul_flops_at_the_achievable_rate():
    gpu = GPUS["h100-sxm"]
    m = MODELS["llama-3.1-8b"]
    cost = H100_8B.step_cost([(4096, 0)])
    flops = 2 * (m.layers * m.layer_params * 4096 + m.lm_head_params)
    assert cost.parts["linear"] == pytest.approx(flops / (gpu.flops * gpu.compute_fraction) * 1e3)
    assert cost.bound == "compute" and 0 < cost.mbu < cost.mfu < 1


def test_decode_attention_reads_each_sequences_context():
    gpu = GPUS["h100-sxm"]
    cost = H100_8B.step_cost([(1, 4000)])
    kv = 4001 * H100_8B.kv_bytes_per_token
    assert H100_8B.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # keys and values, every layer, bf16
    assert cost.parts["attention"] == pytest.approx(kv / (gpu.bandwidth * gpu.bandwidth_fraction) * 1e3)


def test_the_flat_region_decodes_batch_for_free_and_a_long_prefill_does_not():
    one = H100_8B.step_cost([(1, 256)]).total_ms
    assert H100_8B.step_cost([(1, 256)] * 64).total_ms < 1.3 * one
    assert H100_8B.step_cost([(4096, 0)]).total_ms > 8 * one
    # A chunk rides along almost free until the step crosses the ridge point.
    assert H100_8B.step_cost([(1, 256)] * 16 + [(64, 0)]).total_ms < 1.05 * H100_8B.step_cost([(1, 256)] * 16).total_ms


def test_swap_or_recompute_depends_on_the_link():
    """A victim with 64 tokens of KV: re-running its prefill rides free in a memory-bound step, so it
    beats two copies over PCIe; over NVLink-C2C the copies are cheaper still."""
    decodes = [(1, 512)] * 16
    for link, winner in (("pcie-gen3", "recompute"), ("pcie-gen5", "recompute"), ("nvlink-c2c", "swap")):
        dep = Deployment("llama-3.1-8b", "h100-sxm", link=link)
        recompute = dep.step_cost(decodes + [(64, 0)]).total_ms - dep.step_cost(decodes).total_ms
        swap = 2 * dep.swap_ms(64)
        assert ("swap" if swap < recompute else "recompute") == winner, (link, swap, recompute)
    dep = Deployment("llama-3.1-8b", "h100-sxm", link="pcie-gen4")
    assert dep.swap_ms(1000) == pytest.approx(0.01 + 1000 * dep.kv_bytes_per_token / (31.5e9 * LINK_FRACTION) * 1e3)


def test_tensor_parallel_splits_the_weights_and_adds_all_reduces():
    one = Deployment("llama-3.1-70b", "h100-sxm")
    four = Deployment.parse("llama-3.1-70b@4xh100-sxm")
    assert four.weight_bytes == pytest.approx(one.weight_bytes / 4)
    assert four.step_cost([(1, 100)]).parts["communication"] > 0 == one.step_cost([(1, 100)]).parts["communication"]
    assert one.kv_capacity_tokens() == 0  # 141 GB of weights do not fit in one 80 GB GPU
    assert four.kv_capacity_tokens(0.9) > 100_000


def test_names_parse_and_bad_names_say_what_is_wrong():
    dep = Deployment.parse("llama-3.1-70b@4xh100-sxm+nvlink-c2c")
    assert (dep.model, dep.gpu, dep.tensor_parallel, dep.link) == ("llama-3.1-70b", "h100-sxm", 4, "nvlink-c2c")
    assert Deployment.parse(dep.name) == dep
    for bad, said in (("gpt-9@h100-sxm", "unknown model"), ("llama-3.1-8b@h800", "unknown GPU"),
                      ("llama-3.1-8b@h100-sxm+usb", "unknown link"), ("llama-3.1-8b", "model@gpu"),
                      ("llama-3.1-8b@0xh100-sxm", "tensor_parallel")):
        with pytest.raises(ValueError, match=said):
            Deployment.parse(bad)


def test_any_model_folder_prices_by_its_own_shape():
    dep = Deployment.parse("this@h100-sxm", model_folder=DEFAULT_MODEL)
    shape = dep.model_shape
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim) == (4, 256, 4, 2, 64)
    assert dep.kv_bytes_per_token == 2 * 4 * 2 * 64 * 2
    assert dep.step_cost([(1, 10)]).total_ms < 0.5  # a 4M-parameter model costs little more than the overhead


def test_an_empty_step_costs_nothing():
    cost = H100_8B.step_cost([])
    assert cost.total_ms == 0 and cost.mfu == 0


def test_elementwise_and_all_reduce_by_hand():
    """Elementwise: (10 x hidden + 3 x intermediate / tp) values per token and layer, read at the
    achievable bandwidth. All-reduce: two per layer, a ring moving 2 (tp - 1) / tp of the hidden state."""
    m, gpu = MODELS["llama-3.1-70b"], GPUS["h100-sxm"]
    dep = Deployment("llama-3.1-70b", "h100-sxm", tensor_parallel=4)
    cost = dep.step_cost([(512, 0)])
    elementwise = 512 * m.layers * (10 * m.hidden + 3 * m.intermediate / 4) * 2
    assert cost.parts["elementwise"] == pytest.approx(elementwise / (gpu.bandwidth * gpu.bandwidth_fraction) * 1e3)
    ring = 512 * m.hidden * 2 * 2 * 3 / 4
    assert cost.parts["communication"] == pytest.approx(2 * m.layers * (0.008 + ring / gpu.peer_bandwidth * 1e3))


def test_an_engine_config_takes_a_deployment_and_keeps_its_name():
    from engine import EngineConfig

    config = EngineConfig(deployment=Deployment("llama-3.1-70b", "h100-sxm", tensor_parallel=4))
    assert config.deployment == "llama-3.1-70b@4xh100-sxm" and config.to_dict()["deployment"] == config.deployment
