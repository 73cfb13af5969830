"""The lab page, section by section. Every section draws from the run's StepRecords.

The live part (scrubber, header, charts) is one ``st.fragment``: auto-play and
the scrubber rerun only it, not the sidebar. ``lab_page`` takes an optional
``aside`` callable that draws a panel beside the charts (the lesson panel's hook).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import pandas as pd
import streamlit as st

from engine.records import StepRecord
from lab import controls, presenter, share
from lab.charts import blocks, budget, queues, replay, timeline
from lab.charts.history import latest_views
from lab.palette import request_color, text_color
from lab.state import Run, session_lock, take_flashes

PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}
# Event kinds grouped by tone, so the eye finds the trouble (preemption, blocking) first.
EVENT_TONES = {"arrived": "calm", "admitted": "good", "chunk_scheduled": "calm", "swapped_in": "good",
               "recompute_started": "warn", "finished": "good", "blocked": "warn", "preempted": "bad",
               "swapped_out": "bad", "rejected": "bad", "evicted": "warn", "idle": "calm", "you": "you"}
CSS = """
<style>
[data-testid="stMainBlockContainer"] {padding: 2.4rem 2rem 2rem 2rem}
[data-testid="stSidebarUserContent"] {padding-top: 1rem}
.lab-chip {display:inline-block; min-width:2.4em; padding:0 .4em; border-radius:.35em; font-weight:600;
           text-align:center; font-family:ui-monospace, monospace; font-size:.9em}
.lab-event {margin:.2em 0; line-height:1.45}
.lab-kind {display:inline-block; min-width:7.5em; padding:0 .45em; border-radius:.35em; font-size:.85em;
           font-weight:600; text-align:center}
.lab-calm {background:#EEF1F4; color:#38424C} .lab-good {background:#DDF2E8; color:#0B5A3A}
.lab-warn {background:#FCEFD6; color:#7A4B00} .lab-bad {background:#FBE0DA; color:#8E2410}
.lab-you {background:#E3EDF9; color:#0B4A86}
.lab-text {font-family:ui-monospace, monospace; white-space:pre-wrap; font-size:.92em}
.lab-text mark {background:#FFE08A; padding:0 .1em}
.st-key-step_bar {container-type: inline-size}
@container (max-width: 600px) {.st-key-step_bar button p {position: absolute; width: 1px; height: 1px;
  overflow: hidden; clip-path: inset(50%); white-space: nowrap}}
</style>
"""


def chip(request_id: str | None) -> str:
    if request_id is None:
        return '<span class="lab-chip" style="background:#E8E8E8">—</span>'
    color = request_color(request_id)
    return f'<span class="lab-chip" style="background:{color};color:{text_color(color)}">{request_id}</span>'


def chart(fig, key: str) -> None:
    st.plotly_chart(presenter.sized(fig), key=key, theme=None, config=PLOTLY_CONFIG)


# ---- sections -----------------------------------------------------------------------------


def flashes() -> None:
    for kind, message in take_flashes():
        getattr(st, kind)(message)


def scrubber(run: Run) -> None:
    """A slider over recorded history: moving it only changes which step is shown."""
    if not run.records:
        return
    st.session_state.scrubber = run.cursor
    st.select_slider(
        "Step shown", options=list(range(-1, len(run.records))), key="scrubber",
        format_func=lambda i: "start" if i < 0 else f"step {i}", label_visibility="collapsed",
        on_change=lambda: run.seek(st.session_state.scrubber), disabled=st.session_state.get("playing", False),
        help="Time travel: show any past step. Step from a past step branches the run there.")


def header(run: Run, record: StepRecord) -> None:
    b, s = record.budget, record.stats
    st.markdown(
        f"### Step {record.step} <span style='font-size:.6em;color:#777'>of {len(run.records) - 1}</span>",
        unsafe_allow_html=True)
    st.markdown(
        f":blue-badge[{b.tokens_used} / {b.token_budget} tokens] :orange-badge[{b.seqs_used} / {b.seq_cap} seqs] "
        f":violet-badge[KV {b.gpu_blocks_used} / {b.num_gpu_blocks} pages] "
        f":green-badge[{s.num_requests_running} running] :gray-badge[{s.num_requests_waiting} waiting] "
        f":red-badge[{s.num_requests_swapped} swapped] :gray-badge[{s.num_requests_finished} finished] "
        f":red-badge[{s.num_preemptions} preemptions so far]")
    if not run.at_latest:
        st.caption(f":material/history: Looking back at step {record.step} of {len(run.records) - 1}. **Step** "
                   "re-runs the engine from here and drops the later steps; the slider takes you back to them.")


def _kind(kind: str, label: str | None = None) -> str:
    return f"<span class='lab-kind lab-{EVENT_TONES.get(kind, 'calm')}'>{label or kind.replace('_', ' ')}</span>"


def _change_lines(run: Run, step: int) -> list[str]:
    """What the user did before this step: it is part of the run's history too."""
    change = run.change_before(step)
    if change is None:
        return []
    lines = [f"{_kind('you', 'you set')} {chip(None)} {html.escape(k)} = {html.escape(repr(v))}, from this step on"
             for k, v in change.knobs.items()]
    lines += [f"{_kind('you', 'you added')} {chip(None)} a request: “{html.escape(item.prompt[:60])}”"
              for item in change.requests]
    return lines


def why(run: Run, record: StepRecord) -> None:
    """This step's decisions, each with the rule that made it."""
    st.markdown("##### Why: this step's decisions")
    lines = _change_lines(run, record.step)
    for e in record.events:
        lines.append(f"{_kind(e.kind)} {chip(e.request_id)} {html.escape(e.reason)}")
    if not lines:
        lines.append("No decisions this step: every running request simply decoded one more token.")
    st.markdown("".join(f"<div class='lab-event'>{line}</div>" for line in lines), unsafe_allow_html=True)


def event_log(run: Run, records: list[StepRecord]) -> None:
    """Every event so far; this step's first, then the most recent steps."""
    rows = [dict(step=r.step, event=e.kind, request=e.request_id or "", reason=e.reason)
            for r in reversed(records) for e in r.events]
    st.dataframe(pd.DataFrame(rows, columns=["step", "event", "request", "reason"]), hide_index=True,
                 height=360, key="event_log", column_config={
                     "step": st.column_config.NumberColumn(width="small"),
                     "reason": st.column_config.TextColumn(width="large")})


def generated_text(records: list[StepRecord]) -> None:
    """Each request's output so far; the token produced in the step on screen is highlighted."""
    new = {c.request_id: c.new_token_text for c in records[-1].batch if c.new_token_text is not None}
    rows = []
    for rid, view in latest_views(records).items():
        text = view.output_text
        if rid in new and text.endswith(new[rid]):
            shown = html.escape(text[: len(text) - len(new[rid])]) + f"<mark>{html.escape(new[rid])}</mark>"
        else:
            shown = html.escape(text) or "<i style='color:#999'>nothing yet</i>"
        rows.append(f"<div class='lab-event'>{chip(rid)} <span style='color:#666'>{view.status}, "
                    f"{view.num_output_tokens}/{view.max_tokens} tokens</span>"
                    f"<div class='lab-text'>{shown}</div></div>")
    st.markdown("".join(rows), unsafe_allow_html=True)


def intro(run: Run) -> None:
    """Before step 0: what is about to arrive."""
    st.markdown("### Ready at step 0")
    st.markdown("Press **Step** to run the first turn of the scheduler loop. These requests will arrive:")
    items = run.items()
    st.dataframe(pd.DataFrame([dict(request=f"r{i}", arrives_at_step=it.arrival_step, prompt=it.prompt[:80],
                                    max_tokens=it.max_tokens, priority=it.priority) for i, it in enumerate(items)]),
                 hide_index=True, key="intro_workload")


def history_tabs(run: Run, records: list[StepRecord]) -> None:
    """Views over the whole history so far; only the open tab is computed."""
    names = ["Timeline", "Metrics", "Generated text", "Event log", "Replay"]
    tabs = st.tabs(names, key="history_tab", on_change="rerun")
    num_steps = len(run.records)
    with tabs[0]:
        if tabs[0].open:
            chart(timeline.requests_figure(records, num_steps), "timeline")
    with tabs[1]:
        if tabs[1].open:
            chart(timeline.metrics_figure(records, num_steps), "metrics")
            chart(timeline.latency_figure(records), "latency")
    with tabs[2]:
        if tabs[2].open:
            generated_text(records)
    with tabs[3]:
        if tabs[3].open:
            event_log(run, records)
    with tabs[4]:
        if tabs[4].open:
            if st.session_state.get("playing"):
                st.caption("Pause to build the replay of the history.")
            else:
                st.caption("The history up to the step shown, as an animation that plays in your browser.")
                chart(replay.figure(records), "replay")


def _aside_stale(run: Run) -> bool:
    """The side panel shows another step than the views: the slider moved, rerunning only the views."""
    shown = st.session_state.get("aside_at")
    return shown is not None and not st.session_state.get("playing") and shown != (run.cursor, len(run.records))


def _live(run: Run, hold: controls.Hold | None = None) -> None:
    if st.session_state.get("playing"):
        if run.done or (hold is not None and not hold(run, 1)):
            st.session_state.playing = False
            st.rerun()
        with session_lock():
            run.step(1)
    scrubber(run)
    share.sync_link(run)  # the address bar follows every step, knob and workload change
    if run.config_next() != st.session_state.get("knobs_shown") or _aside_stale(run):
        st.rerun()  # time travel crossed a knob change or left the aside's step: redraw the whole page
    record = run.record
    if record is None:
        intro(run)
        return
    records = run.records[: run.cursor + 1]
    header(run, record)
    left, right = st.columns([1.3, 1], gap="medium")
    with left:
        st.markdown("##### Queues after this step")
        chart(queues.figure(records), "queues")
    with right:
        st.markdown("##### This step's forward pass")
        chart(budget.figure(record), "budget")
        st.caption(budget.KEY)
    st.markdown("##### KV block map")
    chart(blocks.figure(record, records[-2] if len(records) > 1 else None), "blocks")
    why(run, record)
    history_tabs(run, records)


def lab_page(run: Run, aside: Callable[[Run], None] | None = None, hold: controls.Hold | None = None) -> None:
    """The step bar, then the live views; with `aside`, a side panel (e.g. a lesson) to their right.
    `hold` may stop Step, Run and Play short of a step (see controls.Hold)."""
    st.markdown(CSS, unsafe_allow_html=True)
    flashes()
    controls.step_bar(run, hold)
    main = st.container()
    st.session_state.aside_at = None
    if aside is not None:
        main, side = st.columns([0.68, 0.32], gap="medium")
        with side:
            aside(run)
        st.session_state.aside_at = (run.cursor, len(run.records))  # the step it was drawn for (see _live)
    playing = st.session_state.get("playing", False)
    with main:
        st.fragment(_live, run_every=1 / st.session_state.speed if playing else None)(run, hold)
