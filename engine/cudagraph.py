"""CUDA-graph padding: a step runs at the next batch size vLLM captured a graph for.

Launching a forward pass kernel by kernel costs the CPU more than a small decode step costs the
GPU, so vLLM records ("captures") the whole pass as CUDA graphs at start-up, one per batch size,
and replays one per step. A graph has fixed shapes: a step of 9 tokens replays the graph captured
for 16, and the matmuls compute 16 rows, 7 of them padding. A step larger than the largest captured
size runs without a graph, unpadded.

This is vLLM 0.32's default (``VllmConfig._set_cudagraph_sizes`` and ``CudagraphDispatcher.dispatch``,
cudagraph_mode FULL_AND_PIECEWISE, no speculative decoding): a batch of decodes only replays a FULL
graph, attention included; any other step replays a PIECEWISE graph, whose attention runs outside the
graph on the real tokens while everything between the attentions runs padded. Either is padded in
tokens. The deployment model (engine/hardware.py) prices the padded rows of the matmuls and the
elementwise work; attention it prices on the real tokens.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# vLLM's default ceiling on the captured sizes: 1,024 tokens on data-center Blackwell (compute
# capability 10.x, the B200), 512 elsewhere.
BLACKWELL = frozenset({"b200"})


def _grid(top: int) -> list[int]:
    """1, 2, 4, then every 8 up to 255, then every 16, up to top."""
    return [n for n in (1, 2, 4) if n <= top] + list(range(8, min(top + 1, 256), 8)) + list(range(256, top + 1, 16))


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, gpu: str, query_len: int = 1) -> tuple[int, ...]:
    """The batch sizes, in tokens, vLLM 0.32 captures graphs for by default: the grid up to twice the
    tokens of a full batch of decodes (each query_len tokens: 1, or 1 + num_speculative_tokens with
    drafts), at most the platform's ceiling and the token budget; plus the token budget where it fits
    under that, and the sizes of batches of decodes (max_num_seqs of them; with drafts, every request
    count of the grid, times query_len)."""
    platform = 1024 if gpu in BLACKWELL else 512
    ceiling = min(max_num_seqs * query_len * 2, platform)
    if query_len > 1:
        counts = sorted(set(_grid(min(max_num_seqs, platform)) + [min(max_num_seqs, platform)]))
        decodes = [n * query_len for n in counts if n * query_len <= ceiling]
    else:
        decodes = [max_num_seqs] if max_num_seqs <= ceiling else []
    ceiling = min(ceiling, max_num_batched_tokens)
    sizes = _grid(ceiling) + ([max_num_batched_tokens] if max_num_batched_tokens <= ceiling else [])
    return tuple(sorted(set(sizes + [n for n in decodes if n <= max_num_batched_tokens])))


@dataclass(frozen=True)
class GraphRun:
    """How one step runs: which kind of graph (or none), over how many token rows."""

    mode: str  # "full" (decodes only), "piecewise" (any other step) or "eager" (larger than every graph)
    num_tokens: int
    padded_tokens: int  # the rows the graph computes: the next captured size (num_tokens when eager)


def dispatch(sizes: tuple[int, ...], num_tokens: int, decodes_only: bool) -> GraphRun:
    """The graph a step of num_tokens replays, as vLLM's dispatcher picks it. decodes_only: every request
    in it computes one token, or with drafts the same 1 + num_speculative_tokens (vLLM's "uniform decode")."""
    if not sizes or num_tokens > sizes[-1]:
        return GraphRun("eager", num_tokens, num_tokens)
    padded = sizes[bisect.bisect_left(sizes, num_tokens)]
    return GraphRun("full" if decodes_only else "piecewise", num_tokens, padded)
