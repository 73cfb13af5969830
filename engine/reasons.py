"""The words of the scheduler's and the engine's decisions, apart from the decisions themselves.

Every Event carries a reason a student reads in the lab's "why" panel. The loop
decides; these functions say what it decided, from the same numbers. The words
of the admission and victim rules sit with the rules (engine/rules.py).
"""

from __future__ import annotations

from engine.request import FinishReason, Request


def arrived(req: Request) -> str:
    return f"joins the waiting queue with {req.num_prompt_tokens} prompt tokens, wants up to " \
           f"{req.sampling.max_tokens} more"


def admitted(req: Request, hit_blocks: int, num_tokens: int, pages_held: int) -> str:
    parts = [f"{num_tokens} of its {req.num_tokens - req.num_computed_tokens} uncomputed tokens fit the budget"]
    if hit_blocks:
        parts.append(f"prefix cache hit: {hit_blocks} pages ({req.num_computed_tokens} tokens) reused")
    parts.append(f"{pages_held} KV pages now held")
    return "; ".join(parts)


def recompute_started(req: Request, lost: int) -> str:
    # Only tokens that had KV are recomputed; the newest generated token never had any (it is the
    # input the next pass was going to read), so it joins the pass as a decode input would.
    generated = max(0, req.peak_computed_tokens - max(req.num_prompt_tokens, req.num_computed_tokens))
    made = f", {generated} of them generated," if generated else ""
    newest = "; its newest token, which had no KV yet, rides in the same pass" if req.output_token_ids else ""
    return f"re-running the prefill over {lost} tokens{made} whose KV pages were dropped when it was preempted{newest}"


def chunk_scheduled(start: int, num_tokens: int, total: int) -> str:
    return f"prompt tokens {start}-{start + num_tokens - 1} of {total}: the rest waits for later steps"


def no_budget_left(token_budget: int) -> str:
    return f"token budget: the step's {token_budget} tokens are already taken by requests ahead of it"


def no_budget_for_prompt(req: Request, token_budget: int, left: int, chunked: bool) -> str:
    if chunked:
        return f"token budget: all {token_budget} tokens of this step are taken by requests ahead of it"
    return (f"token budget: its {req.num_tokens - req.num_computed_tokens} prompt tokens do not fit the "
            f"{left} left this step, and chunked prefill is off")


def no_budget_for_padding(padded: int, left: int) -> str:
    return (f"token budget: with one token left to compute it is padded with placeholder drafts to {padded} tokens "
            f"(a decode of uniform shape, as vLLM pads it), and only {left} are left this step")


def no_budget_for_swapped() -> str:
    return "token budget used up before swapped requests"


def no_pages_to_swap_in() -> str:
    return "not enough free KV pages to swap its pages back in"


def swapped_in(num_pages: int) -> str:
    return f"{num_pages} pages copied back from CPU memory; it resumes where it stopped, nothing recomputed"


def sequence_cap(running: int, max_num_seqs: int) -> str:
    if running > max_num_seqs:  # lowered live (vLLM fixes it at start): the running requests finish
        return (f"sequence cap: {running} requests run and the cap is now {max_num_seqs} (max_num_seqs); "
                "lowering it preempts no one, so no request is admitted until fewer than "
                f"{max_num_seqs} run")
    return f"sequence cap: {running} requests already run, the most max_num_seqs allows"


def no_admissions_after_preemption() -> str:
    return "no new admissions this step: running requests had to be preempted, so memory is too tight to start " \
           "more work"


def needed_a_page(req: Request, victim_rule: str) -> str:
    return f"{req.request_id} needed a new KV page and none was free; {victim_rule}"


def outranked(req: Request, victim: Request, needed: str) -> str:
    return f"priority: {req.request_id} (priority {req.priority}) outranks it (priority {victim.priority}) and " \
           f"needed its {needed}"


def swapped_out(num_pages: int) -> str:
    return f"{num_pages} KV pages copied to CPU memory; they come back when it resumes"


CPU_SWAP_FULL = "; the CPU swap space is full, so it falls back to recompute"


def pages_dropped(num_pages: int) -> str:
    return f"; its {num_pages} pages are dropped and will be recomputed"


def evicted(block: int, prefix: str) -> str:
    return f"page {block} was reused, so the cached prefix {prefix} it held is forgotten"


def finished(req: Request, seen_step: int) -> str:
    """Why it finished; under async scheduling its last token was sampled a step before the one that sees it."""
    late = req.token_steps[-1] < seen_step
    return {
        FinishReason.EOS: "produced the end-of-sequence token",
        FinishReason.STOP: "produced one of its stop tokens",
        FinishReason.LENGTH: f"reached its length limit ({len(req.output_token_ids)} tokens generated)",
    }[req.finish_reason] + (f" in step {req.token_steps[-1]}, handed back only now (async scheduling)" if late else
                            "") + "; its KV pages go back to the pool"


def idle(next_step: int | None, next_ms: float | None, blocked: bool, awaiting_output: bool = False) -> str:
    if awaiting_output:
        return ("nothing to run: each running request's last token is still in flight (async scheduling); this "
                "step only hands those tokens back")
    if next_step is not None:
        return f"nothing to run: the next request arrives at step {next_step}"
    if next_ms is not None:
        return f"nothing to run: the next request arrives at {next_ms:.1f} ms"
    if blocked:
        return "nothing could be scheduled: every waiting request is blocked (see the blocked events)"
    return "nothing to run: no requests"


def kv_received(req: Request) -> str:
    return (f"its prompt's KV ({req.num_prompt_tokens} tokens) was copied here from the prefill replica, with its "
            "first token: it joins the running batch as a decode")


def no_page_for_received() -> str:
    return "its KV has arrived, but no page is free for its next token"
