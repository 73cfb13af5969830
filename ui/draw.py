"""What every page draws with: the lab's CSS, a chart, a request's colour chip, prose with its terms
linked to the glossary, the queued messages."""

from __future__ import annotations

import contextlib
import re

import streamlit as st

from lab import markup
from lab.charts import fast
from lab.lessons import LessonError
from lab.lessons.terms import GLOSSARY_PAGE, link_terms, load_terms
from ui.session import session
from ui.widgets import presenter

PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}
CSS = """
<style>
""" + markup.CSS + """[data-testid="stMainBlockContainer"] {padding: 2.4rem 2rem 2rem 2rem}
[data-testid="stSidebarUserContent"] {padding-top: 1rem}
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


def chart(fig, key: str) -> None:
    st.plotly_chart(fast.handed(presenter.sized(fig)), key=key, theme=None, config=PLOTLY_CONFIG)


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
