"""The lab page, section by section. Every section draws from the run's StepRecords.

The live part (scrubber, header, charts) is one ``st.fragment``: auto-play and
the scrubber rerun only it, not the sidebar. When the run belongs to a lesson,
the lesson panel (ui/pages/lesson_panel.py) is drawn beside the charts and holds
the step bar at each of its questions.
"""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from engine.metrics import Slo
from engine.records import StepRecord
from engine.request import request_id
from lab.charts import blocks, budget, motion, queues, replay, roofline, timeline, window
from lab.charts.history import latest_views, oldest_waiting
from lab.metrics import run_metrics
from lab.run import History
from ui import link
from ui.draw import CSS, EVENT_TONES, chart, chip, flashes, prose
from ui.pages import lesson_panel
from ui.session import exclusive, readable_lessons, session
from ui.widgets import presenter
from ui.widgets import replay as replay_widgets
from ui.widgets.knobs import knobs_panel
from ui.widgets.share_panel import share_panel
from ui.widgets.step_bar import Hold, step_bar
from ui.widgets.workload import workload_panel

# ---- sections -----------------------------------------------------------------------------


def scrubber_key(num_steps: int, keys_applied: int) -> str:
    """A new slider for each length of the history and each key press applied. A step or a Back
    taken while a redraw is cut short (fast key presses do it) leaves the page holding the
    slider's old position, which Streamlit then reports as a move; under one key it took the run
    back to where it was (four fast ← from step 4 ended at 1 to 3, two runs in six). Now a report
    from a slider drawn before the latest step or press is known stale and ignored; the slider's
    own moves keep its key, so it keeps the keyboard focus while you scrub."""
    return f"scrubber_{num_steps}_{keys_applied}"


@exclusive
def _on_scrub(key: str) -> None:
    s = session()
    if key == scrubber_key(len(s.run.records), s.keys_applied):  # else a report from a redraw cut short
        s.run.seek(s.widget(key))


def scrubber(run: History) -> None:
    """A slider over recorded history: moving it only changes which step is shown."""
    if not run.records:
        return
    s = session()
    key = scrubber_key(len(run.records), s.keys_applied)
    s.set_widget(key, run.cursor)
    st.select_slider(
        "Step shown", options=list(range(-1, len(run.records))), key=key, args=(key,),
        format_func=lambda i: "start" if i < 0 else f"step {i}", label_visibility="collapsed",
        on_change=_on_scrub, disabled=s.playing,
        help="Time travel: show any past step. Step from a past step branches the run there.")


def header(run: History, record: StepRecord) -> None:
    b, s = record.budget, record.stats
    ses = session()
    playing = f" · ▶ {html.escape(ses.play_meter.note(ses.widget('speed')))}" if ses.playing else ""
    st.markdown(
        f"### Step {record.step} <span style='font-size:.6em;color:#777'>of {len(run.records) - 1}{playing}</span>",
        unsafe_allow_html=True)
    st.markdown(
        f":blue-badge[{b.tokens_used} / {b.token_budget} tokens] :orange-badge[{b.seqs_used} / {b.seq_cap} seqs] "
        f":violet-badge[KV {b.gpu_blocks_used} / {b.num_gpu_blocks} pages] "
        f":green-badge[{s.num_requests_running} running] :gray-badge[{s.num_requests_waiting} waiting] "
        f":red-badge[{s.num_requests_swapped} swapped] :gray-badge[{s.num_requests_finished} finished] "
        f":red-badge[{s.num_preemptions} preemption{'' if s.num_preemptions == 1 else 's'} so far]"
        + (f" :green-badge[:material/timer: {record.modeled.clock_ms:,.1f} ms modeled]" if record.modeled else "")
        + _oldest_badge(record))
    if not run.at_latest:
        st.caption(f":material/history: Looking back at step {record.step} of {len(run.records) - 1}. **Step** "
                   "re-runs the engine from here and drops the later steps; the slider takes you back to them.")


def _oldest_badge(record: StepRecord) -> str:
    """How long the queue's oldest request has waited: under load, this grows when the offered rate
    passes what the engine can serve."""
    oldest = oldest_waiting(record)
    if oldest is None:
        return ""
    rid, steps, ms = oldest
    waited = f"{steps} steps" + (f", {ms:,.0f} ms" if ms is not None else "")
    return f" :orange-badge[oldest waiting {rid}: {waited}]"


def _kind(kind: str, label: str | None = None) -> str:
    return f"<span class='lab-kind lab-{EVENT_TONES.get(kind, 'calm')}'>{label or kind.replace('_', ' ')}</span>"


def _change_lines(run: History, step: int) -> list[str]:
    """What the user did before this step: it is part of the run's history too."""
    change = run.change_before(step)
    if change is None:
        return []
    lines = [f"{_kind('you', 'you set')} {chip(None)} {html.escape(k)} = {html.escape(repr(v))}, from this step on"
             for k, v in change.knobs.items()]
    lines += [f"{_kind('you', 'you added')} {chip(None)} a request: “{html.escape(item.prompt[:60])}”"
              for item in change.requests]
    return lines


def why(run: History, record: StepRecord) -> None:
    """This step's decisions, each with the rule that made it."""
    st.markdown("##### Why: this step's decisions")
    lines = _change_lines(run, record.step)
    for e in record.events:
        lines.append(f"{_kind(e.kind)} {chip(e.request_id)} {html.escape(e.reason)}")
    if not lines:
        lines.append("No decisions this step: every running request simply decoded one more token.")
    st.markdown("".join(f"<div class='lab-event'>{line}</div>" for line in lines), unsafe_allow_html=True)


def event_log(records: list[StepRecord]) -> None:
    """The events of the last RECENT_STEPS steps; this step's first, then the most recent."""
    shown = window.recent(records)
    rows = [dict(step=r.step, event=e.kind, request=e.request_id or "", reason=e.reason)
            for r in reversed(shown) for e in r.events]
    if caption := window.note(len(records), len(shown), "steps' events"):
        st.caption(caption)
    st.dataframe(pd.DataFrame(rows, columns=["step", "event", "request", "reason"]), hide_index=True,
                 height=360, key="event_log", column_config={
                     "step": st.column_config.NumberColumn(width="small"),
                     "reason": st.column_config.TextColumn(width="large")})


def generated_text(records: list[StepRecord]) -> None:
    """Each request's output so far; the token produced in the step on screen is highlighted."""
    new = {c.request_id: c.new_token_text for c in records[-1].batch if c.new_token_text is not None}
    rows = []
    views = latest_views(records)
    if caption := window.note(len(views), window.MAX_ROWS, "requests"):
        st.caption(caption)
    for rid, view in list(views.items())[-window.MAX_ROWS:]:
        text = view.output_text
        if rid in new and text.endswith(new[rid]):
            shown = html.escape(text[: len(text) - len(new[rid])]) + f"<mark>{html.escape(new[rid])}</mark>"
        else:
            shown = html.escape(text) or "<i style='color:#999'>nothing yet</i>"
        rows.append(f"<div class='lab-event'>{chip(rid)} <span style='color:#666'>{view.status}, "
                    f"{view.num_output_tokens}/{view.max_tokens} tokens</span>"
                    f"<div class='lab-text'>{shown}</div></div>")
    st.markdown("".join(rows), unsafe_allow_html=True)


def _cannot_start(run: History) -> bool:
    """Before step 0 with nothing the engine will serve (every request refused as it was added):
    say which requests, why, and which knob, rather than leave a page of greyed-out buttons."""
    refused = run.refused
    if not refused:
        return False
    st.markdown("### Nothing can run")
    lines = "\n".join(f"- **{e.request_id}** {e.reason}" for e in refused[:10])
    more = f"\n- ... and {len(refused) - 10} more" if len(refused) > 10 else ""
    st.error(f"The engine refused every request as it was added, so there is no step to run:\n\n{lines}{more}\n\n"
             "Change the limit each reason names in the sidebar: **num_gpu_blocks** (or block_size) for KV pages, "
             "**max_num_batched_tokens** or **enable_chunked_prefill** for a step's tokens, **max_model_len** for "
             "length, **watermark** for the pages kept free. The run starts over with the new value.",
             icon=":material/block:")
    return True


def intro(run: History) -> None:
    """Before step 0: what is about to arrive."""
    if _cannot_start(run):
        return
    st.markdown("### Ready at step 0")
    st.markdown("Press **Step** to run the first turn of the scheduler loop. These requests will arrive:")
    items = run.items()
    tokens = run.prompt_tokens()
    # The numbers a first question asks about come first, so a narrow column beside a lesson still shows them.
    st.dataframe(pd.DataFrame([dict(request=request_id(i), prompt_tokens=tokens.get(request_id(i)),
                                    max_tokens=it.max_tokens, arrives_at_step=it.arrival_step, priority=it.priority,
                                    prompt=it.prompt[:80])
                               for i, it in enumerate(items)]),
                 hide_index=True, key="intro_workload", column_config={
                     "request": st.column_config.TextColumn(width="small"),
                     "prompt_tokens": st.column_config.NumberColumn("prompt tokens", width="small"),
                     "max_tokens": st.column_config.NumberColumn("max tokens", width="small"),
                     "arrives_at_step": st.column_config.NumberColumn("arrives at step", width="small")})


def _ms_axis(run: History) -> float | None:
    """For a run priced on a deployment, the choice of x axis: None for steps, or the whole history's
    end in modeled ms (the axis keeps its length while you scrub)."""
    last = run.records[-1].modeled
    if last is None:
        return None
    axis = st.segmented_control("Timeline and metrics against", ["steps", "modeled ms"], default="steps",
                                key="timeline_axis", help="Steps, or the time each step takes on the deployment.")
    return last.clock_ms if axis == "modeled ms" else None


def slo_summary(run: History, records: list[StepRecord]) -> None:
    """Against the SLO knobs, the requests finished by the step on screen: attainment and goodput."""
    slo = Slo.of(run.config_next())
    if slo is None:
        st.caption("Set a TTFT or TPOT target under *Service-level objectives* to see attainment and goodput.")
        return
    agg = run_metrics(records, slo)["aggregate"]
    targets = " and ".join(f"{name} ≤ {value:g} ms" for name, value in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms))
                           if value is not None)
    if agg["slo_attainment"] is None:
        st.markdown(f"**SLO** {targets}: no request has finished yet.")
        return
    verdict = ":green[met]" if agg["slo_met"] else ":red[missed]"
    prose(f"**SLO** {targets} for {slo.percentile:g} % of requests: {agg['slo_attainment']:.0%} attained "
          f"({verdict}) · goodput {agg['goodput']:.2f} of {agg['request_throughput']:.2f} finished requests/s")


def history_tabs(run: History, records: list[StepRecord]) -> None:
    """Views over the whole history so far; only the open tab is computed."""
    names = ["Timeline", "Metrics", "Generated text", "Event log", "Replay"]
    ms_until = _ms_axis(run)  # above the tabs: the timeline and the metrics share it
    tabs = st.tabs(names, key="history_tab", on_change="rerun")
    num_steps = len(run.records)
    with tabs[0]:
        if tabs[0].open:
            if caption := window.note(len(records), window.RECENT_STEPS, "steps"):
                st.caption(caption)
            chart(timeline.requests_figure(records, num_steps, ms_until), "timeline")
    with tabs[1]:
        if tabs[1].open:
            slo_summary(run, records)
            chart(timeline.metrics_figure(records, num_steps, ms_until), "metrics")
            if caption := window.note(len(latest_views(records)), window.MAX_ROWS, "requests"):
                st.caption(caption)
            chart(timeline.latency_figure(records), "latency")
    with tabs[2]:
        if tabs[2].open:
            generated_text(records)
    with tabs[3]:
        if tabs[3].open:
            event_log(records)
    with tabs[4]:
        if tabs[4].open:
            if session().playing:
                st.caption("Pause to build the replay of the history.")
            else:
                st.caption("The history up to the step shown, as an animation that plays in your browser.")
                chart(replay.figure(records), "replay")


def _aside_stale(run: History) -> bool:
    """The side panel shows another step than the views: the slider moved, rerunning only the views."""
    s = session()
    return s.aside_at is not None and not s.playing and s.aside_at != (run.cursor, len(run.records))


def _play_one(hold: Hold | None) -> None:
    """Auto-play's step: one step per run of the fragment, until the run is done or held."""
    s = session()
    if s.run.done or (hold is not None and not hold(s.run, 1)):
        s.playing = False
        st.rerun()
    with s.lock:
        s.run.step(1)


def _live(hold: Hold | None = None) -> None:
    """The fragment auto-play and the scrubber rerun: a step when playing, the address bar, the views."""
    s = session()
    started = s.play_meter.started() if s.playing else None
    if s.playing:
        _play_one(hold)
    run = s.run
    scrubber(run)
    link.sync_link()  # the address bar follows every step, knob and workload change
    if run.config_next() != s.knobs_shown or _aside_stale(run):
        st.rerun()  # time travel crossed a knob change or left the aside's step: redraw the whole page
    views(run)
    if started is not None:
        s.play_meter.finished(started)


def views(run: History) -> None:
    """The step on screen: its header, the queues, the forward pass, the block map, why, and the history.

    On a projector (1280x720, large type) the queues sit beside the block map and the "why", so
    all three are on the first screen; the forward pass and its cost come below them."""
    record = run.record
    if record is None:
        intro(run)
        return
    records = run.records[: run.cursor + 1]
    previous = records[-2] if len(records) > 1 else None
    with st.container(key="motion"):  # hidden: a style sheet only, so it takes no room on the page
        st.markdown(f"<style>{motion.step_css(records)}</style>", unsafe_allow_html=True)
    header(run, record)
    left, right = st.columns([1, 1] if session().presenting else [1.3, 1], gap="medium")
    with left:
        _queues(records)
    if session().presenting:
        with right:
            _block_map(record, previous)
            why(run, record)
        _forward_pass(record)
        _cost(records)
    else:
        with right:
            _forward_pass(record)
        _cost(records)
        _block_map(record, previous)
        why(run, record)
    history_tabs(run, records)


def _queues(records: list[StepRecord]) -> None:
    st.markdown("##### Queues after this step")
    chart(queues.figure(records), "queues")
    st.caption(queues.KEY)


def _forward_pass(record: StepRecord) -> None:
    st.markdown("##### This step's forward pass")
    chart(budget.figure(record), "budget")
    st.caption(budget.KEY)


def _cost(records: list[StepRecord]) -> None:
    modeled = records[-1].modeled
    if modeled is None:
        return
    st.markdown(f"##### This step on {modeled.deployment} (modeled, not measured)")
    chart(roofline.figure(records), "roofline")
    st.caption("Priced by engine/hardware.py: a roofline per part, fitted to published vLLM step times. Left "
               "of the ridge a step is bound by reading memory, so more tokens in it cost almost nothing.")


def _block_map(record: StepRecord, previous: StepRecord | None) -> None:
    st.markdown("##### KV block map")
    chart(blocks.figure(record, previous), "blocks")


def _sidebar() -> None:
    """The knobs and workload (or, in a replay, the replay's), then sharing."""
    if session().replaying:
        replay_widgets.sidebar()
    else:
        with st.sidebar:
            st.markdown("### :material/neurology: Scheduler Loop Lab")
            st.header("Knobs", divider="gray")
            knobs_panel()
            st.header("Workload", divider="gray")
            workload_panel()
    share_panel()


def _welcomed(first_lesson: str | None = None) -> None:
    s = session()
    s.welcomed = True
    if first_lesson is not None:
        try:
            lesson_panel.open_lesson(first_lesson)
        except ValueError as exc:
            s.flash("error", f"Lesson 1 could not open: {exc}")


def welcome() -> None:
    """A first visit, opened cold: what the lab is, in two sentences, and the way into lesson 1."""
    first = next(iter(readable_lessons()), None)
    with st.container(border=True, key="welcome"):
        st.markdown("**Scheduler Loop Lab** runs a real small language model one scheduler step at a time, and "
                    "shows every decision a serving engine such as vLLM makes: which prompts and decodes join the "
                    "next forward pass, and what happens when the KV cache runs out. Start with lesson 1, or step "
                    "the lab's own workload with **Step** and turn the knobs in the sidebar.")
        left, right, _ = st.columns([1.2, 1, 3])
        if first is not None:
            left.button("Start lesson 1", key="welcome_lesson", type="primary", icon=":material/school:",
                        on_click=_welcomed, args=(first,), width="stretch")
        right.button("Explore the lab", key="welcome_dismiss", on_click=_welcomed, width="stretch")


def page() -> None:
    """The step bar, then the live views; in a lesson, its panel to their right."""
    link.open_link()  # a shared link's scenario, on a session's first run
    s = session()
    try:
        run = s.run
    except ValueError as exc:  # the default model is missing or cannot be loaded
        st.error(f"The lab could not start its engine: {exc}")
        st.stop()
    _sidebar()
    presenter.apply()
    if s.replaying:
        replay_widgets.notice()
    st.markdown(CSS, unsafe_allow_html=True)
    in_lesson = s.lesson() is not None
    if in_lesson or s.presenting or run.records:
        s.welcomed = True
    if not s.welcomed:
        welcome()
    hold = lesson_panel.hold if in_lesson else None
    step_bar(hold)
    flashes()  # below the step bar, so a notice never moves the button under the cursor
    main = st.container()
    s.aside_at = None
    if in_lesson:
        main, side = st.columns([0.68, 0.32], gap="medium")
        with side:
            lesson_panel.panel()
        s.aside_at = (run.cursor, len(run.records))  # the step it was drawn for (see _aside_stale)
    with main:
        st.fragment(_live, run_every=1 / s.widget("speed") if s.playing else None)(hold)
