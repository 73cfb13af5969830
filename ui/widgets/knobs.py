"""The engine's knobs as widgets, read from the engine's knob table (engine.knobs).

A knob's type, range, choices, help and whether it is live all come from its row;
only the group titles and notes here are the lab's. A new knob appears by itself.

Widgets act through callbacks, which run before the page is drawn, so the page
always shows the run after the click. A ValueError from the run becomes a
message and the run stays as it was.
"""

from __future__ import annotations

import streamlit as st

from engine.hardware import SUGGESTED
from engine.knobs import GROUPS, KNOB, KNOBS, Knob
from lab.budgets import model_label, offered_models
from ui.session import default_knobs, exclusive, session

# group -> (title, what a change does). The knobs come from the table, the scheduler's preset first.
GROUP_TEXT = {
    "scheduler": ("Scheduler (live)", "A change applies from the next step and is kept in the run's history. An "
                  "engine preset sets the rules below it together; change any of them after it. The queue limits "
                  "at 0: no limit."),
    "slo": ("Service-level objectives (live)", "What each request is judged by: its first token within the TTFT "
            "target, each later one within the TPOT target (in ms; empty: none). The metrics report attainment "
            "and goodput."),
    "pricing": ("Price steps as (restarts the run)", "This machine's own wall time, or a model on a GPU: every step "
                "the engine runs is then priced on it (modeled, engine/hardware.py). Type any "
                "model@[N x]gpu[+link]."),
    "kv": ("KV cache (restarts the run)", "These shape the KV pool: a change restarts the run at step 0."),
    "model": ("Model and engine (restarts the run)", "A change restarts the run at step 0. max_model_len 0: the "
              "model's limit."),
}
PANEL = {group: tuple(sorted((k for k in KNOBS if k.group == group), key=lambda k: k.name != "engine_preset"))
         for group in GROUPS}


def widget_kind(knob: Knob) -> str:
    """'int', 'float' (a slider), 'target' (a float or none), 'bool', 'choice', 'deployment' or 'model'."""
    if knob.name in ("deployment", "model"):
        return knob.name
    if knob.choices:
        return "choice"
    if knob.type is bool:
        return "bool"
    if knob.type is int:
        return "int"
    if knob.type is float:
        return "target" if knob.optional else "float"
    raise ValueError(f"knob {knob.name!r} has no widget")  # a new kind of knob needs one here


def _key(name: str) -> str:
    return f"knob_{name}"


def _none_is_zero(name: str) -> bool:
    """An optional integer's box shows None as 0 (max_model_len 0: the model's limit)."""
    return KNOB[name].optional and KNOB[name].type is int


def _to_widget(name: str, value: object) -> object:
    return value or 0 if _none_is_zero(name) else value


def _from_widget(name: str, value: object) -> object:
    return value or None if _none_is_zero(name) else value


def _refuse(name: str, value: object, why: str) -> None:
    """Put the box back to the value in force and say so: a box showing one value while the engine
    runs another would mislead."""
    s = session()
    in_force = getattr(s.run.config_next(), name)
    s.set_widget(_key(name), _to_widget(name, in_force))
    s.flash("error", f"**{name} = {value!r}** was not applied: {why}. Still in force: **{name} = {in_force!r}**; "
                     "the run continues unchanged.")


@exclusive
def _on_knob(name: str) -> None:
    s = session()
    run = s.run
    value = _from_widget(name, s.widget(_key(name)))
    # The boxes take any number (a box with limits only turns red, and the server never hears of it),
    # so the range is checked here, where the message can name it.
    if widget_kind(KNOB[name]) in ("int", "target") and not KNOB[name].accepts(value):
        _refuse(name, value, f"it takes {KNOB[name].allowed()}")
        return
    kept = len(run.records)
    try:
        restarted = run.set_knobs(**{name: value})
    except ValueError as exc:
        _refuse(name, value, str(exc))
        return
    if restarted:
        s.flash("info", f"**{name} = {value!r}**: this knob shapes the model or the KV pool, so the run restarted "
                        "at step 0 with the same workload.")
        return
    dropped = kept - len(run.records)
    s.flash("success", f"**{name} = {value!r}** applies from step {run.next_step} on."
            + (f" The {dropped} later step(s) were dropped: the run branches here." if dropped else ""))


@exclusive
def _on_default_knobs() -> None:
    s = session()
    s.run.reset(default_knobs(s.lesson_id), s.run.items())
    s.playing = False
    s.flash("info", "Default knobs restored: back to step 0 with " + ("the lesson's" if s.lesson_id else "the lab's")
            + " knobs and the same workload.")


def knob_widget(knob: Knob, key: str | None = None, label: str | None = None, **extra) -> None:
    """One knob's widget, labelled with its name unless `label` says otherwise. Without a key it
    is the lab's own, applied on change; with one, a plain input (e.g. inside a form) whose value
    the caller reads with Session.widget(key)."""
    args = dict(key=key, help=knob.help, **extra) if key else \
        dict(key=_key(knob.name), help=knob.help, on_change=_on_knob, args=(knob.name,))
    label = label or knob.name
    kind = widget_kind(knob)
    if kind == "int":
        low = 0 if _none_is_zero(knob.name) else int(knob.low)
        st.number_input(f"{label} ({low:,} to {int(knob.high):,})", step=int(knob.step), **args)
    elif kind == "target":
        st.number_input(label, step=float(knob.step), placeholder="no target", **args)
    elif kind == "float":  # the knob table's own closed range: a value the engine takes, the slider shows
        st.slider(label, min_value=float(knob.low), max_value=float(knob.high), step=float(knob.step), **args)
    elif kind == "bool":
        st.toggle(label, **args)
    elif kind == "choice":
        st.selectbox(label, knob.choices, **args)
    elif kind == "deployment":
        shown = session().widget(args["key"])  # a name typed earlier stays among the options
        options = (None, *SUGGESTED, *([shown] if shown not in (None, *SUGGESTED) else []))
        mine = "this machine (measured)"  # None: as an option, and as the placeholder a None value shows
        st.selectbox(label, options, accept_new_options=True, placeholder=mine, **args,
                     format_func=lambda name: mine if name is None else name)
    else:  # the model: one from the operator's list, never a path a visitor types (issue 32)
        st.selectbox(label, offered_models(), format_func=model_label, **args)


def knobs_panel() -> None:
    """Every knob, grouped by what a change does; they show the knobs the next step will use, so
    they move with time travel and revert after an error."""
    s = session()
    config = s.run.config_next()
    for name, value in config.to_dict().items():
        s.set_widget(_key(name), _to_widget(name, value))
    for i, (group, (title, note)) in enumerate(GROUP_TEXT.items()):
        with st.expander(title, expanded=i == 0):
            st.caption(note)
            for knob in PANEL[group]:
                knob_widget(knob)
    differ = config != default_knobs(s.lesson_id)
    st.button("Restore default knobs", icon=":material/settings_backup_restore:", key="default_knobs",
              on_click=_on_default_knobs, disabled=not differ, width="stretch",
              help="Start again at step 0 with " + ("the lesson's" if s.lesson_id else "the lab's")
                   + " own knobs and the same workload.")
