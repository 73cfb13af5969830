"""The live part of the lab page: the step on screen's views and the history tabs.

It is one ``st.fragment``, inside the page's own (ui/pages/lab/page.py): auto-play and the
scrubber rerun only it. Neither reruns the sidebar, so each checks first that the sidebar
still shows what it was drawn for (``sidebar_state``), and redraws the whole page if not.
Each chart comes from the figure registry (lab/charts/registry.py)."""

from __future__ import annotations

import streamlit as st

from engine.records import StepRecord
from lab.charts import budget, motion, queues, window
from lab.charts.history import latest_views
from lab.charts.registry import FIGURE, Frame
from lab.run import History
from ui import link
from ui.draw import chart
from ui.pages.lab.sections import event_log, generated_text, header, intro, scrubber, slo_summary, why
from ui.session import Session, session
from ui.widgets.step_bar import Hold


def _ms_axis(run: History) -> float | None:
    """For a run priced on a deployment, the choice of x axis: None for steps, or the whole history's
    end in modeled ms (the axis keeps its length while you scrub)."""
    last = run.records[-1].modeled
    if last is None:
        return None
    axis = st.segmented_control("Timeline and metrics against", ["steps", "modeled ms"], default="steps",
                                key="timeline_axis", help="Steps, or the time each step takes on the deployment.")
    return last.clock_ms if axis == "modeled ms" else None


def history_tabs(run: History, records: list[StepRecord]) -> None:
    """Views over the whole history so far; only the open tab is computed."""
    names = ["Timeline", "Metrics", "Generated text", "Event log", "Replay"]
    ms_until = _ms_axis(run)  # above the tabs: the timeline and the metrics share it
    tabs = st.tabs(names, key="history_tab", on_change="rerun")
    frame = Frame(records, len(run.records), ms_until)
    with tabs[0]:
        if tabs[0].open:
            if caption := window.note(len(records), window.RECENT_STEPS, "steps"):
                st.caption(caption)
            _chart("timeline", frame)
    with tabs[1]:
        if tabs[1].open:
            slo_summary(run, records)
            _chart("metrics", frame)
            if caption := window.note(len(latest_views(records)), window.MAX_ROWS, "requests"):
                st.caption(caption)
            _chart("latency", frame)
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
                _chart("replay", frame)


def sidebar_state(s: Session) -> tuple:
    """What the sidebar (and the presenter's page style) draws from the session: the knobs of the next
    step, the workload, the lesson, whether there is anything to export, a replay, presenter mode. A
    click in the stage that changes any of it (time travel across a knob change, the first step, Exit
    presenter mode) must redraw the whole page; a step rarely does."""
    run = s.run
    return s.replaying, s.presenting, s.lesson_id, run.config_next(), len(run.items()), bool(run.records)


def sidebar_stale() -> bool:
    s = session()
    return sidebar_state(s) != s.sidebar_for


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


def live(hold: Hold | None = None) -> None:
    """The fragment auto-play and the scrubber rerun: a step when playing, the address bar, the views."""
    s = session()
    if sidebar_stale() or _aside_stale(s.run):  # before auto-play's step, so a redraw never takes one twice
        st.rerun()  # time travel crossed a knob change or left the aside's step: redraw the whole page
    started = s.play_meter.started() if s.playing else None
    if s.playing:
        _play_one(hold)
    run = s.run
    scrubber(run)
    link.sync_link()  # the address bar follows every step, knob and workload change
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
    with st.container(key="motion"):  # hidden: a style sheet only, so it takes no room on the page
        st.markdown(f"<style>{motion.step_css(records)}</style>", unsafe_allow_html=True)
    header(run, record)
    frame = Frame(records, len(run.records))
    left, right = st.columns([1, 1] if session().presenting else [1.3, 1], gap="medium")
    with left:
        _view("queues", frame)
    if session().presenting:
        with right:
            _view("blocks", frame)
            why(run, record)
        _view("budget", frame)
        _view("roofline", frame)
        _view("padding", frame)
    else:
        with right:
            _view("budget", frame)
        _view("roofline", frame)
        _view("padding", frame)
        _view("blocks", frame)
        why(run, record)
    history_tabs(run, records)


# What each view's caption says under it.
CAPTIONS = {
    "queues": queues.KEY,
    "budget": budget.KEY,
    "roofline": "Priced by engine/hardware.py: a roofline per part, fitted to published vLLM step times. Left of "
                "the ridge a step is bound by reading memory, so more tokens in it cost almost nothing.",
    "padding": "engine/cudagraph.py: vLLM 0.32's default capture sizes for these knobs. A step of 9 decodes "
               "replays the graph captured for the next size up, and pays for it; a full batch (max_num_seqs, up "
               "to 512) is captured exactly.",
}


def _chart(key: str, frame: Frame) -> None:
    chart(FIGURE[key].build(frame), key)


def _view(key: str, frame: Frame) -> None:
    """One live view under its heading (lab/charts/registry.py), if it applies to this step."""
    figure = FIGURE[key]
    if not figure.applies(frame):
        return
    st.markdown(f"##### {figure.heading(frame)}")
    _chart(key, frame)
    if key in CAPTIONS:
        st.caption(CAPTIONS[key])
