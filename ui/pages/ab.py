"""The A/B page: one workload under two configs, stepped in lock-step, then compared.

Both configs start from the lab's current knobs, on the lab's workload or a preset picked
in the form; the form changes a few knobs on either side. lab.compare.ABRun runs the two engines; everything
drawn here comes from their StepRecords, with the lab's own chart builders, so a
request has the same colour on both sides.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext

import pandas as pd
import streamlit as st

from engine import EngineConfig, StepRecord
from engine.knobs import AB_KNOBS, KNOB
from engine.presets import PRESET_RULES
from engine.workload import WorkloadSource
from lab.budgets import heavy_job
from lab.charts import blocks, queues
from lab.charts.style import layout
from lab.compare import LABELS, ABRun, diff_table, kv_usage_figure, latency_ecdf, throughput_figure
from ui.draw import CSS, chart, flashes, plain
from ui.session import exclusive, session
from ui.widgets import presenter
from ui.widgets.knobs import knob_widget
from ui.widgets.workload import page_workload, page_workload_box

WORKLOAD_KEY = "ab_workload"


def _key(side: str, knob: str) -> str:
    return f"ab_{side}_{knob}"


# ---- configs ------------------------------------------------------------------------------------


def _fill_form(configs: tuple[EngineConfig, EngineConfig]) -> None:
    for side, config in zip(LABELS, configs, strict=True):
        for knob in AB_KNOBS:
            session().set_widget(_key(side, knob), getattr(config, knob))


def _side_config(base: EngineConfig, side: str, was: EngineConfig) -> tuple[EngineConfig, list[str]]:
    """The lab's config with this side's knobs: those it ran with (was), then the ones changed in the
    form since, applied as the sidebar applies them, so a new engine_preset brings its rules unless a
    rule was changed too (issue 31: choosing only a preset for B changed nothing, the form pinned the
    old preset's rules). Returns the config and the rules the preset set; ValueError names a bad knob."""
    form = {knob: session().widget(_key(side, knob)) for knob in AB_KNOBS}
    changed = {knob: value for knob, value in form.items() if value != getattr(was, knob)}
    config = dataclasses.replace(base, **{knob: getattr(was, knob) for knob in AB_KNOBS}).with_changes(**changed)
    preset = PRESET_RULES.get(changed.get("engine_preset"), {})
    return config, [f"{knob} = {getattr(config, knob)}" for knob in preset
                    if knob not in changed and getattr(config, knob) != getattr(was, knob)]


@exclusive
def _on_start() -> None:
    s = session()
    base = s.run.config_next()
    configs, notes = [], []
    for i, side in enumerate(LABELS):
        try:
            config, set_by_preset = _side_config(base, side, s.ab_configs[i] if s.ab_configs else base)
        except ValueError as exc:
            s.flash("error", f"**Config {side}** is not valid: {plain(exc)}. The comparison on screen is kept.")
            return
        configs.append(config)
        if set_by_preset:
            notes.append(f"**{side}**: `engine_preset = {config.engine_preset}` set its rules: "
                         + ", ".join(f"`{rule}`" for rule in set_by_preset))
    label, workload = page_workload(WORKLOAD_KEY)
    try:
        s.ab = ABRun(*configs, workload.items() if isinstance(workload, WorkloadSource) else workload)
    except ValueError as exc:
        s.flash("error", f"The engines could not start: {plain(exc)}. The comparison on screen is kept.")
        return
    s.ab_configs, s.ab_workload = tuple(configs), label
    _fill_form(s.ab_configs)  # the form shows what runs, the rules a preset set included
    if notes:
        s.flash("info", "\n\n".join(notes))


def _on_from_lab() -> None:
    config = session().run.config_next()
    _fill_form((config, config))


def _differences(configs: tuple[EngineConfig, EngineConfig]) -> dict[str, tuple]:
    a, b = (c.to_dict() for c in configs)
    return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


def config_form(same: bool) -> None:
    """Both sides' knobs in one form, a row per knob: nothing restarts until Start. Open while A and B
    are the same (there is nothing to compare yet), folded away once they differ."""
    with st.expander("Configs A and B", expanded=same, icon=":material/tune:"), st.form("ab_form", border=False):
        # Each input is labelled with its side. On a wide screen the labels hide under one header
        # row; on a phone the columns stack, the header would be a list of three words, and each
        # input shows its own "A" or "B" instead (ui/draw.py's CSS).
        widths = [1.3, 1, 1]
        for col, text in zip(st.container(key="ab_header").columns(widths), ("knob", "A", "B"), strict=True):
            col.markdown(f"**{text}**")
        with st.container(key="ab_knobs"):
            for knob in AB_KNOBS:
                row = st.columns(widths, vertical_alignment="center")
                row[0].markdown(f"`{knob}`")
                for side, col in zip(LABELS, row[1:], strict=True):
                    with col:
                        knob_widget(KNOB[knob], key=_key(side, knob), label=side)
        left, right = st.columns(2)
        left.form_submit_button("Start A/B at step 0", type="primary", on_click=_on_start, width="stretch",
                                icon=":material/play_arrow:")
        right.form_submit_button("Both from the lab's knobs", on_click=_on_from_lab, width="stretch",
                                 icon=":material/sync:")
        page_workload_box(WORKLOAD_KEY)
        st.caption("Every other knob is the lab's. Nothing changes until **Start**.")


# ---- stepping -----------------------------------------------------------------------------------


@exclusive
def _on_step(n: int | None) -> None:
    """Step both runs; a long stretch takes one of the server's turns for heavy jobs (lab/budgets.py)."""
    ab: ABRun = session().ab

    def queued(place: int) -> None:  # drawn from the callback, so the browser shows it while the run waits
        st.info(f"The server is busy with other sweeps and A/B runs: yours is number {place} in line and starts "
                "when a turn frees up.", icon=":material/hourglass_top:")

    with heavy_job(on_wait=queued) if n is None or n > 50 else nullcontext():
        if n is None:
            ab.run()
        else:
            for _ in range(n):
                if ab.done:
                    break
                ab.step()


def step_bar(ab: ABRun) -> None:
    cols = st.columns([1, 1, 0.7, 1.2, 3], vertical_alignment="bottom")
    cols[0].button("Step both", key="ab_step", on_click=_on_step, args=(1,), type="primary", disabled=ab.done,
                   width="stretch", icon=":material/skip_next:")
    cols[1].button("Run", key="ab_run_n", on_click=lambda: _on_step(session().widget("ab_n")), disabled=ab.done,
                   width="stretch", icon=":material/fast_forward:", help="Step both the number of steps on the right.")
    cols[2].number_input("steps", 1, 1000, 10, key="ab_n", label_visibility="collapsed")
    cols[3].button("Run to the end", key="ab_end", on_click=_on_step, args=(None,), disabled=ab.done,
                   width="stretch", icon=":material/last_page:")


# ---- views --------------------------------------------------------------------------------------


def _status(records: list[StepRecord], done: bool) -> str:
    if not records:
        return "not started"
    last = records[-1]
    return f"finished after {len(records)} steps" if done else f"step {last.step}"


def side(label: str, records: list[StepRecord], done: bool, changed: dict[str, tuple], index: int) -> None:
    knobs = " · ".join(f"{k} = **{v[index]}**" for k, v in changed.items()) or "same knobs as the other side"
    st.markdown(f"### {label} <span style='font-size:.55em;color:#777'>{_status(records, done)}</span>",
                unsafe_allow_html=True)
    st.caption(knobs)
    if not records:
        return
    record = records[-1]
    b, s = record.budget, record.stats
    st.markdown(f":violet-badge[KV {b.gpu_blocks_used} / {b.num_gpu_blocks} pages] "
                f":green-badge[{s.num_requests_running} running] :gray-badge[{s.num_requests_waiting} waiting] "
                f":red-badge[{s.num_preemptions} preemptions] :gray-badge[{s.num_requests_finished} finished]")
    chart(queues.figure(records), f"ab_queues_{label}")
    # At half width the map's two subplot titles run into each other: they go above it as text.
    st.caption(" · ".join(blocks.titles(record)))
    pool = blocks.figure(record, records[-2] if len(records) > 1 else None)
    pool.layout.annotations = ()
    chart(pool.update_layout(margin_t=8), f"ab_blocks_{label}")


def comparison(ab: ABRun) -> None:
    """The metrics side by side: the table, then the distributions behind it."""
    metrics = ab.metrics()
    st.markdown("##### A vs B")
    measured = any(e.config.deployment is None for e in ab.engines)
    rows = pd.DataFrame(diff_table(*metrics, measured=measured))
    if measured:
        st.caption("Times here are this machine's wall clock, which varies from run to run: ms and tokens/s are "
                   "shown but not judged. Price both on a deployment to compare them.")
    # Tall enough for every row: an inner scroll hid the last ones (ITL, preemptions).
    st.dataframe(rows, hide_index=True, key="ab_diff", height=38 + 35 * len(rows), column_config={
        "A": st.column_config.NumberColumn(format="%.3g"), "B": st.column_config.NumberColumn(format="%.3g"),
        "delta": st.column_config.NumberColumn("B − A", format="%+.3g"),
        "change_pct": st.column_config.NumberColumn("change", format="%+.0f%%")})
    left, right = st.columns(2, gap="medium")
    with left:
        chart(layout(latency_ecdf(*metrics, key="ttft_steps"), "ab_ttft", 330, title_x=0), "ab_ttft")
        chart(layout(kv_usage_figure(*ab.records), "ab_kv", 330, title_x=0), "ab_kv")
    with right:
        chart(layout(latency_ecdf(*metrics, key="itl_steps"), "ab_itl", 330, title_x=0), "ab_itl")
        chart(layout(throughput_figure(*metrics), "ab_throughput", 330, title_x=0, margin_t=64), "ab_throughput")


def page() -> None:
    st.markdown(CSS, unsafe_allow_html=True)
    presenter.apply()
    st.markdown("## A/B: one workload, two configs")
    flashes()
    s = session()
    if s.ab_configs is None:  # first visit: both sides start as the lab's config
        _on_from_lab()
        _on_start()
        flashes()  # a lab config the engines cannot run is said at once
    elif not s.has_widget(_key(LABELS[0], AB_KNOBS[0])):  # Streamlit forgot the form on another page
        _fill_form(s.ab_configs)
    changed = _differences(s.ab_configs) if s.ab_configs is not None else {}
    config_form(same=not changed)
    ab = s.ab
    if ab is None:
        return
    if not changed:
        st.info("A and B have the same knobs, so their runs are identical. Change a knob on one side and Start.")
    step_bar(ab)
    st.caption(f"Both run **{s.ab_workload}**, {len(ab.workload)} requests.")
    cols = st.columns(2, gap="large")
    for i, (label, records, engine) in enumerate(zip(LABELS, ab.records, ab.engines, strict=True)):
        with cols[i]:
            side(label, records, not engine.has_unfinished_requests(), changed, i)
    if any(ab.records):
        comparison(ab)
    else:
        st.markdown("Press **Step both** to run the first step of both engines.")
