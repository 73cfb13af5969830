"""Each engine's scheduling rules, apart from the loop that applies them (engine/scheduler.py).

Three questions the scheduler asks every step, and each engine's answer:

    chunk_size   how many of a request's uncomputed tokens fit this step
    admission    may this waiting request be admitted into the free KV pages?
    pick_victim  which running request is preempted when pages run out?

Which answer applies is set by the knobs (engine/knobs.py), and engine_preset
sets them together (engine/presets.py). The words each rule gives for its
verdict are here too, beside the numbers they quote.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.request import Request, RequestStatus

# SGLang's starting new_token_ratio (SGLANG_INIT_NEW_TOKEN_RATIO). SGLang decays it toward 0.098 over
# 600 decode steps and raises it after a retraction; the lab holds it at 0.7, and applies it to every
# request, where SGLang reserves the whole remaining output (ratio 1.0) of an ignore_eos request.
SGLANG_NEW_TOKEN_RATIO = 0.7


@dataclass(frozen=True)
class Admission:
    """The admission rule's verdict on one waiting request, and why."""

    fits: bool
    reason: str = ""


ADMIT = Admission(True)


def chunk_size(config: EngineConfig, req: Request, budget: int, computed: int, contenders: int,
               drafts: int = 0) -> int:
    """How many of the request's uncomputed tokens (and draft tokens to verify) fit this step (0: none may run).

    A running request takes what the budget leaves, as in vLLM v1; only a waiting
    prompt must fit whole when chunked prefill is off. The chunk cap applies only
    while another request (of `contenders`, running or waiting) could use the budget:
    alone, nobody would be starved. Under async scheduling a token sampled but not yet handed back counts as
    there (its placeholder): the next step computes it."""
    remaining = req.num_tokens + req.num_output_placeholders + drafts - computed
    cap = config.long_prefill_token_threshold
    if cap and config.enable_chunked_prefill and contenders > 1:
        remaining = min(remaining, cap)
    if not config.enable_chunked_prefill and req.status != RequestStatus.RUNNING and remaining > budget:
        return 0
    return min(remaining, budget)


# ---- who is preempted --------------------------------------------------------------------------


def pick_victim(config: EngineConfig, candidates: list[Request]) -> tuple[Request, str]:
    """The request to preempt among candidates (running order), and the rule in words."""
    if config.victim_rule == "fewest_generated":
        # SGLang's retract_decode: fewest output tokens, ties to the longest prompt.
        victim = min(candidates, key=lambda r: (len(r.output_token_ids), -r.num_prompt_tokens, -r.arrival_index))
        return victim, f"victim rule fewest_generated: {victim.request_id} has generated the least"
    if config.scheduling_policy == "priority":
        victim = max(candidates, key=lambda r: (r.priority, r.arrival_order))
        return victim, f"victim rule priority: {victim.request_id} has the lowest priority, latest arrival"
    victim = candidates[-1]
    return victim, f"victim rule fcfs: {victim.request_id} was admitted last"


def lower_priority_victim(config: EngineConfig, running: list[Request], req: Request) -> Request | None:
    """vLLM v0 under the priority policy: a waiting request may evict strictly lower-priority work.
    vLLM v1 never does; priority there only orders the queues and picks the victim."""
    if config.scheduling_policy != "priority" or not config.preempt_on_admission:
        return None
    lower = [r for r in running if r.priority > req.priority]
    return pick_victim(config, lower)[0] if lower else None


# ---- who is admitted ---------------------------------------------------------------------------


def admission(config: EngineConfig, blocks: BlockManager, running: list[Request], req: Request,
              hit: list[int]) -> Admission:
    """The admission rule (admission_reserve, or a contiguous reservation) for req, whose leading
    pages `hit` are found in the prefix cache."""
    if blocks.contiguous:
        return _contiguous(blocks, req)
    if config.admission_reserve == "output_estimate":
        return _sglang(config, blocks, running, req, hit)
    return _whole_sequence(config, blocks, running, req, hit)


def _contiguous(blocks: BlockManager, req: Request) -> Admission:
    """Before PagedAttention: one run of adjacent pages for the longest the request could grow."""
    need, free, run = blocks.blocks_needed(req.max_total_tokens), blocks.num_free_blocks, blocks.largest_free_run()
    if need <= run:
        return ADMIT
    if need <= free:
        return Admission(False, f"fragmentation: a contiguous reservation needs {need} adjacent pages; {free} are "
                         f"free but the longest free run is {run}")
    return Admission(False, f"KV pages: a contiguous reservation needs {need} pages for its whole possible length; "
                     f"{free} free")


def _whole_sequence(config: EngineConfig, blocks: BlockManager, running: list[Request], req: Request,
                    hit: list[int]) -> Admission:
    """vLLM: every page of its current sequence (not only this step's chunk) must be free, and the
    watermark kept. TensorRT-LLM's GUARANTEED_NO_EVICT (admission_reserve='max_tokens'): it and every
    running request must fit at max_tokens."""
    cached = len(hit) * config.block_size
    need = blocks.pages_to_take(req, req.num_tokens - cached, hit)
    what = f"its whole {req.num_tokens}-token sequence"
    if config.admission_reserve == "max_tokens":
        need = blocks.pages_to_take(req, req.max_total_tokens - cached, hit) + sum(
            max(0, blocks.blocks_needed(r.max_total_tokens) - len(blocks.block_table(r.request_id)))
            for r in running)
        what = "it and every running request at max_tokens (GUARANTEED_NO_EVICT)"
    free = blocks.num_free_blocks
    reserve = config.watermark_blocks if running else 0
    if need + reserve <= free:
        return ADMIT
    if need <= free:
        return Admission(False, f"watermark: taking {need} pages would leave fewer than the {reserve} pages kept "
                         "free for running requests to grow")
    return Admission(False, f"KV pages: {what} needs {need} free pages, only {free} free")


def _sglang(config: EngineConfig, blocks: BlockManager, running: list[Request], req: Request,
            hit: list[int]) -> Admission:
    """SGLang's PrefillAdder: the new prompt plus all its output, plus new_token_ratio of every running
    request's remaining output, must fit in the free (and evictable) tokens, with a page to spare."""
    bs = config.block_size
    reserved = sum(SGLANG_NEW_TOKEN_RATIO * (r.sampling.max_tokens - len(r.output_token_ids)) for r in running)
    need = req.num_tokens - len(hit) * bs + req.sampling.max_tokens - len(req.output_token_ids) + bs
    have = (blocks.num_free_blocks - sum(1 for b in hit if blocks.ref_count(b) == 0)) * bs - reserved
    if need < have:
        return ADMIT
    return Admission(False, f"KV tokens: SGLang admits only if its {need} tokens (prompt, output to max_tokens and "
                     f"a page) fit the {have:.0f} left after reserving {SGLANG_NEW_TOKEN_RATIO} of running requests' "
                     "remaining output")
