"""A step priced on a deployment (engine/hardware.py), and the reasons that quote what it cost there.

The engine runs a small model; a deployment says what the same step would cost a
production model on a named GPU. A request scaled down to fit the small model
(length_scale s) stands for a real one 1/s times as long, and is priced as that request's
real steps would cost. Its prompt tokens are parallel work: a chunk of n tokens is n/s real
tokens in one real step. Its decode tokens are not: one decode token of it is 1/s real decode
steps in a row (each reads the whole model), not one pass over 1/s tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import EngineConfig
from engine.cudagraph import capture_sizes
from engine.hardware import Deployment, StepCost
from engine.records import Event
from engine.request import Request


@dataclass(frozen=True)
class Work:
    """One request's share of a step, at the small model's size."""

    new: int  # tokens computed in the step
    cached: int  # tokens already in its KV cache
    scale: float = 1.0  # its length_scale
    decode: bool = False  # a decode (one token, sequential in real life) rather than prompt work


def real_steps(dep: Deployment, work: list[Work], swapped_tokens: float = 0.0,
               graph_sizes: tuple[int, ...] = (), query_len: int = 1, overlap: bool = False) -> StepCost:
    """What the real engine pays for one step of the small one: a first real step holding every
    request's real tokens (a decode's first token, each prompt chunk's n/s), then the decodes going
    on, one real token a step, until each has written its 1/s tokens (against its context halfway
    through each run of identical steps). The host copies are paid once. Each real step replays the
    CUDA graph its size picks from graph_sizes; the cost names the first one's. A decode verifying drafts
    computes its 1 + drafts tokens in each of its real steps. overlap: async scheduling, with a step before
    this one on the GPU (the real steps after the first always follow one)."""
    first = dep.step_cost([(w.new if w.decode else w.new / w.scale, w.cached / w.scale) for w in work],
                          graph_sizes=graph_sizes, query_len=query_len, overlap_host=overlap)
    steps = [(1, first)]
    decodes = [w for w in work if w.decode]
    done = 1
    for upto in sorted({round(1 / w.scale) for w in decodes}):
        if upto > done:  # real steps done+1 .. upto: the decodes still writing
            going = [(w.new, w.cached / w.scale + (done + upto - 1) / 2) for w in decodes
                     if round(1 / w.scale) >= upto]
            steps.append((upto - done, dep.step_cost(going, graph_sizes=graph_sizes, query_len=query_len,
                                                     overlap_host=overlap)))
            done = upto
    swap = dep.swap_ms(swapped_tokens) if swapped_tokens else 0.0
    gpu_ms = sum(n * c.total_ms for n, c in steps)
    total = gpu_ms + swap
    parts = {name: sum(n * c.parts[name] for n, c in steps) for name in steps[0][1].parts} | {"swap": swap}
    compute_ms = sum(n * c.total_ms for n, c in steps if c.bound == "compute")

    def utilisation(of: str) -> float:  # each step's share of peak, weighted by its time, over the total
        return sum(n * getattr(c, of) * c.total_ms for n, c in steps) / total if total else 0.0

    return StepCost(total, parts, "compute" if compute_ms > gpu_ms / 2 else "memory",
                    sum(n * c.flops for n, c in steps), sum(n * c.bytes for n, c in steps),
                    utilisation("mfu"), utilisation("mbu"), swap, first.graph, first.tokens, first.padded_tokens)


def graph_shape(config: EngineConfig, gpu: str) -> tuple[tuple[int, ...], int]:
    """The CUDA-graph sizes vLLM would capture under these knobs, and the tokens of one decode."""
    query_len = 1 + (config.num_speculative_tokens if config.speculative_method != "none" else 0)
    return capture_sizes(config.max_num_seqs, config.max_num_batched_tokens, gpu, query_len), query_len


def price_step(dep: Deployment, config: EngineConfig, batch: list[tuple[Request, int]], events: list[Event],
               requests: dict[str, Request], overlap: bool = False) -> tuple[StepCost, list[Event]]:
    """The step's cost (its real steps, plus the swap copies read off the step's swap events, with the
    CUDA graphs vLLM would capture under these knobs); and the events, where a swap's or a recompute's
    reason gains what it costs on the deployment. overlap: its host work runs while the GPU runs the step
    before (async scheduling)."""
    block_size = config.block_size
    graphs, query_len = graph_shape(config, dep.gpu)

    def real(tokens: float, e: Event) -> float:  # a request scaled to fit the small model, at full size
        return tokens / requests[e.request_id].length_scale

    copied = {i: real(len(e.data["blocks"]) * block_size, e) for i, e in enumerate(events)
              if e.kind in ("swapped_out", "swapped_in")}
    work = [Work(n, req.num_computed_tokens, req.length_scale, req.chunk_kind(n) == "decode") for req, n in batch]
    cost = real_steps(dep, work, sum(copied.values()), graphs, query_len, overlap)
    priced = []
    for i, e in enumerate(events):
        if i in copied:
            tokens = copied[i]
            e = Event(e.kind, e.request_id, f"{e.reason}; {tokens * dep.kv_bytes_per_token / 1e6:.1f} MB of KV at "
                      f"{dep.model}'s size, {dep.swap_ms(tokens) * 1000:.0f} us over {dep.host_link} (modeled)", e.data)
        elif e.kind == "recompute_started":
            alone = real_steps(dep, [Work(e.data["tokens"], 0, requests[e.request_id].length_scale)],
                               graph_sizes=graphs).total_ms
            e = Event(e.kind, e.request_id, f"{e.reason}; about {alone:.1f} ms of prefill on {dep.name} if it ran "
                      "alone (modeled)", e.data)
        priced.append(e)
    return cost, priced
