"""The glossary's terms: one definition each, linked from the prose that uses them."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lab.lessons import LessonError, load_glossary, load_lessons
from lab.lessons.terms import link_terms, load_terms

TERMS = load_terms()


def by_name(name: str):
    return next(t for t in TERMS if t.name == name)


def test_a_term_links_once_at_its_first_mention_whatever_its_ending_or_capital():
    text = "Prefills wait. A prefill chunk, then TTFT and ttft-ish SLOs; slow steps."
    assert link_terms(text, TERMS) == ("[Prefills](glossary#prefill) wait. A prefill chunk, then "
                                       "[TTFT](glossary#ttft) and ttft-ish [SLOs](glossary#slo); slow steps.")


def test_the_longest_words_win_and_code_links_directives_and_headings_stay_as_they_are():
    text = ("## The KV cache\n`KV cache` [KV cache](x) :material/swap_horiz: :red[preempted] "
            "chunked prefill, then a KV cache.")
    assert link_terms(text, TERMS, page="") == (
        "## The KV cache\n`KV cache` [KV cache](x) :material/swap_horiz: :red[preempted] "
        "[chunked prefill](#chunked-prefill), then a [KV cache](#kv-cache).")


@pytest.mark.parametrize("term", TERMS, ids=lambda t: t.anchor)
def test_every_term_is_linked_from_the_lesson_it_names(term):
    """A term's entry says where to watch it; that lesson's text must use it (outside code)."""
    lesson = next(x for x in load_lessons() if x.number == term.lesson)
    assert any(f"(glossary#{term.anchor})" in link_terms(s.body, TERMS) for s in lesson.sections), \
        f"lesson {term.lesson} never mentions {term.name}"


def test_a_malformed_terms_file_is_named(tmp_path):
    path = tmp_path / "terms.toml"
    path.write_text('[[terms]]\nname = "TTFT"\nlesson = 2\n')
    with pytest.raises(LessonError, match="terms.toml: term 1 needs name, match, lesson and meaning"):
        load_terms(path)
    path.write_text('[[terms]]\nname = "A b"\nmatch = ["a"]\nlesson = 1\nmeaning = "x"\n'
                    '[[terms]]\nname = "a-b"\nmatch = ["b"]\nlesson = 1\nmeaning = "y"\n')
    with pytest.raises(LessonError, match="two terms have the same name"):
        load_terms(path)


def _glossary_page() -> None:
    from ui.pages import lessons as lesson_page

    lesson_page.glossary()


def test_the_glossary_page_gives_every_term_an_entry_its_links_can_reach():
    at = AppTest.from_function(_glossary_page).run()
    assert not at.exception, at.exception
    headers = {h.value: h.proto.anchor for h in at.subheader}
    assert headers == {t.name: t.anchor for t in TERMS}
    shown = "\n".join(m.value for m in at.markdown)
    assert all(t.meaning in shown for t in TERMS)
    faq = load_glossary()[1]  # the questions' answers link their terms within the page
    assert link_terms(faq.body, TERMS, page="") in shown and "](#" in link_terms(faq.body, TERMS, page="")
    assert "Watch it in lesson 12: " in "\n".join(c.value for c in at.caption)
