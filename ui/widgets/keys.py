"""The step bar's keys and clicks: → Step, ← Back, Space Play / Pause, and the Step, Back and Run
buttons, wherever the step bar is.

Each press must be exactly one action, however fast they come. A script that clicked the
buttons lost presses: Streamlit folds the clicks that arrive during one script run into a
single trigger, so five presses 200 ms apart made three steps, and three Step clicks 300 ms
apart from a past step made two (issue 31, bug 6). Here the page counts the presses and the
clicks instead, and sends the count with the latest ones, as a component's state (a value,
which Streamlit keeps whole when it folds reruns together); the server applies the presses
it has not applied yet, in order, each through its button's own callback (which refuses what the
disabled button would: no Step while playing or past the end).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import streamlit as st

from ui.session import exclusive, session

# KeyboardEvent.key -> the step bar action it stands for.
KEYS = {"ArrowRight": "step", "ArrowLeft": "back", " ": "play"}
# A step bar button's key -> its action: its clicks are counted by the page, not folded by Streamlit.
BUTTONS = {"step": "step", "back": "back", "run_steps": "run"}
# What the keys help says of each: the key as printed on it, and what it does.
HELP = {"ArrowRight": ("→", "Step: run one scheduler step"), "ArrowLeft": ("←", "Back: show the previous step"),
        " ": ("Space", "Play / Pause")}
RECENT = 64  # the presses sent each time: more than can pile up during one script run

# One listener per page, kept across redraws (a redraw hands it the current setStateValue). It
# ignores keys where there is no step bar (another page), and while the user types or drags a slider.
JS = """
export default function({ setStateValue, data }) {
  window.labKeys = window.labKeys || {count: 0, recent: [], send: null};
  const state = window.labKeys;
  state.send = setStateValue;
  if (state.listening) return;
  state.listening = true;
  const press = (name) => {
    state.count += 1;
    state.recent = [...state.recent, name].slice(-data.recent);
    state.send("presses", {count: state.count, recent: state.recent});
  };
  const action = (event) => {
    const name = data.keys[event.key];
    if (!name || event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return null;
    if (!document.querySelector(".st-key-step_bar")) return null;
    const target = event.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName)
                   || target.getAttribute("role") === "slider")) return null;
    return name;
  };
  document.addEventListener("keydown", (event) => {
    const name = action(event);
    if (!name) return;
    event.preventDefault();  // no page scroll, and Space does not also press a focused button
    event.stopPropagation();
    if (event.repeat) return;
    press(name);
  }, true);
  document.addEventListener("keyup", (event) => { if (action(event)) event.preventDefault(); }, true);
  document.addEventListener("click", (event) => {  // before Streamlit's own handler sees the click
    for (const [key, name] of Object.entries(data.buttons)) {
      const button = event.target.closest && event.target.closest(`.st-key-${key} button`);
      if (!button) continue;
      event.preventDefault();
      event.stopPropagation();
      if (!button.disabled) press(name);
      return;
    }
  }, true);
}
"""

_component = st.components.v2.component("lab_step_keys", js=JS)


@exclusive
def _on_presses(actions: dict[str, Callable[[], None]]) -> None:
    s = session()
    presses = (s.widget("step_keys") or {}).get("presses") or {}
    count, recent = int(presses.get("count", 0)), list(presses.get("recent", []))
    new = min(max(count - s.keys_applied, 0), len(recent))
    s.keys_applied = count - new
    for name in recent[len(recent) - new:]:
        actions[name]()
        s.keys_applied += 1  # one at a time: a callback cut short leaves the rest for the next


def keys_help() -> None:
    """The shortcuts, as a table, for the step bar's Keys popover."""
    rows = "\n".join(f"| {HELP[key][0]} | {HELP[key][1]} |" for key in KEYS)
    st.markdown(f"| Key | Does |\n|---|---|\n{rows}")
    st.caption("Anywhere the step bar is, presenter mode included; not while typing in a box or dragging a slider.")


def listen(actions: dict[str, Callable[[], None]]) -> None:
    """Mount the listener; `actions` are the step bar's callbacks, by the names in KEYS and BUTTONS."""
    # Hidden (its listeners are on the document): while a rerun mounts it, Streamlit draws a 40 px
    # skeleton in its place, which pushed the page down after a link opened at a step.
    with st.container(key="step_keys_box"):
        _component(key="step_keys", data={"keys": KEYS, "buttons": BUTTONS, "recent": RECENT},
                   default={"presses": None}, on_presses_change=functools.partial(_on_presses, actions))
