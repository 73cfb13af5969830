"""A lesson beside the live lab: its text, what to watch, its variants, its questions and its challenge.

A lesson's run is the session's run, built from the lesson's scenario; the Session
remembers which lesson it belongs to (``lesson_id``, which links carry too) and, per
lesson, a ``Visit``: the answers, the skipped questions, the section being read and
the run left there, so switching lessons loses nothing.

The panel never schedules and never knows an answer in advance. A question is asked
when the run's history ends just before its step; "Lock in" runs that one step on
the engine and grades the answer against the StepRecord it produced
(``lab.lessons.grade``). The challenge runs the workload to the end and scores the
engine's own metrics in a fresh run of its own (``play_challenge``).

    open_lesson(lesson_id)   make the session's run the lesson's (or the one left in it)   script.py
    follows(lesson, run)     the variant the run follows, or None and how it departs       script.py
    hold(run, n)             how many of n steps may run before an unanswered question      script.py
    panel()                  the side panel beside the lab's charts                         panel.py
"""

from ui.pages.lesson.panel import panel
from ui.pages.lesson.script import follows, hold, open_lesson

__all__ = ["follows", "hold", "open_lesson", "panel"]
