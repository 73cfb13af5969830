"""Everything the user turns or clicks: the step bar, the engine knobs and the workload panel.

Widgets act through callbacks, which run before the page is drawn, so the page
always shows the run after the click. Each callback calls one Run method; a
ValueError from it becomes a message and the run stays as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import streamlit as st

from engine.config import (
    ADMISSION_RESERVES,
    DEVICES,
    DTYPES,
    ENGINE_PRESETS,
    KNOB_HELP,
    KV_ALLOCATIONS,
    PREEMPTION_MODES,
    SCHEDULING_POLICIES,
    STEP_ORDERS,
    VICTIM_RULES,
)
from engine.workload import (
    PRESETS,
    GeneratorSpec,
    WorkloadItem,
    dump_workload,
    generate_workload,
    parse_workload,
)
from lab.scenario import NO_WORKLOAD
from lab.state import Run, exclusive, flash, session_run

T = TypeVar("T")
FORMAT_OF_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}
# Steps asked for -> steps allowed now: a page may hold the run short of a step (a lesson's question).
Hold = Callable[[Run, int], int]


@dataclass(frozen=True)
class Knob:
    """How one EngineConfig field is shown: an int/float range, a toggle, a choice or free text."""

    name: str
    kind: str  # 'int', 'float', 'bool', 'choice' or 'text'
    low: float = 0
    high: float = 0
    step: float = 1
    choices: tuple[str, ...] = ()


# title -> (what a change does, the knobs)
GROUPS: dict[str, tuple[str, tuple[Knob, ...]]] = {
    "Scheduler (live)": ("A change applies from the next step and is kept in the run's history. An engine "
                         "preset sets the rules below it together; change any of them after it.", (
        Knob("engine_preset", "choice", choices=ENGINE_PRESETS),
        Knob("max_num_batched_tokens", "int", 1, 8192, 16),
        Knob("max_num_seqs", "int", 1, 256),
        Knob("enable_chunked_prefill", "bool"),
        Knob("long_prefill_token_threshold", "int", 0, 8192, 8),
        Knob("step_order", "choice", choices=STEP_ORDERS),
        Knob("scheduling_policy", "choice", choices=SCHEDULING_POLICIES),
        Knob("preemption_mode", "choice", choices=PREEMPTION_MODES),
        Knob("victim_rule", "choice", choices=VICTIM_RULES),
        Knob("watermark", "float", 0.0, 0.9, 0.01),
        Knob("preempt_on_admission", "bool"),
        Knob("admission_reserve", "choice", choices=ADMISSION_RESERVES),
    )),
    "KV cache (restarts the run)": ("These shape the KV pool: a change restarts the run at step 0.", (
        Knob("block_size", "int", 1, 256),
        Knob("num_gpu_blocks", "int", 1, 2048, 4),
        Knob("num_cpu_blocks", "int", 0, 2048, 4),
        Knob("enable_prefix_caching", "bool"),
        Knob("kv_allocation", "choice", choices=KV_ALLOCATIONS),
    )),
    "Model and engine (restarts the run)": ("A change restarts the run at step 0. max_model_len 0: the model's "
                                            "limit.", (
        Knob("model", "text"),
        Knob("device", "choice", choices=DEVICES),
        Knob("dtype", "choice", choices=DTYPES),
        Knob("seed", "int", 0, 2**31 - 1),
        Knob("max_model_len", "int", 0, 1_000_000, 64),  # 0 stands for None: the model's own limit
    )),
}


def _key(name: str) -> str:
    return f"knob_{name}"


def _to_widget(name: str, value: object) -> object:
    return value or 0 if name == "max_model_len" else value


def _from_widget(name: str, value: object) -> object:
    return value or None if name == "max_model_len" else value


# ---- knobs ----------------------------------------------------------------------------------


@exclusive
def _on_knob(name: str) -> None:
    run = session_run()
    value = _from_widget(name, st.session_state[_key(name)])
    kept = len(run.records)
    try:
        restarted = run.set_knobs(**{name: value})
    except ValueError as exc:
        flash("error", f"**{name} = {value!r}** was not applied: {exc}. The run continues unchanged.")
        return
    if restarted:
        flash("info", f"**{name} = {value!r}**: this knob shapes the model or the KV pool, so the run restarted "
                      "at step 0 with the same workload.")
        return
    dropped = kept - len(run.records)
    flash("success", f"**{name} = {value!r}** applies from step {run.next_step} on."
          + (f" The {dropped} later step(s) were dropped: the run branches here." if dropped else ""))


def _sync_knob_widgets(run: Run) -> None:
    """Show the knobs the next step will use (they move with time travel and revert after an error)."""
    config = run.config_next()
    for name, value in config.to_dict().items():
        st.session_state[_key(name)] = _to_widget(name, value)
    st.session_state.knobs_shown = config  # the live views compare against it after time travel


# Every knob by name, for pages that show some of them (the A/B page).
KNOBS = {knob.name: knob for _, knobs in GROUPS.values() for knob in knobs}


def knob_widget(knob: Knob, key: str | None = None, **extra) -> None:
    """One knob's widget. Without a key it is the lab's own, applied on change; with one, a plain
    input (e.g. inside a form) whose value the caller reads from st.session_state[key]."""
    args = dict(key=key, help=KNOB_HELP[knob.name], **extra) if key else \
        dict(key=_key(knob.name), help=KNOB_HELP[knob.name], on_change=_on_knob, args=(knob.name,))
    label = knob.name
    if knob.kind == "int":
        st.number_input(label, min_value=int(knob.low), max_value=int(knob.high), step=int(knob.step), **args)
    elif knob.kind == "float":
        st.slider(label, min_value=float(knob.low), max_value=float(knob.high), step=float(knob.step), **args)
    elif knob.kind == "bool":
        st.toggle(label, **args)
    elif knob.kind == "choice":
        st.selectbox(label, knob.choices, **args)
    else:
        st.text_input(label, **args)


def knobs_panel(run: Run) -> None:
    _sync_knob_widgets(run)
    for i, (title, (note, knobs)) in enumerate(GROUPS.items()):
        with st.expander(title, expanded=i == 0):
            st.caption(note)
            for knob in knobs:
                knob_widget(knob)


# ---- workload -------------------------------------------------------------------------------


@exclusive
def _load_workload(items: list[WorkloadItem], label: str, source: str | GeneratorSpec) -> None:
    """Start again at step 0 on a new workload, under the knobs now shown. source (a preset name, a
    generator spec or NO_WORKLOAD) is what a share link names instead of listing the requests."""
    run = session_run()
    try:
        run.reset(run.config_next(), items)
    except ValueError as exc:
        flash("error", f"The {label} could not be loaded: {exc}. The current run is kept.")
        return
    st.session_state.workload_label = label
    st.session_state.workload_source = source
    flash("success", f"Loaded the {label} ({len(items)} requests); the run restarted at step 0.")


def _on_preset() -> None:
    name = st.session_state.preset
    _load_workload(PRESETS[name](), f"preset {name}", name)


def _on_generate() -> None:
    s = st.session_state
    try:
        spec = GeneratorSpec(seed=s.gen_seed, num_requests=s.gen_requests, arrival_rate=s.gen_rate,
                             prompt_tokens=s.gen_prompt, output_tokens=s.gen_output, priorities=s.gen_priorities)
    except ValueError as exc:
        flash("error", f"The generator settings are not valid: {exc}. The current run is kept.")
        return
    _load_workload(generate_workload(spec), f"generated workload (seed {spec.seed})", spec)


@exclusive
def _on_add_request() -> None:
    s = st.session_state
    run = session_run()
    try:
        item = WorkloadItem(s.add_prompt, max_tokens=s.add_max_tokens, priority=s.add_priority,
                            arrival_step=s.add_arrival, temperature=s.add_temperature)
        request_id = run.add_request(item)
    except ValueError as exc:
        flash("error", f"The request was not added: {exc}. The run continues unchanged.")
        return
    flash("success", f"Added **{request_id}**; it arrives at step {max(item.arrival_step, run.next_step)}.")


def read_upload(key: str, parse: Callable[[str], T]) -> T | None:
    """The file in uploader `key`, parsed. None if there is none, or if it is not UTF-8 text or
    parse raises ValueError: then a message names the file and what is wrong."""
    upload = st.session_state[key]
    if upload is None:
        return None
    try:
        return parse(upload.getvalue().decode("utf-8"))
    except UnicodeDecodeError:
        flash("error", f"**{upload.name}** is not UTF-8 text. The current run is kept.")
    except ValueError as exc:
        flash("error", f"**{upload.name}**, {exc}. The current run is kept.")
    return None


def _on_upload() -> None:
    upload = st.session_state.upload
    if upload is None:
        return
    fmt = FORMAT_OF_SUFFIX.get(Path(upload.name).suffix.lower())
    if fmt is None:
        flash("error", f"**{upload.name}**: the file name must end in .jsonl or .csv. The current run is kept.")
        return
    items = read_upload("upload", lambda text: parse_workload(text, fmt))
    if items is not None:
        _load_workload(items, f"file {upload.name}", NO_WORKLOAD)


def _presets() -> None:
    st.selectbox("Preset", list(PRESETS), key="preset", help="A ready-made workload; each shows one behaviour.",
                 format_func=lambda n: n.replace("_", " "))
    st.caption(PRESETS[st.session_state.preset].__doc__.split("\n\n")[0].replace("\n", " "))
    st.button("Load preset", on_click=_on_preset, key="load_preset", width="stretch")


def _generator() -> None:
    with st.form("generator", border=False):
        spec = GeneratorSpec()
        st.number_input("seed", 0, 2**31 - 1, spec.seed, key="gen_seed", help="Same seed, same workload.")
        st.number_input("requests", 1, 500, spec.num_requests, key="gen_requests")
        st.number_input("arrivals per step", 0.01, 100.0, spec.arrival_rate, 0.25, key="gen_rate",
                        help="Mean of a Poisson arrival process, per engine step.")
        st.slider("prompt tokens", 1, 480, spec.prompt_tokens, key="gen_prompt", help="Uniform range (approximate).")
        st.slider("output tokens", 1, 256, spec.output_tokens, key="gen_output", help="Uniform range.")
        st.number_input("priority levels", 1, 10, spec.priorities, key="gen_priorities",
                        help="Requests draw a priority from 0 (served first) to levels-1.")
        st.form_submit_button("Generate", on_click=_on_generate, width="stretch")


def _add_request() -> None:
    with st.form("add_request", border=False, clear_on_submit=False):
        st.text_area("prompt", "ROMEO:\nWhat say you, friar?", key="add_prompt", height=80)
        st.number_input("max tokens", 1, 512, 24, key="add_max_tokens")
        st.number_input("priority", -100, 100, 0, key="add_priority", help="Lower is served first under 'priority'.")
        st.number_input("arrival step", 0, 100_000, 0, key="add_arrival",
                        help="It joins the waiting queue at this step, or at the next step if that is later.")
        st.number_input("temperature", 0.0, 5.0, 0.0, 0.1, key="add_temperature", help="0: greedy.")
        st.form_submit_button("Add request", on_click=_on_add_request, width="stretch")


def _files(run: Run) -> None:
    st.file_uploader("Upload a workload (.jsonl or .csv)", type=["jsonl", "ndjson", "json", "csv"], key="upload",
                     on_change=_on_upload, help="Fields: prompt, max_tokens, priority, arrival_step, temperature, "
                     "ignore_eos. A bad line is named and nothing is loaded.")
    items = run.items()
    left, right = st.columns(2)
    left.download_button("⬇ JSONL", dump_workload(items, "jsonl"), "workload.jsonl", "application/jsonl",
                         on_click="ignore", key="download_jsonl", width="stretch")
    right.download_button("⬇ CSV", dump_workload(items, "csv"), "workload.csv", "text/csv",
                          on_click="ignore", key="download_csv", width="stretch")


def workload_panel(run: Run) -> None:
    st.caption(f"**{st.session_state.get('workload_label', 'workload')}** · {len(run.items())} requests")
    with st.expander("Presets", expanded=True):
        _presets()
    with st.expander("Random workload"):
        _generator()
    with st.expander("Add one request"):
        _add_request()
    with st.expander("Upload / download"):
        _files(run)


def sidebar(run: Run) -> None:
    with st.sidebar:
        st.markdown("### :material/neurology: Scheduler Loop Lab")
        st.header("Knobs", divider="gray")
        knobs_panel(run)
        st.header("Workload", divider="gray")
        workload_panel(run)


# ---- the step bar ---------------------------------------------------------------------------


@exclusive
def _on_step(n: int | None = None, hold: Hold | None = None) -> None:
    run = session_run()
    n = n or st.session_state.run_n
    if hold is not None:
        n = hold(run, n)
    if n:  # Run.step(0) would still branch a past step
        run.step(n)


@exclusive
def _on_back() -> None:
    session_run().back()


@exclusive
def _on_reset() -> None:
    run = session_run()
    run.reset(run.config_next(), run.items())
    st.session_state.playing = False
    flash("info", "Reset: back to step 0 with the knobs and workload shown.")


def _on_play() -> None:
    st.session_state.playing = not st.session_state.get("playing", False)


def step_bar(run: Run, hold: Hold | None = None) -> None:
    """Back, Step, Run N, Play/Pause with its speed, and Reset, in one row above the views.
    `hold` may cut a Step or Run short (a lesson does, before its questions)."""
    playing = st.session_state.get("playing", False)
    done = run.done
    # A small gap leaves the labels room on a laptop beside the sidebar; narrower still, the
    # buttons show their icons only (views.CSS): the label is hidden from sight but still names
    # the button for a screen reader, and the tooltip stays.
    cols = st.container(key="step_bar").columns([1.1, 1.05, 1, 0.7, 1.05, 1.2, 1.1], vertical_alignment="bottom",
                                                gap="xsmall")
    cols[0].button("Back", icon=":material/skip_previous:", key="back", on_click=_on_back,
                   disabled=run.cursor < 0 or playing, width="stretch",
                   help="Show the previous step (nothing is re-run).")
    cols[1].button("Step", icon=":material/skip_next:", key="step", on_click=_on_step, args=(1, hold), type="primary",
                   disabled=done or playing, width="stretch",
                   help="Run one scheduler step. From a past step, the run branches there.")
    cols[2].button("Run", icon=":material/fast_forward:", key="run_steps", on_click=_on_step, args=(None, hold),
                   disabled=done or playing, width="stretch",
                   help="Run the number of steps on the right (stops early when every request has finished).")
    cols[3].number_input("steps", 1, 1000, 10, key="run_n", label_visibility="collapsed")
    cols[4].button("Pause" if playing else "Play", icon=":material/pause:" if playing else ":material/play_arrow:",
                   key="play", on_click=_on_play, disabled=done and not playing, width="stretch",
                   help="Step automatically at the speed on the right.")
    cols[5].slider("steps / s", 0.5, 8.0, 2.0, 0.5, key="speed", label_visibility="collapsed",
                   format="%.1f steps/s", help="Auto-play speed, steps per second.")
    cols[6].button("Reset", icon=":material/restart_alt:", key="reset", on_click=_on_reset, width="stretch",
                   help="Start again at step 0 with the knobs and workload shown.")
