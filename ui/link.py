"""The address bar: a link holds the session's scenario, so copying it shares what is on screen.

    open_link()   on a session's first run, rebuild the run a link describes (bad parameters warned)
    sync_link()   keep the query parameters equal to the session's scenario
    share_url()   the link to the step on screen

A link holds a *scenario* (lab/link/): the lesson, the knobs, the workload's
name or seed, hand-added requests and mid-run changes, and the step on screen.
The engine is deterministic, so replaying that script reproduces the run exactly.
A replayed file has no link: it is shared as the file.
"""

from __future__ import annotations

import re
import secrets
from urllib.parse import urlencode

import streamlit as st

from lab.link import decode_scenario, encode_scenario, open_scenario, scenario_of
from lab.run import default_config
from ui.draw import literal, plain
from ui.session import DEFAULT_SOURCE, Session, cached_load, default_knobs, exclusive, readable_lessons, session
from ui.widgets import presenter

LONG_LINK = 8000  # characters; longer links break in some mail and chat tools
# Streamlit drops every parameter of a link with more than this many (only a server log line
# says so), so the lab never writes one: the run is then shared as its file.
LINK_PARAMS = 1000
PATH_PARAM = "done"  # ?done=1,2,4: the lessons finished, so a student who comes back sees their path
# Two marks the address bar carries but a shared link does not: which server process drew the
# page, and the file a replay came from. A page reconnecting to a restarted server (whose sessions
# are gone) can then say what was rebuilt from its link and what must be loaded again.
SERVER_PARAM, REPLAY_PARAM = "srv", "replay"
BOOT = secrets.token_hex(4)  # this server process


def scenario_params(s: Session) -> dict[str, str]:
    """The run on screen as query parameters (none for a replayed file)."""
    if s.replaying:
        return {}
    lesson = readable_lessons().get(s.lesson_id)
    source = lesson.workload if lesson is not None else s.source
    base = default_knobs(s.lesson_id)
    return encode_scenario(scenario_of(s.run, base, source, s.lesson_id), base)


def link_params(s: Session) -> dict[str, str]:
    """The query parameters for the session's run on screen; without the run where it would take
    more than LINK_PARAMS (the share panel says so and offers the file)."""
    params = scenario_params(s)
    if len(params) > LINK_PARAMS - 2:  # room for the two below
        params = {}
    if s.presenting:
        params[presenter.QUERY_PARAM] = "1"
    if done := s.lessons_done():
        params[PATH_PARAM] = ",".join(str(n) for n in done)
    return params


def _open_path(s: Session, value: str) -> list[str]:
    """Mark the lessons a link says were finished; returns what could not be read."""
    numbers = {lesson.number: lesson.id for lesson in readable_lessons().values()}
    bad = []
    for item in value.split(","):
        number = int(item) if re.fullmatch(r"[0-9]{1,6}", item.strip()) else None  # not isdigit(): "²"
        if number in numbers:
            s.visit(numbers[number]).done_before = True
        elif item.strip():
            bad.append(item.strip()[:20])
    return [f"{PATH_PARAM}: {', '.join(bad)} {'is not a lesson number' if len(bad) == 1 else 'are not lesson numbers'}"
            f" (lessons 1 to {max(numbers, default=0)})"] if bad else []


def sync_link() -> None:
    """Write the session's scenario into the address bar, with the server's mark (and a replay's
    file name). Called on every redraw of the live views: a step, a knob, a workload or the slider."""
    s = session()
    params = {**link_params(s), SERVER_PARAM: BOOT, **({REPLAY_PARAM: s.run.name} if s.replaying else {})}
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)


def share_url() -> str:
    base = (st.context.url or "").split("?")[0]
    params = link_params(session())
    return f"{base}?{urlencode(params)}" if params else base


@exclusive
def open_link() -> None:
    """On a session's first run, build its run from the link it was opened with.

    Each bad parameter keeps its default and is listed in one warning; if the run
    itself cannot be built, the lab starts with its defaults and says why."""
    s = session()
    if s.link_opened:
        return
    s.link_opened = True
    params = st.query_params.to_dict()
    restarted = params.pop(SERVER_PARAM, BOOT) != BOOT
    replayed = params.pop(REPLAY_PARAM, None)
    if replayed is not None:
        why = "The server restarted since" if restarted else "A new session opened"
        s.flash("warning", f"{why} this page showed the replay of {literal(replayed)}: a file is kept by the "
                           "session that loaded it, never in a link. Load it again under *Load a saved run*.")
    elif restarted:
        s.flash("info", "The server restarted since this page was drawn, so your run was rebuilt from its link: "
                        "the knobs, the workload, the changes and the step on screen. Results kept by the old "
                        "session (A/B comparisons, sweeps, lesson answers) are gone: run them again.")
    if params.pop(presenter.QUERY_PARAM, None) in ("1", "true", "on"):
        s.presenting = True
    path_warnings = _open_path(s, params.pop(PATH_PARAM, ""))
    if path_warnings:
        s.flash("warning", "Part of this link could not be used: " + literal(path_warnings[0]))
    if not params or s.has_run:
        return
    s.welcomed = True  # a shared link opens on what it shares, not on the welcome
    known = readable_lessons()
    scenario, warnings = decode_scenario(params, default_config(), {i: default_knobs(i) for i in known})
    lesson = known.get(scenario.lesson)
    own = lesson.workload if lesson is not None else DEFAULT_SOURCE  # what the link adds its requests to
    try:
        run, notes = open_scenario(scenario, default_knobs(scenario.lesson), own.items(), load=cached_load)
    except ValueError as exc:
        s.flash("error", f"The link could not be opened: {plain(exc)}. The lab starts with its defaults.")
        return
    s.show(run, scenario.workload or own)
    s.lesson_id = scenario.lesson
    warnings += notes
    if warnings:
        s.flash("warning", "Parts of this link could not be used, so they kept their defaults:\n\n"
                + "\n".join(f"- {literal(w)}" for w in warnings))
