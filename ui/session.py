"""One browser session's state, in one object: the only code that touches ``st.session_state``.

Streamlit keeps two kinds of state per browser session: the widgets' values (under
their keys) and whatever the app stores beside them. ``Session`` holds the app's
(the run on screen, the lesson it belongs to, where its workload came from,
playback, the A/B and sweep results) and reads and writes the widgets' through
``widget`` and ``set_widget``. Pages and widgets get it from ``session()``; the
address bar is derived from it (ui/link.py).

The model weights are the one thing shared between sessions (``cached_load``,
read-only), and the lessons are read once per server (``lessons``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from engine import EngineConfig, LoadedModel, load_model
from engine.workload import WorkloadSource
from lab.budgets import check_offered
from lab.compare import ABRun
from lab.fleet.lessons import FleetLesson, load_fleet_lessons
from lab.fleet.run import FleetRun
from lab.lessons import Lesson, LessonError, LessonProgress, load_lessons
from lab.recording import Recording
from lab.run import History, Run, default_config
from ui import reaper
from ui.play_meter import PlayMeter

DEFAULT_SOURCE = WorkloadSource(preset="chats_and_speeches")  # the workload a new session starts on


@st.cache_resource(show_spinner="Loading the model (once per server)…")
def _load_once(name: str, device: str, dtype: str) -> LoadedModel:
    return load_model(name, device, dtype)


def cached_load(name: str, device: str, dtype: str) -> LoadedModel:
    """The loader every lab run is built with: only a model the operator offers (BudgetError names
    them), loaded once per server."""
    check_offered(name)
    return _load_once(name, device, dtype)


@st.cache_resource(show_spinner=False)
def lessons() -> dict[str, Lesson]:
    """Lesson id -> Lesson, in order; raises LessonError naming the bad file and field."""
    return {lesson.id: lesson for lesson in load_lessons()}


@st.cache_resource(show_spinner=False)
def fleet_lessons() -> dict[str, FleetLesson]:
    """The Fleet page's lessons (lessons/fleet/) by id; raises LessonError naming a bad file."""
    return {lesson.id: lesson for lesson in load_fleet_lessons()}


def readable_lessons() -> dict[str, Lesson]:
    """The lessons, or none if they cannot be read (the Lessons page says why)."""
    try:
        return lessons()
    except ValueError:
        return {}


def default_knobs(lesson_id: str | None) -> EngineConfig:
    """The knobs a run starts from: the lesson's, or the lab's defaults. Links are relative to them."""
    lesson = readable_lessons().get(lesson_id)
    defaults = default_config()
    return defaults if lesson is None else lesson.engine_config(model=defaults.model)


@dataclass
class Visit:
    """What the session keeps of one lesson while the student is elsewhere."""

    progress: LessonProgress
    skipped: set[str] = field(default_factory=set)  # question ids the student chose not to answer
    section: int = 0  # the section of the text on screen
    run: Run | None = None  # the run left in this lesson, resumed when the student comes back
    notice: str | None = None  # a message for the panel's next draw (a bad answer, a bad knob)
    done_before: bool = False  # finished in an earlier session, as the link it came back with says

    def complete(self, lesson: Lesson) -> bool:
        return self.done_before or self.progress.complete(lesson)


@dataclass
class Session:
    """Everything one browser session has: a plain object, so a test can read it directly."""

    _run: History | None = None  # built on first use (see run)
    source: WorkloadSource = DEFAULT_SOURCE  # where the run's workload came from: what a link names
    preset_box_for: WorkloadSource | None = None  # the source the sidebar's preset box was last set from
    lesson_id: str | None = None  # the lesson the run belongs to (a link carries it too)
    visits: dict[str, Visit] = field(default_factory=dict)  # lesson id -> what was left there
    playing: bool = False
    play_meter: PlayMeter = field(default_factory=PlayMeter)  # the speed auto-play delivers
    live_run: Run | None = None  # the live run, kept while a saved run is replayed
    sidebar_for: tuple | None = None  # what the lab page's sidebar was drawn for (ui/pages/lab/views.py)
    aside_at: tuple[int, int] | None = None  # (cursor, steps) the lesson panel was drawn for
    link_opened: bool = False
    welcomed: bool = False  # the first-visit welcome was shown and left, or a link or lesson opened
    presenting: bool = False
    keys_applied: int = 0  # key presses applied so far, of the count the page sends (ui/widgets/keys.py)
    ab: ABRun | None = None
    ab_configs: tuple[EngineConfig, EngineConfig] | None = None
    ab_workload: str = ""  # the label of the workload the A/B runs
    sweep: dict | None = None  # the last sweep's result, kept until the next
    fleet: FleetRun | None = None  # the Fleet page's run (ui/pages/fleet/)
    fleet_sidebar_for: tuple | None = None  # what the Fleet page's sidebar was drawn for (ui/pages/fleet/page.py)
    fleet_link_opened: bool = False
    fleet_playing: bool = False
    fleet_ab: list[dict] | None = None  # the Fleet page's last A/B and sweep results
    fleet_sweep: dict | None = None
    fleet_lesson: str | None = None  # the fleet lesson open on the Fleet page, and its graded answers
    fleet_grades: dict = field(default_factory=dict)
    fleet_swept: dict = field(default_factory=dict)  # a fleet lesson's id -> its sweep's results
    messages: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) for the next draw
    # Streamlit can start a click's callback while the previous click's script run is still
    # going (fast key presses in presenter mode do it every time), and two threads stepping one
    # engine at once corrupt it: whatever changes a run holds this lock (see exclusive).
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # ---- the run on screen --------------------------------------------------------------------

    @property
    def run(self) -> History:
        """The run on screen, created on first use with the default knobs and workload. ValueError
        if the engine cannot start (the default model missing or unreadable)."""
        if self._run is None:
            self._run = Run(default_config(), self.source.items(), load=cached_load)
        return self._run

    @run.setter
    def run(self, run: History | None) -> None:
        self._run = run

    @property
    def has_run(self) -> bool:
        return self._run is not None

    @property
    def replaying(self) -> bool:
        return isinstance(self._run, Recording)

    def show(self, run: History, source: WorkloadSource | None = None) -> None:
        """Put a run on screen (paused), and say where its workload came from."""
        self._run, self.playing = run, False
        if source is not None:
            self.source = source

    # ---- lessons ------------------------------------------------------------------------------

    def lesson(self) -> Lesson | None:
        """The lesson the run belongs to: None in the free lab, in a replayed file, or when the
        lesson files cannot be read (the Lessons page says why)."""
        if self.lesson_id is None or self.replaying:
            return None
        try:
            return lessons().get(self.lesson_id)
        except LessonError:
            return None

    def lessons_done(self) -> list[int]:
        """The numbers of the lessons this student has finished, for the learning path and its link."""
        return [lesson.number for lesson in readable_lessons().values()
                if lesson.id in self.visits and self.visits[lesson.id].complete(lesson)]

    def visit(self, lesson_id: str) -> Visit:
        if lesson_id not in self.visits:
            self.visits[lesson_id] = Visit(LessonProgress(lesson_id))
        return self.visits[lesson_id]

    # ---- messages -----------------------------------------------------------------------------

    def flash(self, kind: str, message: str) -> None:
        """Queue a message ('error', 'warning', 'info', 'success') for the next draw; callbacks use this."""
        self.messages.append((kind, message))

    def take_messages(self) -> list[tuple[str, str]]:
        messages, self.messages = self.messages, []
        return messages

    # ---- a closed tab ---------------------------------------------------------------------------

    def release(self) -> None:
        """Let go of every engine and KV pool this session holds (its tab closed). What the student
        sees stays: the records, the lessons' progress, the results; an engine is rebuilt from its
        run's script the next time one is used."""
        runs = [self._run, self.live_run, self.ab, self.fleet, *(visit.run for visit in self.visits.values())]
        for run in runs:
            if isinstance(run, Run | ABRun | FleetRun):
                run.release()

    # ---- the widgets' values ------------------------------------------------------------------

    @staticmethod
    def widget(key: str, default: Any = None) -> Any:
        """A widget's current value (what the user set), or default if it was never drawn."""
        return st.session_state.get(key, default)

    @staticmethod
    def set_widget(key: str, value: Any) -> None:
        """Set what a widget shows on its next draw (before it is drawn in this run)."""
        st.session_state[key] = value

    @staticmethod
    def has_widget(key: str) -> bool:
        return key in st.session_state

    @staticmethod
    def forget_widgets(prefix: str) -> None:
        """Drop the values of every widget whose key starts with prefix (they redraw at their defaults)."""
        for key in [k for k in st.session_state if str(k).startswith(prefix)]:
            del st.session_state[key]


_CREATE = threading.Lock()


def session() -> Session:
    """This browser session's Session, created on its first use."""
    with _CREATE:
        s = st.session_state.setdefault("session", Session())
    reaper.watch(s)
    return s


def exclusive(callback: Callable) -> Callable:
    """Run a callback under the session's lock, so clicks that overlap take effect one after another."""
    @functools.wraps(callback)
    def locked(*args, **kwargs):
        with session().lock:
            return callback(*args, **kwargs)
    return locked
