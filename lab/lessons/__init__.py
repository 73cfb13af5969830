"""Lessons: prose beside the live engine, and predict-then-reveal checkpoints it grades.

A lesson is two files in ``lessons/``: ``NN_slug.md`` (the text, cut into sections
at ``## `` headings) and ``NN_slug.toml`` (the scenario: engine knobs, workload,
hints on what to watch, checkpoints). A checkpoint never stores its answer. It names
a rule, such as "the requests preempted in this step", that reads the answer off the
engine's own StepRecord. So the lesson stays true to whatever the engine really does,
and an engine change that breaks a lesson's story fails ``tests/lab/test_lessons.py``
instead of misleading a student. The prose is held the same way: every number and
request id it states is a claim read off the run or a fact with its source
(``tests/lab/test_lesson_claims.py``).

The TOML file, field by field (a bad one raises LessonError naming file and field)::

    title = "..."              seed = 0              start_step = 0
    minutes = 10               needs = [1, 4]        (the learning path: time, lessons it builds on)
    [config]                   EngineConfig knobs, except model and seed
    [[requests]]               WorkloadItem fields (ids r0, r1, ... in this order), or instead
                               preset = "chat_mix", a [generator] table of GeneratorSpec fields,
                               or a [trace] table of TraceSpec fields (a real trace, by time)
    [[variants]]               name, label, config = {knob overrides}: the same workload, other knobs
    [[watch]]                  steps = [first, last], text, variant (optional)
    [[checkpoints]]            id, at_step, question, rule = {kind, request?, event?}, options?,
                               explain?, variant?, tolerance? (a fraction, for numbers; see RULES)
    [[claims]]                 says (a quote of the text), value (an expression read off the run, see
                               lab/lessons/claims.py) or held_by (a test), variant?, about?
    [[facts]]                  says, source: a number that is not about the run, and where it comes from
    [challenge]                knobs = [...], score = "goodput"?, [challenge.config]? (its own knobs),
                               [challenge.trace]? (its own workload), [[challenge.targets]] metric, stat?,
                               max and/or min

TOML is read with ``tomllib`` (Python 3.11+); on Python 3.10 the ``tomli`` backport
stands in for it, and without either, loading says so.
"""

from lab.lessons.challenge import ChallengeResult, ChallengeSpec, Target, TargetResult, score_challenge
from lab.lessons.loader import LESSONS_DIR, load_glossary, load_lesson, load_lessons, read_sections
from lab.lessons.model import Lesson, LessonError, Section, Variant, Watch, play_challenge, start_engine
from lab.lessons.progress import LessonProgress
from lab.lessons.rules import (
    BASE,
    RULES,
    Answer,
    AnswerError,
    Checkpoint,
    Grade,
    Rule,
    describe_batch,
    format_answer,
    grade,
    reasons_markdown,
    sort_ids,
)

__all__ = ["BASE", "LESSONS_DIR", "RULES", "Answer", "AnswerError", "ChallengeResult", "ChallengeSpec", "Checkpoint",
           "Grade", "Lesson", "LessonError", "LessonProgress", "Rule", "Section", "Target", "TargetResult", "Variant",
           "Watch", "describe_batch", "format_answer", "grade", "load_glossary", "load_lesson", "load_lessons",
           "play_challenge", "read_sections", "reasons_markdown", "score_challenge", "sort_ids", "start_engine"]
