"""The workload panel: presets, a seeded generator, one request by hand, files in and out.

Loading a workload restarts the run at step 0 under the knobs shown, and records
its WorkloadSource in the session: that is what the label says and a link names.
The Sweep and A/B pages pick theirs in ``page_workload_box``, which leaves the lab's run alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from engine.hardware import SUGGESTED
from engine.limits import MAX_STEPS
from engine.workload import (
    PRESETS,
    GeneratorSpec,
    WorkloadItem,
    WorkloadSource,
    dump_workload,
    format_of,
    parse_workload,
)
from engine.workload.load import DEFAULT_SCALE, TRACES, RateSpec, TraceSpec
from lab.budgets import UPLOAD_BYTES
from ui.draw import literal, plain
from ui.session import exclusive, session

T = TypeVar("T")


@exclusive
def _load(source: WorkloadSource, **knobs) -> None:
    """Start again at step 0 on the source's workload, under the knobs now shown (and any given)."""
    s = session()
    items = source.items()
    try:
        s.run.reset(s.run.config_next().with_changes(**knobs), items)
    except ValueError as exc:
        s.flash("error", f"The {source.label} could not be loaded: {plain(exc)}. The current run is kept.")
        return
    s.source = source
    s.flash("success", f"Loaded the {source.label} ({len(items)} requests); the run restarted at step 0."
            + (f" Its requests arrive by time, so steps are priced as **{knobs['deployment']}**." if knobs else ""))


LOAD_KINDS = {**{name: f"trace {name}" for name in TRACES}, "rate": "drawn at a rate (gamma arrivals)"}


def _on_load_in_time() -> None:
    s = session()
    w = s.widget
    kind, rate = w("load_kind"), w("load_rate")
    try:
        spec = TraceSpec(kind, rate=rate or None, duration_s=w("load_duration"), length_scale=w("load_scale")) \
            if kind in TRACES else RateSpec(rate=rate or 4.0, cv=w("load_cv"), duration_s=w("load_duration"),
                                            length_scale=w("load_scale"), seed=w("load_seed"))
    except ValueError as exc:
        s.flash("error", f"The load settings are not valid: {plain(exc)}. The current run is kept.")
        return
    # Arrivals by time sit on a deployment's modeled clock: price the run on one if it has none.
    priced = {} if s.run.config_next().deployment else {"deployment": SUGGESTED[0]}
    _load(WorkloadSource(load=spec), **priced)


def _on_preset() -> None:
    _load(WorkloadSource(preset=session().widget("preset")))


def _on_generate() -> None:
    s = session()
    w = s.widget
    try:
        spec = GeneratorSpec(seed=w("gen_seed"), num_requests=w("gen_requests"), arrival_rate=w("gen_rate"),
                             prompt_tokens=w("gen_prompt"), output_tokens=w("gen_output"),
                             priorities=w("gen_priorities"))
    except ValueError as exc:
        s.flash("error", f"The generator settings are not valid: {plain(exc)}. The current run is kept.")
        return
    _load(WorkloadSource(generator=spec))


@exclusive
def _on_add_request() -> None:
    s = session()
    w = s.widget
    try:
        item = WorkloadItem(w("add_prompt"), max_tokens=w("add_max_tokens"), priority=w("add_priority"),
                            arrival_step=w("add_arrival"), temperature=w("add_temperature"))
        request_id = s.run.add_request(item)
    except ValueError as exc:
        s.flash("error", f"The request was not added: {plain(exc)}. The run continues unchanged.")
        return
    s.flash("success", f"Added **{request_id}**; it arrives at step {max(item.arrival_step, s.run.next_step)}.")


def file_name(upload) -> str:
    """An uploaded file's name as the lab shows it, in captions and labels alike: the characters
    Markdown or HTML could act on become '_' (a file named "[x](http://...)" would draw a link)."""
    return re.sub(r"[^\w .,+=@#%&'-]", "_", upload.name)[:80]


def read_upload(key: str, parse: Callable[[str], T]) -> T | None:
    """The file in uploader `key`, parsed. None if there is none, or if it is not UTF-8 text or
    parse raises ValueError: then a message names the file and what is wrong."""
    s = session()
    upload = s.widget(key)
    if upload is None:
        return None
    if upload.size > UPLOAD_BYTES:
        s.flash("error", f"{literal(upload.name)} is {upload.size / 2**20:.1f} MiB; a file for the lab may be at most "
                         f"{UPLOAD_BYTES / 2**20:.0f} MiB on this server. The current run is kept.")
        return None
    try:
        return parse(upload.getvalue().decode("utf-8"))
    except UnicodeDecodeError:
        s.flash("error", f"{literal(upload.name)} is not UTF-8 text. The current run is kept.")
    except ValueError as exc:
        s.flash("error", f"{literal(upload.name)}, {plain(exc)}. The current run is kept.")
    return None


def _on_upload() -> None:
    s = session()
    upload = s.widget("upload")
    if upload is None:
        return
    fmt = format_of(upload.name)
    if fmt is None:
        s.flash("error", f"{literal(upload.name)}: the file name must end in .jsonl or .csv. The current run is kept.")
        return
    items = read_upload("upload", lambda text: parse_workload(text, fmt))
    if items is not None:
        _load(WorkloadSource(requests=tuple(items), name=f"file {file_name(upload)}"))


def _presets() -> None:
    s = session()
    if s.preset_box_for != s.source:  # a new workload on screen: the box names its preset, or none
        s.set_widget("preset", s.source.preset)
        s.preset_box_for = s.source
    st.selectbox("Preset", list(PRESETS), key="preset", placeholder="not a preset: choose one to load",
                 help="A ready-made workload; each shows one behaviour.", format_func=lambda n: n.replace("_", " "))
    chosen = s.widget("preset")
    if chosen is not None:
        st.caption(PRESETS[chosen].__doc__.split("\n\n")[0].replace("\n", " "))
    st.button("Load preset", on_click=_on_preset, key="load_preset", width="stretch", disabled=chosen is None)


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


def _load_in_time() -> None:
    with st.form("load_in_time", border=False):
        st.selectbox("source", list(LOAD_KINDS), format_func=LOAD_KINDS.get, key="load_kind",
                     help="The Azure LLM inference trace 2023 (Microsoft, CC-BY 4.0): real lengths and arrival "
                          "times of conversation and code requests; or requests drawn at a rate.")
        st.number_input("requests / s", 0.0, 1000.0, 4.0, 0.5, key="load_rate",
                        help="A trace is rescaled to this average rate (0: its own timing).")
        st.number_input("seconds", 1.0, 3600.0, 30.0, 5.0, key="load_duration")
        st.number_input("length scale", 0.01, 1.0, DEFAULT_SCALE, 0.01, key="load_scale",
                        help="Real prompts (median about 1,000 tokens) are longer than the model's 512 positions: "
                             "lengths are scaled by this to fit, and the deployment prices them at full size.")
        st.number_input("burstiness (cv)", 0.05, 10.0, 1.0, 0.25, key="load_cv",
                        help="For drawn arrivals: the gaps' coefficient of variation (1: Poisson; more: bursts).")
        st.number_input("seed", 0, 2**31 - 1, 0, key="load_seed", help="For drawn arrivals and lengths.")
        st.form_submit_button("Load", on_click=_on_load_in_time, width="stretch")


def _add_request() -> None:
    with st.form("add_request", border=False, clear_on_submit=False):
        st.text_area("prompt", "ROMEO:\nWhat say you, friar?", key="add_prompt", height=80)
        st.number_input("max tokens", 1, 512, 24, key="add_max_tokens")
        st.number_input("priority", -100, 100, 0, key="add_priority", help="Lower is served first under 'priority'.")
        st.number_input("arrival step", 0, MAX_STEPS, 0, key="add_arrival",
                        help="It joins the waiting queue at this step, or at the next step if that is later.")
        st.number_input("temperature", 0.0, 5.0, 0.0, 0.1, key="add_temperature", help="0: greedy.")
        st.form_submit_button("Add request", on_click=_on_add_request, width="stretch")


def _files() -> None:
    st.file_uploader("Upload a workload (.jsonl or .csv)", type=["jsonl", "ndjson", "json", "csv"], key="upload",
                     on_change=_on_upload, help="Fields: prompt, max_tokens, priority, arrival_step, temperature, "
                     "ignore_eos. A bad line is named and nothing is loaded.")
    items = session().run.items()
    left, right = st.columns(2)
    left.download_button("⬇ JSONL", dump_workload(items, "jsonl"), "workload.jsonl", "application/jsonl",
                         on_click="ignore", key="download_jsonl", width="stretch")
    right.download_button("⬇ CSV", dump_workload(items, "csv"), "workload.csv", "text/csv",
                          on_click="ignore", key="download_csv", width="stretch")


def workload_panel() -> None:
    s = session()
    st.caption(f"**{s.source.label}** · {len(s.run.items())} requests")
    with st.expander("Presets", expanded=True):
        _presets()
    with st.expander("Random workload"):
        _generator()
    with st.expander("Load in time: a trace or a rate"):
        _load_in_time()
    with st.expander("Add one request"):
        _add_request()
    with st.expander("Upload / download"):
        _files()


LABS = "lab"  # the first choice in a page's Workload box: the lab's own workload, as the sidebar made it


def page_workload_box(key: str) -> None:
    """A Workload box for the Sweep and A/B pages: the lab's workload or a preset, chosen there
    without touching the lab's run (``page_workload`` reads it)."""
    s = session()
    lab = f"the lab's: {s.source.label}, {len(s.run.items())} requests"
    st.selectbox("Workload", [LABS, *PRESETS], key=key, format_func=lambda o: lab if o == LABS else f"preset {o}",
                 help="The lab's workload (change it in the lab's sidebar), or a preset, for this page only.")


def page_workload(key: str) -> tuple[str, WorkloadSource | list[WorkloadItem]]:
    """The choice in that box: its label, and what to run. A source where it can be redrawn (a load
    in time is redrawn per rate), else the lab's requests as they stand (those added by hand too)."""
    s = session()
    choice = s.widget(key)
    if choice in PRESETS:
        source = WorkloadSource(preset=choice)
        return source.label, source
    if s.source.load is not None and s.run.items() == s.source.items():
        return s.source.label, s.source
    return s.source.label, s.run.items()
