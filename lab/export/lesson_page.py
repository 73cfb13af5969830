"""A lesson as one offline page: its text beside the player of its own recorded run, its questions
asked and graded in the page, its glossary terms linked to the glossary at the foot of the page, and
the student's answers kept in the browser (localStorage).

The page grades against the recorded run: each question's answer is read from the record of the
step it asks about by the lesson's own rule (lab/lessons/rules.py), and the explanation is the one
the lab gives (``grade``'s, after its first line). The page's script only compares the student's
answer with it, as ``grade`` does (lesson.js; a browser test holds the two to each other).
"""

from __future__ import annotations

import html

from markdown_it import MarkdownIt

from engine import load_model
from lab.export.player import MAX_STEPS, page_html, run_data
from lab.lessons.model import Lesson
from lab.lessons.rules import BASE, format_answer, grade, reasons_markdown
from lab.lessons.terms import link_terms, load_terms
from lab.run import Loader, Run

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")  # a lesson's own HTML is shown as text


def markdown(text: str) -> str:
    return _MARKDOWN.render(text)


def prose(text: str) -> str:
    """Lesson prose as HTML, its first mention of each glossary term linked to the page's glossary."""
    return markdown(link_terms(text, load_terms(), page=""))


def lesson_run(lesson: Lesson, load: Loader = load_model) -> Run:
    """The lesson's own scenario (its base knobs and workload) run to the end."""
    run = Run(lesson.engine_config(), lesson.workload.items(), load)
    while not run.done and len(run.records) < MAX_STEPS:  # a run not finished by then is cut there
        run.step(min(100, MAX_STEPS - len(run.records)))
    return run


def lesson_data(lesson: Lesson, run: Run) -> dict:
    """The questions (each with its answer read from the run and the lab's explanation), the watch
    notes before each step, and what only the live lab can do."""
    questions = []
    for c in lesson.checkpoints_for(BASE):
        if c.at_step >= len(run.records):
            continue  # a question about a step the run never reached (none of the shipped lessons has one)
        record = run.records[c.at_step]
        right = c.answer_from(record)
        explain = markdown(reasons_markdown(grade(c, record, right)))  # the lab's own reasons, after its verdict
        questions.append({"id": c.id, "at_step": c.at_step, "question": prose(c.question), "kind": c.kind,
                          "options": list(c.options), "tolerance": c.tolerance, "right": right,
                          "right_text": format_answer(right), "explain": explain})
    watch = [[prose(t) for t in lesson.watch_at(max(i, 0), BASE)] for i in range(-1, len(run.records))]
    return {"id": lesson.id, "questions": questions, "watch": watch}


def lesson_html(lesson: Lesson) -> str:
    """The lesson's column: its sections, where its score goes, what needs the live lab, the glossary."""
    sections = "".join(f"<section>{markdown('## ' + (s.title or 'Introduction'))}{prose(s.body)}</section>"
                       for s in lesson.sections)
    variants = ", ".join(html.escape(v.label) for v in lesson.variants)
    live = [name for name, present in (("variants (" + variants + ")", variants), ("challenge", lesson.challenge),
                                       ("rate-sweep question", lesson.knee)) if present]
    live_note = (f"<p class='p-box'>This page holds the lesson's own run. Its {', '.join(live)} run the engine "
                 "again, so they are in the live lab only.</p>") if live else ""
    terms = "".join(f"<dt id='{t.anchor}'>{html.escape(t.name)}</dt><dd>{markdown(t.meaning)}</dd>"
                    for t in load_terms())
    return (f"<aside id='p-lesson' aria-label='The lesson'><h2>Lesson {lesson.number}: {html.escape(lesson.title)}"
            f"</h2><p id='p-score'></p>{sections}{live_note}<section id='p-glossary'><h2>Glossary</h2><dl>{terms}</dl>"
            "</section></aside>")


def lesson_page(lesson: Lesson, load: Loader = load_model) -> str:
    """The whole page, opening where the lab opens the lesson (just before its start step)."""
    run = lesson_run(lesson, load)
    data = run_data(run, lesson.start_step - 1)
    data["lesson"] = lesson_data(lesson, run)
    about = (f"Lesson {lesson.number}, its run recorded step by step ({len(run.records)} steps). Predict each "
             "step before it runs; your answers stay in this browser.")
    return page_html(data, f"Scheduler Loop Lab: {lesson.title}", about, lesson_html(lesson))
