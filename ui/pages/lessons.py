"""Two reading pages: the list of lessons (each opens in the lab, its text beside the charts) and the glossary
(its terms, then its questions)."""

from __future__ import annotations

import streamlit as st

from lab.lessons import LessonError, load_glossary
from lab.lessons.terms import load_terms
from ui.draw import plain, prose
from ui.pages import lesson as lesson_panel
from ui.session import lessons as all_lessons
from ui.session import readable_lessons, session

# The pages are prose: keep lines to a readable length even in the wide layout.
READABLE = [2.2, 1]


def catalogue(lab: st.Page) -> None:
    """Every lesson with its opening lines, its questions and the student's score; a click opens it in `lab`."""
    body, _ = st.columns(READABLE)
    with body:
        st.title("Lessons")
        st.markdown("Each lesson runs a real engine beside its text. Before some steps it asks what the scheduler "
                    "will do; **lock in** a prediction and the step runs, then the engine's own record grades it.")
        st.markdown("**The learning path.** Lessons 1 to 8 teach the loop's rules in engine steps; 9 to 12 price "
                    "them on a GPU and put them under real load. Each card says what it builds on and about how "
                    "long it takes. Your answers are kept for this browser session, and the lab's link remembers which "
                    "lessons you finished (`done=`), so opening it again later shows your path. Lessons on a fleet of "
                    "engines behind a router (from 13) open on the **A fleet of engines** page, from its sidebar.")
        try:
            lessons = all_lessons()
        except LessonError as exc:
            st.error(f"The lessons cannot be read: {plain(exc)}", icon=":material/error:")
            return
        for n, lesson in enumerate(lessons.values(), 1):
            v = session().visit(lesson.id)
            right, answered = v.progress.score()
            with st.container(border=True, key=f"card_{lesson.id}"):
                text, action = st.columns([4, 1], vertical_alignment="center")
                text.markdown(f"#### {n}. {lesson.title}")
                text.markdown(lesson.sections[0].body.split("\n\n")[0])
                facts = [f"about {lesson.minutes} min"]
                facts += [f"builds on {', '.join(str(n) for n in lesson.needs)}"] if lesson.needs else []
                facts += [f"{len(lesson.checkpoints)} questions"]
                facts += [f"variants: {', '.join(x.name for x in lesson.variants)}"] if lesson.variants else []
                facts += ["a tuning challenge"] if lesson.challenge else []
                if v.complete(lesson):
                    facts.append(f":material/check_circle: done, {right} / {answered} right" if answered else
                                 ":material/check_circle: done in an earlier session")
                elif answered:
                    facts.append(f"in progress: {answered} of {len(lesson.checkpoints)} answered, {right} right")
                text.caption(" · ".join(facts))
                started = v.run is not None or session().lesson_id == lesson.id
                if action.button("Continue" if started else "Start", key=f"start_{lesson.id}", type="primary",
                                 icon=":material/school:", width="stretch"):
                    try:
                        lesson_panel.open_lesson(lesson.id)
                    except ValueError as exc:
                        st.error(f"Lesson {n} could not open: {plain(exc)}", icon=":material/error:")
                    else:
                        st.switch_page(lab)


def glossary() -> None:
    """The terms the lessons use, one definition each, then the questions people ask most. Lesson
    text links each term's first mention to its entry here (``#anchor``)."""
    body, _ = st.columns(READABLE)
    with body:
        st.title("Glossary")
        try:
            terms, sections = load_terms(), load_glossary()
        except (LessonError, OSError) as exc:
            st.error(f"The glossary cannot be read: {plain(exc)}", icon=":material/error:")
            return
        titles = {lesson.number: lesson.title for lesson in readable_lessons().values()}
        st.markdown("## Terms")
        for term in terms:
            st.subheader(term.name, anchor=term.anchor)
            st.markdown(term.meaning)
            if term.lesson in titles:
                st.caption(f"Watch it in lesson {term.lesson}: {titles[term.lesson]}.")
        st.markdown("## Questions")
        for section in sections:
            if section.title:
                st.markdown(f"### {section.title}")
            prose(section.body, page="")
