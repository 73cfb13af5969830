"""What every page draws with: the lab's CSS, a chart, a request's colour chip, prose with its terms
linked to the glossary, the queued messages."""

from __future__ import annotations

import contextlib
import html
import re

import streamlit as st

from engine.records import Event
from lab.lessons import LessonError
from lab.lessons.terms import GLOSSARY_PAGE, link_terms, load_terms
from lab.palette import request_color, text_color
from ui.session import session
from ui.widgets import presenter

PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}
# Event kinds grouped by tone, so the eye finds the trouble (preemption, blocking) first.
EVENT_TONES = {"arrived": "calm", "admitted": "good", "chunk_scheduled": "calm", "swapped_in": "good",
               "recompute_started": "warn", "finished": "good", "blocked": "warn", "preempted": "bad",
               "swapped_out": "bad", "rejected": "bad", "evicted": "warn", "idle": "calm", "you": "you"}
CSS = """
<style>
[data-testid="stMainBlockContainer"] {padding: 2.4rem 2rem 2rem 2rem}
[data-testid="stSidebarUserContent"] {padding-top: 1rem}
.lab-chip {display:inline-block; min-width:2.4em; padding:0 .4em; border-radius:.35em; font-weight:600;
           text-align:center; font-family:ui-monospace, monospace; font-size:.9em}
.lab-event {margin:.2em 0; line-height:1.45}
.lab-kind {display:inline-block; min-width:7.5em; padding:0 .45em; border-radius:.35em; font-size:.85em;
           font-weight:600; text-align:center}
.lab-calm {background:#EEF1F4; color:#38424C} .lab-good {background:#DDF2E8; color:#0B5A3A}
.lab-warn {background:#FCEFD6; color:#7A4B00} .lab-bad {background:#FBE0DA; color:#8E2410}
.lab-you {background:#E3EDF9; color:#0B4A86}
.lab-text {font-family:ui-monospace, monospace; white-space:pre-wrap; font-size:.92em}
.lab-text mark {background:#FFE08A; padding:0 .1em}
.st-key-motion, .st-key-step_keys_box {display: none}
.st-key-step_bar {container-type: inline-size}
@media (min-width: 641px) {@container (max-width: 600px) {.st-key-step_bar button p {position: absolute;
  width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap}}}
@media (max-width: 640px) {.st-key-step_bar [data-testid="stColumn"] {min-width: calc(50% - 0.5rem) !important}
  .st-key-ab_header {display: none}}
@media (min-width: 641px) {.st-key-ab_knobs [data-testid="stWidgetLabel"] {display: none}}
</style>
"""


def chip(request_id: str | None) -> str:
    if request_id is None:
        return '<span class="lab-chip" style="background:#E8E8E8">—</span>'
    color = request_color(request_id)  # an id can come from an uploaded run file: never trust it as HTML
    style = f"background:{color};color:{text_color(color)}"
    return f'<span class="lab-chip" style="{style}">{html.escape(request_id)}</span>'


def kind_badge(kind: str, label: str | None = None) -> str:
    # escaped: a loaded run file's event kind is a visitor's text (issue 32)
    return (f"<span class='lab-kind lab-{EVENT_TONES.get(kind, 'calm')}'>"
            f"{html.escape(label or kind.replace('_', ' '))}</span>")


def event_line(event: Event) -> str:
    """A scheduler decision as one line of HTML: its kind, the request's chip, and the rule in words."""
    return f"{kind_badge(event.kind)} {chip(event.request_id)} {html.escape(event.reason)}"


def chart(fig, key: str) -> None:
    st.plotly_chart(presenter.sized(fig), key=key, theme=None, config=PLOTLY_CONFIG)


def prose(text: str, page: str = GLOSSARY_PAGE) -> None:
    """Markdown whose first mention of each glossary term links to its entry. If the terms file
    cannot be read the text still shows, unlinked (the Glossary page says what is wrong)."""
    with contextlib.suppress(LessonError):
        text = link_terms(text, load_terms(), page)
    st.markdown(text)


def literal(text: str) -> str:
    """Text from a visitor (a link, a file) as Markdown inline code: shown as typed, never read as a
    link, an image or a directive (issue 32: a link's parameter name drew a clickable "log in again")."""
    flat = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    return f"{fence} {flat} {fence}"


# What can turn text into something else: a link or an image ([ ] ( ) !), an autolink (<), inline
# code (`), a formula ($), a directive such as :red[...] (needs its [). Emphasis (* and _) is
# left: it cannot fetch or link anything, and escaping it would litter knob names.
_MARKDOWN = re.compile(r"[\\`\[\]()<>!$]")
# A bare URL is linked after escapes are undone (GFM), so it can only be shown as code.
_BARE_URL = re.compile(r"\S*(?:://|www\.)\S*", re.I)


def plain(text: object) -> str:
    """Text that may quote a visitor's input (an error naming a file's bad value), escaped so it
    shows as typed and nothing in it becomes a link, an image or a formula."""
    parts = _BARE_URL.split(str(text))
    urls = [literal(url) for url in _BARE_URL.findall(str(text))] + [""]
    return "".join(_MARKDOWN.sub(lambda m: "\\" + m.group(0), part) + url for part, url in zip(parts, urls,
                                                                                              strict=True))


def flashes() -> None:
    """The messages callbacks queued for this draw."""
    for kind, message in session().take_messages():
        getattr(st, kind)(message)
