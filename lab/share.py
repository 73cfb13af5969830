"""What leaves the lab and comes back in: scenario links, exported files and saved runs.

    open_link()          on a session's first run, rebuild the run a link describes (bad parameters warned)
    sync_link(run)       keep the address bar's query parameters equal to the run on screen
    panel(run)           sidebar: the share link, four downloads, loading a saved run, presenter mode
    Recording            a saved run loaded from a file, scrubbed through without an engine (replay mode)
    replay_notice(run)   the banner above a replay, and its sidebar

A link holds a *scenario* (lab/scenario.py): the lesson, the knobs, the workload's
name or seed, hand-added requests and mid-run changes, and the step on screen.
The engine is deterministic, so replaying that script reproduces the run exactly.
A file holds the run's records themselves, so it replays without the model.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

import streamlit as st

from engine import EngineConfig
from engine.workload import PRESETS, GeneratorSpec, WorkloadItem, generate_workload
from lab import presenter
from lab.charts import blocks, budget, queues, timeline
from lab.controls import read_upload
from lab.export import SavedRun, chrome_trace_json, dump_run, figures_html, load_run, metrics_csv, run_metrics
from lab.scenario import (
    NO_WORKLOAD,
    Scenario,
    changed_knobs,
    decode_scenario,
    encode_scenario,
    scenario_changes,
    scenario_config,
    scenario_workload,
)
from lab.state import DEFAULT_PRESET, Run, cached_load, default_config, exclusive, flash, session_run

LESSON_KEY = "lesson_id"  # session state: the lesson the run belongs to, if any (the lesson panel sets it)
LONG_LINK = 8000  # characters; longer links break in some mail and chat tools


# ---- replay mode --------------------------------------------------------------------------------


class Recording(Run):
    """A saved run: its records, shown by the same views as a live run, with no engine behind them.

    It is a Run whose future is fixed: Step (and Play) move forward through the
    recorded steps and stop at the last one; nothing can be changed. The Run
    constructor is not called, as it would build an engine."""

    def __init__(self, saved: SavedRun, name: str):
        self.config, self.workload, self.records = saved.config, saved.workload, saved.records
        self.changes = {}
        self.cursor = -1
        self.name = name

    @property
    def done(self) -> bool:
        return self.at_latest

    def step(self, n: int = 1) -> list:
        first = self.cursor + 1
        self.seek(self.cursor + n)
        return self.records[first:self.cursor + 1]

    def reset(self, config: EngineConfig | None = None, workload: list[WorkloadItem] | None = None) -> None:
        self.seek(-1)

    def set_knobs(self, **knobs) -> bool:
        raise ValueError("a saved run is replayed as it was recorded; go back to the live lab to change knobs")

    def add_request(self, item: WorkloadItem) -> str:
        raise ValueError("a saved run is replayed as it was recorded; go back to the live lab to add requests")


def replaying(run: Run) -> bool:
    return isinstance(run, Recording)


@exclusive
def _on_run_upload() -> None:
    saved = read_upload("run_upload", load_run)
    if saved is None:
        return
    upload = st.session_state.run_upload
    current = session_run()
    if not replaying(current):
        st.session_state.live_run = current  # to come back to
    st.session_state.lab_run = Recording(saved, upload.name)
    st.session_state.playing = False
    flash("success", f"Loaded **{upload.name}**: {len(saved.records)} recorded steps, replayed without the engine. "
                     "Step and the slider move through them.")


@exclusive
def _on_back_to_live() -> None:
    live = st.session_state.pop("live_run", None)
    if live is None:
        del st.session_state["lab_run"]  # session_run() starts a fresh one
    else:
        st.session_state.lab_run = live
    st.session_state.playing = False


@exclusive
def _on_continue_live() -> None:
    """Re-run the file's config and workload on the engine; if every recorded step comes out the
    same, the live run takes over at the step on screen and can go past the end."""
    recording = session_run()
    try:
        run = Run(recording.config, recording.workload, load=cached_load)
        run.step(len(recording.records))
    except (ValueError, OSError) as exc:
        flash("error", f"The engine could not re-run **{recording.name}**: {exc}. The replay is kept.")
        return
    if [r.without_timings() for r in run.records] != [r.without_timings() for r in recording.records]:
        flash("error", f"Re-running **{recording.name}** did not reproduce its steps (it was recorded with mid-run "
                       "changes, another model or another engine version), so it stays a replay.")
        return
    run.seek(recording.cursor)
    st.session_state.lab_run = run
    st.session_state.workload_source = NO_WORKLOAD
    st.session_state.workload_label = f"workload of {recording.name}"
    flash("success", f"The engine re-ran **{recording.name}** step for step; this is now a live run.")


def replay_notice(run: Recording) -> None:
    """Above the step bar: whose steps these are, and why Step stops at the last one."""
    last = len(run.records) - 1
    message = (f":material/movie: **Replay of {run.name}**: {last + 1} recorded steps, no engine running. "
               "Step, Run and Play move through the recording.")
    if run.done:
        message += (f" **Step {last} is the last recorded step**: going further needs the engine. "
                    "*Continue live* in the sidebar re-runs the file on the engine and carries on from here.")
    st.info(message)


def replay_sidebar(run: Recording) -> None:
    """In place of the knobs: the file's config (read-only) and the ways out of the replay."""
    st.session_state.knobs_shown = run.config_next()  # the live views compare against it (see views._live)
    with st.sidebar:
        st.markdown("### :material/neurology: Scheduler Loop Lab")
        st.header("Replay", divider="gray")
        st.caption(f"**{run.name}** · {len(run.records)} steps · {len(run.workload)} requests")
        st.button("Back to the live lab", key="back_to_live", on_click=_on_back_to_live, type="primary",
                  width="stretch", icon=":material/undo:")
        st.button("Continue live", key="continue_live", on_click=_on_continue_live, width="stretch",
                  icon=":material/play_circle:", help="Re-run the file's config and workload on the engine. If it "
                  "reproduces every recorded step, the run goes on live from the step shown.")
        with st.expander("The recorded knobs"):
            st.dataframe({"knob": list(run.config.to_dict()), "value": [str(v) for v in run.config.to_dict().values()]},
                         hide_index=True, key="replay_knobs")


# ---- links --------------------------------------------------------------------------------------


@st.cache_resource(show_spinner=False)
def _lessons() -> dict:
    """Lesson id -> Lesson; empty if the lessons cannot be read (the lesson panel reports why)."""
    from lab.lessons import LessonError, load_lessons

    try:
        return {lesson.id: lesson for lesson in load_lessons()}
    except LessonError:
        return {}


def _base(lesson_id: str | None) -> tuple[EngineConfig, list[WorkloadItem] | None]:
    """What a link is relative to: the lesson's config and workload, or the lab's defaults (None:
    the default preset)."""
    defaults = default_config()
    if lesson_id is None or lesson_id not in _lessons():
        return defaults, None
    lesson = _lessons()[lesson_id]
    return lesson.engine_config(model=defaults.model), lesson.workload_items()


def _source_items(source: str | GeneratorSpec | None, lesson_items: list[WorkloadItem] | None) -> list[WorkloadItem]:
    if source is None:
        return list(lesson_items or [])
    if isinstance(source, GeneratorSpec):
        return generate_workload(source)
    return [] if source == NO_WORKLOAD else PRESETS[source]()


def scenario_of(run: Run) -> tuple[Scenario, EngineConfig]:
    """The run as a link's scenario, and the config its knobs are relative to.

    The workload is named by its source (preset, generator) where the run's workload
    starts with the source's requests; anything else is listed request by request."""
    lesson = st.session_state.get(LESSON_KEY)
    base, lesson_items = _base(lesson)
    source = None if lesson else st.session_state.get("workload_source", DEFAULT_PRESET)
    named = _source_items(source, lesson_items)
    if run.workload[:len(named)] != named:
        source, named = NO_WORKLOAD, []
    requests = run.workload[len(named):]
    added_at = {}
    for step, change in sorted(run.changes.items()):
        for item in change.requests:
            added_at[len(requests)] = step
            requests.append(item)
    live = {step: dict(change.knobs) for step, change in run.changes.items() if change.knobs}
    scenario = Scenario(lesson=lesson, knobs=changed_knobs(run.config, base), workload=source, requests=requests,
                        step=run.cursor if run.cursor >= 0 else None, live_knobs=live, added_at=added_at)
    return scenario, base


def link_params(run: Run) -> dict[str, str]:
    """The query parameters for the run on screen; a replayed file has none (share the file)."""
    params = {} if replaying(run) else encode_scenario(*scenario_of(run))
    if presenter.presenting():
        params[presenter.QUERY_PARAM] = "1"
    return params


def sync_link(run: Run) -> None:
    """Write the run's scenario into the address bar, so copying the URL shares this state.
    Called on every redraw of the live views: a step, a knob, a workload or the slider moving."""
    params = link_params(run)
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)


def share_url(run: Run) -> str:
    base = (st.context.url or "").split("?")[0]
    params = link_params(run)
    return f"{base}?{urlencode(params)}" if params else base


def _replay_script(run: Run, scenario: Scenario) -> list[str]:
    """Step the run through the scenario's mid-run changes up to its step; notes on what did not fit."""
    notes = []
    for step, (knobs, items) in scenario_changes(scenario).items():
        if step > run.next_step:
            run.step(step - run.next_step)
        if step != run.next_step:
            notes.append(f"the run had finished before step {step}, so the changes the link makes there apply "
                         f"before step {run.next_step}")
        if knobs:
            run.set_knobs(**knobs)
        for item in items:
            run.add_request(item)
    if scenario.step is not None:
        run.step(scenario.step + 1 - run.next_step)
        run.seek(scenario.step)
        if run.cursor != scenario.step:
            notes.append(f"link parameter step={scenario.step}: the run ends at step {run.cursor}, shown instead")
    return notes


@exclusive
def open_link() -> None:
    """On a session's first run, build its run from the link it was opened with.

    Each bad parameter keeps its default and is listed in one warning; if the run
    itself cannot be built, the lab starts with its defaults and says why."""
    if st.session_state.get("link_opened"):
        return
    st.session_state.link_opened = True
    params = st.query_params.to_dict()
    if params.pop(presenter.QUERY_PARAM, None) in ("1", "true", "on"):
        st.session_state[presenter.KEY] = True
    if not params or "lab_run" in st.session_state:
        return
    lessons = _lessons()
    defaults = default_config()
    scenario, warnings = decode_scenario(params, defaults, {i: _base(i)[0] for i in lessons})
    base, lesson_items = _base(scenario.lesson)
    try:
        run = Run(scenario_config(scenario, base), scenario_workload(scenario, lesson_items or
                                                                     PRESETS[DEFAULT_PRESET]()), load=cached_load)
        warnings += _replay_script(run, scenario)
    except ValueError as exc:
        flash("error", f"The link could not be opened: {exc}. The lab starts with its defaults.")
        return
    st.session_state.lab_run = run
    st.session_state[LESSON_KEY] = scenario.lesson
    source = scenario.workload if scenario.workload is not None else (None if scenario.lesson else DEFAULT_PRESET)
    st.session_state.workload_source = source
    st.session_state.workload_label = _label(source, scenario.lesson)
    if warnings:
        flash("warning", "Parts of this link could not be used, so they kept their defaults:\n\n"
              + "\n".join(f"- {w}" for w in warnings))


def _label(source: str | GeneratorSpec | None, lesson: str | None) -> str:
    if isinstance(source, GeneratorSpec):
        return f"generated workload (seed {source.seed})"
    if source == NO_WORKLOAD:
        return "workload from a link"
    return f"preset {source}" if source else f"workload of lesson {lesson}"


# ---- export -------------------------------------------------------------------------------------


def saved_run(run: Run) -> SavedRun:
    """The run as a file holds it. Mid-run changes are not in the header, only their effects in the records."""
    return SavedRun(run.config, list(run.workload), run.config.seed, list(run.records))


def step_figures(run: Run) -> list:
    """The live views' figures at the step on screen, for the HTML export."""
    records = run.records[:run.cursor + 1]
    if not records:
        return []
    record, previous = records[-1], records[-2] if len(records) > 1 else None
    return [queues.figure(records), budget.figure(record), blocks.figure(record, previous),
            timeline.requests_figure(records, len(run.records)), timeline.metrics_figure(records, len(run.records))]


def downloads(run: Run) -> list[tuple[str, str, Callable[[], str], str, str]]:
    """(label, file name, contents, mime type, help) for each export. The contents are callables,
    so nothing is serialised until the user asks for that file."""
    step = run.cursor
    return [
        ("Run (JSONL)", "run.jsonl", lambda: dump_run(saved_run(run)), "application/jsonl",
         "Every step record: load it back here (Load a saved run) to replay it without the model."),
        ("Trace (JSON)", "trace.json", lambda: chrome_trace_json(run.records, run.config), "application/json",
         "One track per request: open it in ui.perfetto.dev (or chrome://tracing)."),
        ("Metrics (CSV)", "metrics.csv", lambda: metrics_csv(run_metrics(run.records)), "text/csv",
         "Per-request TTFT, inter-token and end-to-end latency, for a spreadsheet."),
        ("Charts (HTML)", f"charts_step{step}.html",
         lambda: figures_html(step_figures(run), f"Scheduler Loop Lab, step {step}"), "text/html",
         "This step's charts as one page that works offline."),
    ]


def panel(run: Run) -> None:
    """The sidebar's last section: share, export, import, present."""
    with st.sidebar:
        st.header("Share", divider="gray")
        with st.expander("Share link", icon=":material/link:"):
            if replaying(run):
                st.caption("A replayed file has no link: share the file itself.")
            else:
                url = share_url(run)
                st.caption("Opens the lab at this step, with these knobs and this workload. Copy it with the "
                           "button at the code block's right; the address bar holds the same link.")
                st.code(url, language=None, wrap_lines=True)
                if len(url) > LONG_LINK:
                    st.warning(f"This link is {len(url)} characters long: some mail and chat tools cut links that "
                               "long. Export the run instead.")
        with st.expander("Export", icon=":material/download:"):
            if not run.records:
                st.caption("Run a step first: there is nothing to export yet.")
            for i, (label, name, data, mime, why) in enumerate(downloads(run)):
                st.download_button(label, data, name, mime, key=f"export_{i}", help=why, on_click="ignore",
                                   disabled=not run.records, width="stretch", icon=":material/download:")
            st.caption("The trace opens in [ui.perfetto.dev](https://ui.perfetto.dev): one track per request.")
        with st.expander("Load a saved run", icon=":material/upload_file:"):
            st.file_uploader("A run file (.jsonl) exported from the lab", type=["jsonl"], key="run_upload",
                             on_change=_on_run_upload, help="Replays its steps without the model. A bad file is "
                             "named with its line, and the current run is kept.")
        presenter.toggle()


def sidebar(run: Run, live_sidebar: Callable[[Run], None]) -> None:
    """The lab's sidebar: the knobs and workload (or, in a replay, the replay's), then sharing."""
    if replaying(run):
        replay_sidebar(run)
    else:
        live_sidebar(run)
    panel(run)

