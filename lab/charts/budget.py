"""This step's forward pass against its three limits: tokens, sequences and free KV pages.

The token bar is the heart of the scheduler loop: every request's share of the
step, in batch order, coloured by request and hatched by kind (plain for a
decode's single token, stripes for a prefill or a chunk of one, crosses for a
recompute), against max_num_batched_tokens. KEY says so in words.
"""

from __future__ import annotations

import plotly.graph_objects as go

from engine.records import ScheduledChunk, StepRecord
from engine.speculation import PLACEHOLDER
from lab.charts import fast
from lab.charts.style import Subplots
from lab.palette import CACHED_FREE, CHUNK_PATTERNS, FREE, request_color, text_color

KIND_LABELS = {"decode": "decode", "prefill": "prefill", "prefill_chunk": "prefill chunk",
               "recompute_prefill": "recompute"}
USED_PAGES = "#6B6B6B"
ROWS = ("tokens", "sequences", "KV pages")
KEY = ("Colour: the request, as on its card. Plain: a decode (one token). Striped: a prefill or a chunk of one. "
       "Crossed: a recompute. Dotted: draft tokens being verified (speculative decoding). Dashed: a decode run "
       "after its request had stopped, its token thrown away (async scheduling).")
DISCARDED = (" (its request had stopped: the stop reached the scheduler only after it planned this step, so the "
             "token it samples is thrown away)")


def _drafts(c: ScheduledChunk) -> str:
    """A verified chunk's drafts in words: how many the model kept."""
    placeholders = c.draft_token_ids.count(PLACEHOLDER)
    if placeholders:
        return (f"<b>{c.request_id}</b>: {placeholders} placeholder draft slots (vLLM pads a decode admitted from "
                "the queue to the drafted shape); never accepted, their KV slots are written again next step")
    rejected = len(c.draft_token_ids) - c.num_accepted
    return (f"<b>{c.request_id}</b>: {len(c.draft_token_ids)} draft tokens verified, {c.num_accepted} accepted, "
            f"{rejected} rejected (their KV slots are written again next step)")


def _segments(record: StepRecord) -> list[dict]:
    """One dict per bar segment: row, start, length, colour, pattern, label, hover."""
    b = record.budget
    segs, at = [], 0
    for c in record.batch:
        token = f" → “{c.new_token_text}”" if c.new_token_text is not None else " (no token yet: more chunks to go)"
        own = c.num_tokens - len(c.draft_token_ids)
        segs.append(dict(row=0, start=at, length=own, color=request_color(c.request_id),
                         pattern=CHUNK_PATTERNS["discarded" if c.discarded else c.kind],
                         label=c.request_id if own > 1 else "",
                         hover=f"<b>{c.request_id}</b> {KIND_LABELS[c.kind]}: {own} tokens "
                               f"(positions {c.start}–{c.start + own - 1}){DISCARDED if c.discarded else token}"))
        if c.draft_token_ids:
            segs.append(dict(row=0, start=at + own, length=len(c.draft_token_ids), color=request_color(c.request_id),
                             pattern=CHUNK_PATTERNS["draft"], label="", hover=_drafts(c)))
        at += c.num_tokens
    if b.token_budget > at:
        segs.append(dict(row=0, start=at, length=b.token_budget - at, color=FREE, pattern="", label="",
                         hover=f"unused budget: {b.token_budget - at} of {b.token_budget} tokens"))
    for i, c in enumerate(record.batch):
        segs.append(dict(row=1, start=i, length=1, color=request_color(c.request_id), pattern="", label="",
                         hover=f"<b>{c.request_id}</b> has a seat in this batch"))
    if b.seq_cap > b.seqs_used:
        segs.append(dict(row=1, start=b.seqs_used, length=b.seq_cap - b.seqs_used, color=FREE, pattern="",
                         label="", hover=f"{b.seq_cap - b.seqs_used} free seats (max_num_seqs={b.seq_cap})"))
    at = 0
    for name, n, color in (("used", b.gpu_blocks_used, USED_PAGES),
                           ("cached-free", b.gpu_blocks_cached, CACHED_FREE), ("free", b.gpu_blocks_free, FREE)):
        if n:
            segs.append(dict(row=2, start=at, length=n, color=color, pattern="", label=f"{n} {name}",
                             hover=f"{n} of {b.num_gpu_blocks} GPU pages {name}"))
            at += n
    return segs


def figure(record: StepRecord) -> go.Figure:
    b = record.budget
    totals = (max(b.token_budget, b.tokens_used), max(b.seq_cap, b.seqs_used), b.num_gpu_blocks)
    over = " (cap lowered while they ran)" if b.seqs_used > b.seq_cap else ""
    # "in the step" and "after it": a blocked reason speaks of the pages free before the step, this
    # row of those left after it, and a newcomer read one for the other (issue 31).
    drafts = f" + {b.draft_tokens} draft" if b.draft_tokens else ""
    names = (f"<b>tokens</b> in the step {b.tokens_used} / {b.token_budget}  ({b.decode_tokens} decode + "
             f"{b.prefill_tokens} prefill{drafts})", f"<b>sequences</b> {b.seqs_used} / {b.seq_cap}{over}",
             f"<b>KV pages</b> after the step: {b.gpu_blocks_used} used / {b.num_gpu_blocks}")
    fig = Subplots(rows=3, cols=1, titles=names, vertical_spacing=0.2)
    segs = _segments(record)
    for row in range(3):
        mine = [s for s in segs if s["row"] == row]
        fig.add([fast.Bar(
            y=[0] * len(mine), x=[s["length"] for s in mine], base=[s["start"] for s in mine], orientation="h",
            width=0.8, text=[s["label"] for s in mine], textposition="inside", insidetextanchor="middle",
            # a halo of the contrasting colour: a white label over white hatching (a prefill) stays legible
            textfont=dict(color=[text_color(s["color"]) for s in mine], shadow="auto", weight="bold"),
            hovertext=[s["hover"] for s in mine], hoverinfo="text", showlegend=False, name=ROWS[row],
            marker=dict(color=[s["color"] for s in mine], line=dict(width=1, color="#FFFFFF"),
                        pattern=dict(shape=[s["pattern"] for s in mine], fgcolor="#FFFFFF", size=6, solidity=0.3)))],
            row=row + 1)
        fig.axes(x=dict(range=[0, totals[row]], showgrid=False, fixedrange=True),
                 y=dict(visible=False, range=[-0.5, 0.5], fixedrange=True), row=row + 1)
    fig.titles_at_left()
    return fig.figure("budget", height=250, barmode="overlay", margin=dict(l=8, r=8, t=28, b=8), showlegend=False)
