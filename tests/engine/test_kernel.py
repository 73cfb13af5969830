"""The compiled attention kernel (engine/kernels/) against the torch path it stands in for, and the
engine's fallback to torch where the kernel cannot be built or cannot serve."""

from __future__ import annotations

import random
import shutil
import types

import pytest
import torch

from engine import Engine, EngineConfig, SamplingParams, kernels
from engine.kv_cache import KVCache, build_context, paged_attention

HAS_COMPILER = bool(shutil.which("c++") or shutil.which("g++")) and bool(shutil.which("ninja"))
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler or ninja: the kernel cannot be built")


@pytest.fixture
def kernel_env(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "kernel")


def _attend(cache, seqs, q, k, v, kernel, window=None):
    ctx = build_context(cache, seqs, torch.device("cpu"), kernel)
    layer = types.SimpleNamespace(layer_idx=1)
    out, _ = paged_attention(layer, q, k, v, None, scaling=0.125, paged_context=ctx, sliding_window=window)
    return out


@needs_compiler
@pytest.mark.parametrize("window", [None, 5])
def test_the_kernel_attends_as_the_torch_path_does(kernel_env, window):
    """Random batches of prefills (some starting mid-prompt) and decodes on pages scattered over a pool:
    the same output as gathering the pages and running SDPA, with and without a sliding window."""
    module = kernels.paged_kernel()
    assert module is not None, kernels.kernel_status()
    rng = random.Random(0)
    for trial in range(6):
        bs, heads, kv_heads, dim = rng.choice([4, 8, 16]), 4, 2, 16
        cache = KVCache(2, kv_heads, dim, bs, 64, 0, torch.float32, torch.device("cpu"))
        torch.manual_seed(trial)
        cache.gpu.normal_()  # earlier steps' keys and values, already in the pool
        free = list(range(64))
        rng.shuffle(free)
        seqs = []
        for _ in range(rng.randint(1, 6)):
            start, n = (rng.randint(1, 30), 1) if rng.random() < 0.5 else (rng.choice([0, rng.randint(1, 20)]),
                                                                            rng.randint(1, 12))
            pages = -(-(start + n) // bs)
            seqs.append((start, n, [free.pop() for _ in range(pages)]))
        tokens = sum(n for _, n, _ in seqs)
        q, k, v = torch.randn(1, heads, tokens, dim), torch.randn(1, kv_heads, tokens, dim), \
            torch.randn(1, kv_heads, tokens, dim)
        before = cache.gpu.clone()
        reference = _attend(cache, seqs, q, k, v, None, window)
        cache.gpu.copy_(before)  # forget this step's writes: the kernel's pass must make them itself
        ours = _attend(cache, seqs, q, k, v, module, window)
        assert torch.allclose(ours, reference, atol=1e-5), f"trial {trial}: {(ours - reference).abs().max()}"


def _outputs(model: str) -> tuple[list[list[int]], Engine]:
    """A burst that fills a small pool: prefill chunks, decodes, preemption by recompute."""
    engine = Engine(EngineConfig(model=model, block_size=4, num_gpu_blocks=24, max_num_batched_tokens=24,
                                 max_num_seqs=6, num_cpu_blocks=0))
    ids = [engine.add_request(f"request {i}: " + "tell me more " * (i % 4 + 1), SamplingParams(max_tokens=12,
                                                                                                ignore_eos=True))
           for i in range(8)]
    engine.run()
    assert sum(r.num_preemptions for r in engine.requests.values()) > 0
    return [engine.requests[i].output_token_ids for i in ids], engine


@needs_compiler
def test_the_engine_with_its_kernel_generates_what_it_does_through_torch(tiny_llama, monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    through_torch, engine = _outputs(tiny_llama)
    assert engine.runner.kernel is None
    monkeypatch.setenv(kernels.ENV, "kernel")
    with_kernel, engine = _outputs(tiny_llama)
    assert engine.runner.kernel is not None, kernels.kernel_status()
    assert with_kernel == through_torch


def test_without_a_compiler_the_engine_attends_through_torch(tiny_llama, kernel_env, monkeypatch):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("Error building extension: c++: command not found")

    monkeypatch.setattr("torch.utils.cpp_extension.load", no_compiler)
    monkeypatch.setattr(kernels, "_built", None)
    assert kernels.paged_kernel() is None
    assert kernels.kernel_status() == "torch (the kernel could not be built (Error building extension: c++: " \
                                      "command not found))"
    outputs, engine = _outputs(tiny_llama)
    assert engine.runner.kernel is None and all(len(o) == 12 for o in outputs)


def test_the_kernel_serves_only_float32_on_the_cpu(kernel_env):
    assert kernels.paged_kernel("cuda") is None and kernels.paged_kernel("cpu", "bfloat16") is None
    assert kernels.kernel_status("cpu", "bfloat16") == ("torch (the kernel runs float32 on the CPU; this engine "
                                                        "runs bfloat16 on cpu)")


def test_unless_asked_for_the_engine_attends_through_torch(monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    assert kernels.paged_kernel() is None and kernels.kernel_status() == "torch (LAB_ATTENTION is not 'kernel')"
