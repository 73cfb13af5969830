"""HTML fragments the lab page and the offline page (lab/export/player.py) both draw: a request's
colour chip, an event's badge and line, the step's figures in words. One definition each, so the two
pages say the same thing the same way; every text that can come from a visitor (a run file's ids and
reasons) is escaped here."""

from __future__ import annotations

import html

from engine.records import Event, StepRecord
from engine.request import request_id
from lab.charts.history import oldest_waiting
from lab.palette import request_color, text_color
from lab.run import Change, History

# Event kinds grouped by tone, so the eye finds the trouble (preemption, blocking) first.
EVENT_TONES = {"arrived": "calm", "admitted": "good", "chunk_scheduled": "calm", "swapped_in": "good",
               "recompute_started": "warn", "finished": "good", "blocked": "warn", "preempted": "bad",
               "swapped_out": "bad", "rejected": "bad", "evicted": "warn", "idle": "calm", "you": "you"}
CSS = """
.lab-chip {display:inline-block; min-width:2.4em; padding:0 .4em; border-radius:.35em; font-weight:600;
           text-align:center; font-family:ui-monospace, monospace; font-size:.9em}
.lab-event {margin:.2em 0; line-height:1.45}
.lab-kind {display:inline-block; min-width:7.5em; padding:0 .45em; border-radius:.35em; font-size:.85em;
           font-weight:600; text-align:center}
.lab-calm {background:#EEF1F4; color:#38424C} .lab-good {background:#DDF2E8; color:#0B5A3A}
.lab-warn {background:#FCEFD6; color:#7A4B00} .lab-bad {background:#FBE0DA; color:#8E2410}
.lab-you {background:#E3EDF9; color:#0B4A86}
"""


def chip(request_id: str | None) -> str:
    if request_id is None:
        return '<span class="lab-chip" style="background:#E8E8E8">—</span>'
    color = request_color(request_id)  # an id can come from an uploaded run file: never trust it as HTML
    style = f"background:{color};color:{text_color(color)}"
    return f'<span class="lab-chip" style="{style}">{html.escape(request_id)}</span>'


def kind_badge(kind: str, label: str | None = None) -> str:
    # escaped: a loaded run file's event kind is a visitor's text (issue 32)
    return (f"<span class='lab-kind lab-{EVENT_TONES.get(kind, 'calm')}'>"
            f"{html.escape(label or kind.replace('_', ' '))}</span>")


def event_line(event: Event) -> str:
    """A scheduler decision as one line of HTML: its kind, the request's chip, and the rule in words."""
    return f"{kind_badge(event.kind)} {chip(event.request_id)} {html.escape(event.reason)}"


def change_lines(change: Change | None) -> list[str]:
    """What the user did before a step, as lines of HTML: it is part of the run's history too."""
    if change is None:
        return []
    lines = [f"{kind_badge('you', 'you set')} {chip(None)} {html.escape(k)} = {html.escape(repr(v))}, from this step on"
             for k, v in change.knobs.items()]
    return lines + [f"{kind_badge('you', 'you added')} {chip(None)} a request: “{html.escape(item.prompt[:60])}”"
                    for item in change.requests]


NO_DECISIONS = "No decisions this step: every running request simply decoded one more token."


def badges(record: StepRecord) -> list[tuple[str, str]]:
    """The step in figures, as (colour, text) badges: the header over the step's charts."""
    b, s = record.budget, record.stats
    out = [("blue", f"{b.tokens_used} / {b.token_budget} tokens"), ("orange", f"{b.seqs_used} / {b.seq_cap} seqs"),
           ("violet", f"KV {b.gpu_blocks_used} / {b.num_gpu_blocks} pages after it"),
           ("green", f"{s.num_requests_running} running"), ("gray", f"{s.num_requests_waiting} waiting"),
           ("red", f"{s.num_requests_swapped} swapped"), ("gray", f"{s.num_requests_finished} finished"),
           ("red", f"{s.num_preemptions} preemption{'' if s.num_preemptions == 1 else 's'} so far")]
    if record.modeled:
        out.append(("green", f"this step {record.modeled.total_ms:,.1f} ms, clock {record.modeled.clock_ms:,.1f} ms "
                             "modeled"))
    if (oldest := oldest_waiting(record)) is not None:  # grows when the offered rate passes what the engine serves
        rid, steps, ms = oldest
        waited = f"{steps} step{'' if steps == 1 else 's'}" + (f", {ms:,.0f} ms" if ms is not None else "")
        out.append(("orange", f"oldest waiting {rid}: {waited}"))
    return out


def workload_rows(run: History) -> list[dict]:
    """Before step 0: the requests about to arrive, a row each (the numbers a first question asks about
    first, so a narrow column beside a lesson still shows them). Prompts are a visitor's text: a page
    shows them as text."""
    tokens = run.prompt_tokens()
    return [dict(request=request_id(i), prompt_tokens=tokens.get(request_id(i)), max_tokens=item.max_tokens,
                 arrives_at_step=item.arrival_step, priority=item.priority, prompt=item.prompt[:80])
            for i, item in enumerate(run.items())]
