"""Give back what a closed browser tab held, so a classroom server's memory returns after class.

Streamlit keeps a disconnected session's state for ``server.disconnectedSessionTTL`` (two
minutes by default), in case the tab reconnects, and only drops it when its session store is
next written to, which may be never. Until then each session's engines and KV pools stay
alive. So one thread per server watches the sessions: a session whose websocket has been gone
for ``GRACE_S`` releases its engines (the records stay, so a tab that comes back sees its run
and rebuilds the engine by replaying it), and then the freed memory is handed back to the
operating system, which glibc's allocator otherwise keeps for itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
import time
import weakref
from typing import Protocol

from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

GRACE_S = 20.0  # a tab gone this long lets go of its engines; a brief network drop keeps them
EVERY_S = 5.0  # how often the sessions are looked at


class Releasable(Protocol):
    lock: threading.RLock

    def release(self) -> None: ...


_watched: dict[str, weakref.ref[Releasable]] = {}  # session id -> its state, while it holds engines
_gone_since: dict[str, float] = {}
_started = threading.Lock()
_thread: threading.Thread | None = None


def watch(state: Releasable) -> None:
    """Look after this script run's session; a no-op outside a real server (AppTest, bare scripts)."""
    ctx = get_script_run_ctx()
    if ctx is None or not Runtime.exists():
        return
    _watched[ctx.session_id] = weakref.ref(state)
    _start()


def _start() -> None:
    global _thread
    with _started:
        if _thread is None:
            _thread = threading.Thread(target=_loop, name="session-reaper", daemon=True)
            _thread.start()


def _loop() -> None:
    while True:
        time.sleep(EVERY_S)
        if Runtime.exists() and reap(Runtime.instance().is_active_session, time.monotonic()):
            give_back_freed_memory()


def reap(is_active, now: float) -> int:
    """Release every watched session that has been disconnected for GRACE_S; returns how many."""
    released = 0
    for session_id, ref in list(_watched.items()):
        state = ref()
        if state is None:  # Streamlit already dropped the session
            _watched.pop(session_id, None)
            _gone_since.pop(session_id, None)
            continue
        if is_active(session_id):
            _gone_since.pop(session_id, None)
            continue
        if now - _gone_since.setdefault(session_id, now) < GRACE_S:
            continue
        if not state.lock.acquire(blocking=False):  # a script run still holds it: next round
            continue
        try:
            state.release()
        finally:
            state.lock.release()
        # Watched again if the tab comes back (every script run calls watch).
        _watched.pop(session_id, None)
        _gone_since.pop(session_id, None)
        released += 1
    return released


def give_back_freed_memory() -> None:
    """Collect the released engines, then ask glibc to return its free pages (where it is glibc)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc (macOS, musl): its allocator decides
        ctypes.CDLL("libc.so.6").malloc_trim(0)
