"""A probe that bench/click_cost.py loads into the lab server it starts (this folder leads that server's
PYTHONPATH, and nothing else puts it there): every script run's CPU time in its own thread, split
into the parts of a Step click, appended as one JSON line to $LAB_PROBE_OUT.

The parts are timed where the page calls them: the Step callback's `Run.step` (the engine step and its
records), each view's `_chart` (its figure built, then handed to Streamlit), and inside that `chart`
(st.plotly_chart turning the figure into its message). The lab's modules are wrapped once the first
run has imported them; the first run itself is not counted.
"""

from __future__ import annotations

import json
import os
import sys
import time

from streamlit.runtime.scriptrunner.script_runner import ScriptRunner

OUT = os.environ.get("LAB_PROBE_OUT")
TIMED = (("lab.run", "Run", "step", "engine_ms"), ("ui.pages.lab.views", None, "_chart", "figure_ms"),
         ("ui.pages.lab.views", None, "chart", "to_json_ms"))
_spent: dict[str, float] = {}


def _timed(fn, part: str):
    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[part] = _spent.get(part, 0.0) + (time.thread_time() - start) * 1000

    return wrapper


def _wrap_lab() -> bool:
    """Wrap TIMED once its modules are imported; whether they are wrapped now."""
    if not all(module in sys.modules for module, *_ in TIMED):
        return False
    for module, cls, name, part in TIMED:
        owner = getattr(sys.modules[module], cls) if cls else sys.modules[module]
        setattr(owner, name, _timed(getattr(owner, name), part))
    return True


def _probed(run_script):
    wrapped = False

    def probe(self, *args, **kwargs):
        nonlocal wrapped
        _spent.clear()
        start = time.thread_time()
        try:
            return run_script(self, *args, **kwargs)
        finally:
            script_ms = (time.thread_time() - start) * 1000
            if wrapped and OUT:
                with open(OUT, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"script_ms": script_ms, **_spent}) + "\n")
            wrapped = wrapped or _wrap_lab()

    return probe


ScriptRunner._run_script = _probed(ScriptRunner._run_script)
