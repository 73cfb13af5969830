"""The time-travel slider under a step bar: any recorded step (or fleet event) shown again, nothing re-run."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ui.session import exclusive, session


def scrubber_key(prefix: str, length: int, keys_applied: int) -> str:
    """A new slider for each length of the history and each key press applied. A step or a Back
    taken while a redraw is cut short (fast key presses do it) leaves the page holding the
    slider's old position, which Streamlit then reports as a move; under one key it took the run
    back to where it was (four fast ← from step 4 ended at 1 to 3, two runs in six). Auto-play,
    which grows the history under the slider, made the same report and stopped itself. Now a report
    from a slider drawn before the latest step or press is known stale and ignored; the slider's
    own moves keep its key, so it keeps the keyboard focus while you scrub."""
    return f"{prefix}_{length}_{keys_applied}"


@exclusive
def _on_scrub(prefix: str, key: str, length: Callable[[], int], seek: Callable[[int], None]) -> None:
    if key == scrubber_key(prefix, length(), session().keys_applied):  # else a report from a redraw cut short
        seek(session().widget(key))


def scrubber(prefix: str, length: Callable[[], int], cursor: int, seek: Callable[[int], None], noun: str,
             disabled: bool, help: str) -> None:
    """A slider over the `length()` records so far (-1: the start), at `cursor`; a move calls seek."""
    n = length()
    if not n:
        return
    key = scrubber_key(prefix, n, session().keys_applied)
    session().set_widget(key, cursor)
    st.select_slider(f"{noun.capitalize()} shown", options=list(range(-1, n)), key=key, on_change=_on_scrub,
                     args=(prefix, key, length, seek), format_func=lambda i: "start" if i < 0 else f"{noun} {i}",
                     label_visibility="collapsed", disabled=disabled, help=help)
