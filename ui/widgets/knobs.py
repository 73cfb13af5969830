"""The engine's knobs as widgets, generated from the engine's own knob tables.

Which knobs are live (engine.config.LIVE_KNOBS), which words a choice takes
(KNOB_CHOICES), a knob's help (KNOB_HELP) and its type all come from the engine;
only the ranges a widget offers are the lab's. A new knob appears here by itself.

Widgets act through callbacks, which run before the page is drawn, so the page
always shows the run after the click. A ValueError from the run becomes a
message and the run stays as it was.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

import streamlit as st

from engine import EngineConfig
from engine.config import KNOB_CHOICES, KNOB_HELP, LIVE_KNOBS, SLO_KNOBS
from engine.hardware import SUGGESTED
from ui.session import default_knobs, exclusive, session


@dataclass(frozen=True)
class Knob:
    """How one EngineConfig field is shown: an int/float range, a toggle, a choice or free text."""

    name: str
    kind: str  # 'int', 'float', 'target' (a float or none), 'bool', 'choice', 'deployment' or 'text'
    low: float = 0
    high: float = 0
    step: float = 1
    choices: tuple[str, ...] = ()


# (low, high, step) of every number knob's widget. max_model_len 0 stands for None: the model's limit.
RANGES = {"seed": (0, 2**31 - 1, 1), "max_model_len": (0, 1_000_000, 64), "block_size": (1, 256, 1),
          "num_gpu_blocks": (1, 2048, 4), "num_cpu_blocks": (0, 2048, 4), "max_num_batched_tokens": (1, 8192, 16),
          "max_num_seqs": (1, 256, 1), "long_prefill_token_threshold": (0, 8192, 8), "watermark": (0.0, 0.9, 0.01),
          "slo_ttft_ms": (1.0, 1e6, 50.0), "slo_tpot_ms": (0.1, 1e5, 5.0), "slo_percentile": (1.0, 100.0, 1.0)}
MODEL_KNOBS = ("model", "device", "dtype", "seed", "max_model_len")  # what runs, rather than how it is scheduled
PRICING_KNOBS = ("deployment",)  # what a step is priced as


def _knob(field: dataclasses.Field) -> Knob:
    name, tp = field.name, typing.get_type_hints(EngineConfig)[field.name]
    if name == "deployment":
        return Knob(name, "deployment", choices=SUGGESTED)
    if name in KNOB_CHOICES:
        return Knob(name, "choice", choices=KNOB_CHOICES[name])
    if tp is bool:
        return Knob(name, "bool")
    if name in RANGES:
        kind = "int" if tp is int else "float" if tp is float else "target"  # float | None: a target or none
        return Knob(name, kind, *RANGES[name])
    return Knob(name, "text")


# Every knob by name, in the config's order.
KNOBS = {field.name: _knob(field) for field in dataclasses.fields(EngineConfig)}
# The scheduler's live rules, the preset leading them; the SLO knobs are live too, but judge rather than schedule.
_LIVE = sorted(LIVE_KNOBS - set(SLO_KNOBS), key=lambda k: (k != "engine_preset", list(KNOBS).index(k)))

# title -> (what a change does, the knobs)
GROUPS: dict[str, tuple[str, tuple[Knob, ...]]] = {
    "Scheduler (live)": ("A change applies from the next step and is kept in the run's history. An engine "
                         "preset sets the rules below it together; change any of them after it.",
                         tuple(KNOBS[k] for k in _LIVE)),
    "Service-level objectives (live)": ("What each request is judged by: its first token within the TTFT "
                                        "target, each later one within the TPOT target (in ms; empty: none). "
                                        "The metrics report attainment and goodput.",
                                        tuple(KNOBS[k] for k in SLO_KNOBS)),
    "Price steps as (restarts the run)": ("This machine's own wall time, or a model on a GPU: every step the "
                                          "engine runs is then priced on it (modeled, engine/hardware.py). "
                                          "Type any model@[N x]gpu[+link].", tuple(KNOBS[k] for k in PRICING_KNOBS)),
    "KV cache (restarts the run)": ("These shape the KV pool: a change restarts the run at step 0.",
                                    tuple(k for k in KNOBS.values() if k.name not in LIVE_KNOBS
                                          and k.name not in MODEL_KNOBS + PRICING_KNOBS)),
    "Model and engine (restarts the run)": ("A change restarts the run at step 0. max_model_len 0: the model's "
                                            "limit.", tuple(KNOBS[k] for k in MODEL_KNOBS)),
}


def _key(name: str) -> str:
    return f"knob_{name}"


def _to_widget(name: str, value: object) -> object:
    return value or 0 if name == "max_model_len" else value


def _from_widget(name: str, value: object) -> object:
    return value or None if name == "max_model_len" else value


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
    knob = KNOBS[name]
    # The boxes take any number (a box with limits only turns red, and the server never hears of it),
    # so the range is checked here, where the message can name it.
    if knob.kind in ("int", "target") and value is not None and not knob.low <= value <= knob.high:
        _refuse(name, value, f"it takes {knob.low:,g} to {knob.high:,g}")
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
    args = dict(key=key, help=KNOB_HELP[knob.name], **extra) if key else \
        dict(key=_key(knob.name), help=KNOB_HELP[knob.name], on_change=_on_knob, args=(knob.name,))
    label = label or knob.name
    if knob.kind == "int":
        st.number_input(f"{label} ({int(knob.low):,} to {int(knob.high):,})", step=int(knob.step), **args)
    elif knob.kind == "target":
        st.number_input(label, step=float(knob.step), placeholder="no target", **args)
    elif knob.kind == "float":
        st.slider(label, min_value=float(knob.low), max_value=float(knob.high), step=float(knob.step), **args)
    elif knob.kind == "bool":
        st.toggle(label, **args)
    elif knob.kind == "choice":
        st.selectbox(label, knob.choices, **args)
    elif knob.kind == "deployment":
        shown = session().widget(args["key"])  # a name typed earlier stays among the options
        options = (None, *knob.choices, *([shown] if shown not in (None, *knob.choices) else []))
        mine = "this machine (measured)"  # None: as an option, and as the placeholder a None value shows
        st.selectbox(label, options, accept_new_options=True, placeholder=mine, **args,
                     format_func=lambda name: mine if name is None else name)
    else:
        st.text_input(label, **args)


def knobs_panel() -> None:
    """Every knob, grouped by what a change does; they show the knobs the next step will use, so
    they move with time travel and revert after an error."""
    s = session()
    config = s.run.config_next()
    for name, value in config.to_dict().items():
        s.set_widget(_key(name), _to_widget(name, value))
    s.knobs_shown = config  # the live views compare against it after time travel
    for i, (title, (note, knobs)) in enumerate(GROUPS.items()):
        with st.expander(title, expanded=i == 0):
            st.caption(note)
            for knob in knobs:
                knob_widget(knob)
    differ = config != default_knobs(s.lesson_id)
    st.button("Restore default knobs", icon=":material/settings_backup_restore:", key="default_knobs",
              on_click=_on_default_knobs, disabled=not differ, width="stretch",
              help="Start again at step 0 with " + ("the lesson's" if s.lesson_id else "the lab's")
                   + " own knobs and the same workload.")
