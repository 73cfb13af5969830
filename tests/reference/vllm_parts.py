"""vLLM's own code as the oracle for two parts the scheduler oracle cannot see: the n-gram draft
proposer (engine/speculation.py) and the CUDA-graph padding of the deployment model (engine/cudagraph.py).

- Drafts: vLLM 0.32's ``_find_longest_matched_ngram_and_propose_tokens`` (a KMP search over the reversed
  text) against the lab's plain search, on random texts drawn from small vocabularies so that they repeat.
- CUDA graphs: which sizes vLLM captures, and which one a step of n tokens replays, are decided by
  ``VllmConfig._set_cudagraph_sizes`` and ``CudagraphDispatcher._compute_bs_to_padded_graph_size``. Both
  are plain Python over a few config fields, so they run here on stand-in configs holding just those
  fields (no GPU, no model), over a grid of max_num_seqs, token budgets and draft lengths.

vllm_oracle.py runs check(); it can run alone too.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
from vllm.config.compilation import CUDAGraphMode
from vllm.config.vllm import VllmConfig
from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

from engine.cudagraph import capture_sizes, dispatch
from engine.speculation import NgramProposer

SEQS = (1, 2, 3, 5, 8, 16, 24, 33, 64, 100, 128, 200, 256, 300, 512, 1024)
BUDGETS = (1, 7, 16, 64, 100, 256, 300, 512, 1000, 2048, 8192)
QUERY_LENS = (1, 2, 4, 6)  # a decode's tokens: 1, or 1 + num_speculative_tokens
TEXTS = 4000  # random texts for the proposer
CHECKED = f"{TEXTS} texts, {len(SEQS) * len(BUDGETS) * len(QUERY_LENS)} configs"


def check_ngram() -> list[str]:
    """Every text on which the lab's drafts differ from vLLM's."""
    rng = random.Random(0)
    wrong = []
    for _ in range(TEXTS):
        tokens = [rng.randrange(rng.choice([2, 3, 5, 20])) for _ in range(rng.randint(0, 60))]
        min_n, k = rng.randint(1, 4), rng.randint(1, 6)
        max_n, max_model_len = rng.randint(min_n, 6), len(tokens) + rng.randint(0, 8)
        theirs = _find_longest_matched_ngram_and_propose_tokens(np.array(tokens, dtype=np.int32), min_n, max_n,
                                                                 max_model_len, k).tolist()
        ours = NgramProposer(min_n, max_n, k, max_model_len).propose(tokens)
        if ours != theirs:
            wrong.append(f"n-gram drafts of {tokens} (n {min_n}..{max_n}, k {k}, max_model_len {max_model_len}): "
                         f"vLLM {theirs}, the lab {ours}")
    return wrong


def vllm_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, query_len: int) -> list[int]:
    """What vLLM captures by default (FULL_AND_PIECEWISE, a non-Blackwell GPU), a decode being query_len
    tokens (1 + num_speculative_tokens with drafts)."""
    compilation = SimpleNamespace(max_cudagraph_capture_size=None, cudagraph_capture_sizes=None,
                                  cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
                                  post_init_cudagraph_sizes=lambda: None)
    config = SimpleNamespace(model_config=SimpleNamespace(enforce_eager=False), compilation_config=compilation,
                             scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs,
                                                              max_num_batched_tokens=max_num_batched_tokens),
                             uniform_decode_query_len=query_len, performance_mode="throughput",
                             speculative_config=None if query_len == 1 else SimpleNamespace(
                                 uses_dynamic_speculative_decoding=lambda: False))
    VllmConfig._set_cudagraph_sizes(config)
    return list(compilation.cudagraph_capture_sizes)


def vllm_padding(sizes: list[int]) -> list[int]:
    """vLLM's table from a batch's tokens to the captured size it replays (index: tokens)."""
    table = SimpleNamespace(compilation_config=SimpleNamespace(max_cudagraph_capture_size=sizes[-1],
                                                               cudagraph_capture_sizes=sizes, compile_sizes=None))
    CudagraphDispatcher._compute_bs_to_padded_graph_size(table)
    return table._bs_to_padded_graph_size


def check() -> list[str]:
    """Every disagreement, as a line; empty when the lab drafts and pads as vLLM does."""
    return check_ngram() + check_cudagraph()


def check_cudagraph() -> list[str]:
    wrong = []
    for seqs, budget, query_len in ((s, b, q) for s in SEQS for b in BUDGETS for q in QUERY_LENS):
        theirs, ours = vllm_capture_sizes(seqs, budget, query_len), list(capture_sizes(seqs, budget, "h100-sxm",
                                                                                          query_len))
        if theirs != ours:
            wrong.append(f"max_num_seqs={seqs}, max_num_batched_tokens={budget}, decodes of {query_len}: vLLM "
                         f"captures {theirs}, the lab {ours}")
            continue
        if query_len == 1:  # the padding table depends on the sizes alone
            padded = vllm_padding(theirs)
            for tokens in range(1, theirs[-1] + 2):
                run = dispatch(tuple(ours), tokens, decodes_only=True)
                want = padded[tokens] if tokens <= theirs[-1] else tokens
                if run.padded_tokens != want or (run.mode == "eager") != (tokens > theirs[-1]):
                    wrong.append(f"max_num_seqs={seqs}, budget={budget}: {tokens} tokens pad to {want} in vLLM, "
                                 f"{run.padded_tokens} ({run.mode}) in the lab")
    return wrong


if __name__ == "__main__":
    problems = check()
    print("\n".join(problems) or f"the n-gram proposer and CUDA-graph padding agree with vLLM 0.32 ({CHECKED})")
    raise SystemExit(1 if problems else 0)
