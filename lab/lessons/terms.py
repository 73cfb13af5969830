"""The glossary's terms, and links to them from the prose that uses them.

Each term is defined once, in lessons/terms.toml. The Glossary page lists them, and
wherever the lab shows prose (a lesson's section, the SLO line, the glossary's own
answers) the first mention of each term becomes a link to its entry, so a student who
meets "TTFT" mid-sentence can look it up. Links to another page open in a new tab
(Streamlit's Markdown does that), so the run on screen is never left behind.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from lab.lessons.loader import LESSONS_DIR
from lab.lessons.model import LessonError
from lab.lessons.toml_table import read_toml

GLOSSARY_PAGE = "glossary"  # the page's url_path (app.py)


@dataclass(frozen=True)
class Term:
    name: str
    match: tuple[str, ...]  # the words that count as a mention
    lesson: int  # where to watch it
    meaning: str

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")


@functools.cache
def load_terms(path: Path = LESSONS_DIR / "terms.toml") -> tuple[Term, ...]:
    """The terms, in the glossary's order; LessonError naming the file and the term if one is malformed."""
    terms = []
    for i, row in enumerate(read_toml(path).get("terms", [])):
        try:
            terms.append(Term(str(row["name"]), tuple(map(str, row["match"])), int(row["lesson"]),
                              " ".join(str(row["meaning"]).split())))
        except (KeyError, TypeError, ValueError) as exc:
            raise LessonError(f"lessons/{path.name}: term {i + 1} needs name, match, lesson and meaning ({exc})") \
                from None
    if len({t.anchor for t in terms}) != len(terms):
        raise LessonError(f"lessons/{path.name}: two terms have the same name")
    return tuple(terms)


# Where a link must not go: code, an existing link, Streamlit's :icon: and :color[...] directives,
# and heading lines.
_PROTECTED = re.compile(r"`[^`\n]*`|\[[^\]\n]*\]\([^)\n]*\)|:[\w/-]+(?::|\[[^\]\n]*\])|^#.*$", re.MULTILINE)


@functools.cache
def _mentions(terms: tuple[Term, ...]) -> tuple[re.Pattern, dict[str, Term]]:
    """One pattern for every term's words, longest first so "chunked prefill" wins over "prefill".
    A mention may start with a capital and add an ending ("Pages", "preempted")."""
    words = sorted((phrase for term in terms for phrase in term.match), key=len, reverse=True)
    alternatives = "|".join(f"[{w[0].upper()}{w[0].lower()}]{re.escape(w[1:])}" for w in words)
    of = {phrase.lower(): term for term in terms for phrase in term.match}
    return re.compile(rf"(?<![\w/.-])(?:{alternatives})\w*"), of


def _term_of(mention: str, of: dict[str, Term]) -> Term:
    lowered = mention.lower()
    return of[max((w for w in of if lowered.startswith(w)), key=len)]


def link_terms(text: str, terms: tuple[Term, ...], page: str = GLOSSARY_PAGE) -> str:
    """The text with the first mention of each term linked to its entry (`page#anchor`; give
    page="" for links within the glossary itself). Mentions in code, links and headings stay as
    they are."""
    pattern, of = _mentions(terms)
    linked: set[str] = set()

    def link(m: re.Match) -> str:
        term = _term_of(m.group(), of)
        if term.anchor in linked:
            return m.group()
        linked.add(term.anchor)
        return f"[{m.group()}]({page}#{term.anchor})"

    out, at = [], 0
    for protected in _PROTECTED.finditer(text):
        out += [pattern.sub(link, text[at:protected.start()]), protected.group()]
        at = protected.end()
    out.append(pattern.sub(link, text[at:]))
    return "".join(out)
