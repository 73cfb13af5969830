"""A run as one web page that steps through it offline: the records' figures, built by the lab's own
figure registry for every step, and a small player (player.js) that shows them.

Nothing is drawn twice: each step's figures are the registry's figures for that step, exactly as the
lab page builds them, kept as JSON. The page needs no server and no network, so it can go in slides,
on a course site or in an e-mail, and open from ``file://``:

* plotly.js comes from the installed plotly package, gzipped into the page, and the step data with it;
  the browser unpacks both (DecompressionStream) when the page opens;
* a figure is stored whole every KEYFRAME steps and as edits from the step before in between
  (lab/export/delta.py): a step's timeline is mostly its predecessor's, and 500 steps would
  otherwise be hundreds of megabytes;
* presenter sizes are the edits from each figure to lab.charts.style.projector's version of it.

Text from the run (request ids, prompts, reasons) goes into the page as escaped HTML or as Plotly
figure text, which the lab already escapes, so a hostile run file renders as text.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import html
import json
from importlib import resources
from string import Template
from typing import Any

from plotly.offline import get_plotlyjs

from lab import markup
from lab.budgets import LINK_STEPS
from lab.charts.registry import FIGURES, Frame, figures_at
from lab.charts.style import projector
from lab.export.delta import diff
from lab.run import History

KEYFRAME = 50  # a figure is stored whole this often: going back a step replays at most this many edits
MAX_STEPS = LINK_STEPS  # the longest run a page holds, as a link may (2.3 MB at 500 steps: bench/RESULTS.md §11)
WHY_AFTER = "blocks"  # the why panel follows the block map, as on the lab page


def run_data(run: History, start: int = -1) -> dict[str, Any]:
    """Everything the player shows, as JSON-ready data: per step its header badges, its decisions and
    each figure (whole or as edits), and the workload before step 0. ValueError past MAX_STEPS."""
    records = run.records
    if len(records) > MAX_STEPS:
        raise ValueError(f"the run has {len(records):,} steps; an offline page holds at most {MAX_STEPS:,}")
    keys = [f.key for f in FIGURES if f.exported]
    figures: dict[str, list] = {key: [None] * len(records) for key in keys}
    presenter: dict[str, list] = {key: [None] * len(records) for key in keys}
    steps, previous, opening = [], {}, max(-1, min(start, len(records) - 1))
    for i, record in enumerate(records):
        frame = Frame(records[:i + 1], len(records))
        shown, headings, heights = {}, {}, {}
        for key, figure in figures_at(frame, exported_only=True).items():
            text = figure.build(frame).to_json()
            light = json.loads(text)
            base = previous.get(key)
            whole = base is None or i % KEYFRAME == 0 or i == opening  # the step it opens at draws at once
            figures[key][i] = {"full": light} if whole else {"edits": diff(base, light)}
            presenter[key][i] = diff(light, projector(json.loads(text)))
            shown[key], headings[key] = light, figure.heading(frame)
            heights[key] = light.get("layout", {}).get("height") or 450
        previous = shown
        lines = markup.change_lines(run.change_before(record.step)) + [markup.event_line(e) for e in record.events]
        steps.append({"step": record.step, "headings": headings, "heights": heights, "badges": markup.badges(record),
                      "why": lines or [markup.NO_DECISIONS]})
    return {"keys": keys, "why_after": WHY_AFTER, "steps": steps, "figures": figures, "presenter": presenter,
            "intro": markup.workload_rows(run), "start": opening}


def page_html(data: dict[str, Any], title: str, about: str = "", lesson_html: str = "") -> str:
    """The page: the player's HTML, CSS and script, plotly.js and the data (both gzipped, base64)."""
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False)
    script = _asset("player.js") + (_asset("lesson.js") if "lesson" in data else "")
    return _TEMPLATE.substitute(
        title=html.escape(title), about=html.escape(about), lesson=lesson_html, css=_asset("player.css") + markup.CSS,
        script=script, plotly=_plotly_packed(), data=_pack(payload),
        storage=hashlib.sha256(payload.encode()).hexdigest()[:16], layout="with-lesson" if lesson_html else "")


def run_page(run: History, title: str = "Scheduler Loop Lab", about: str = "") -> str:
    """A run's page, opening at the step on screen; of a run past MAX_STEPS, its first MAX_STEPS steps."""
    if len(run.records) > MAX_STEPS:
        about += f" The page holds the first {MAX_STEPS:,} of its {len(run.records):,} steps."
        cut = History(run.config, run.workload, run.records[:MAX_STEPS])
        cut.changes, cut.cursor, run = run.changes, min(run.cursor, MAX_STEPS - 1), cut
    return page_html(run_data(run, run.cursor), title, about)


def _pack(text: str) -> str:
    # mtime=0: the same run gives the same file, byte for byte
    return base64.b64encode(gzip.compress(text.encode(), compresslevel=9, mtime=0)).decode("ascii")


@functools.cache
def _plotly_packed() -> str:
    return _pack(get_plotlyjs())


def _asset(name: str) -> str:
    return resources.files("lab.export").joinpath(name).read_text(encoding="utf-8")


_TEMPLATE = Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title>
<style>$css</style></head>
<body class="$layout" data-storage="$storage">
<header><h1>$title</h1><p class="about">$about</p></header>
<noscript><p>This page steps through its run with JavaScript; please allow it.</p></noscript>
<main>
$lesson
<section id="p-player" aria-label="The run, step by step">
<div id="p-bar" role="toolbar" aria-label="Step through the run">
<button id="p-back" title="Back one step (←)">← Back</button>
<button id="p-step" title="Run one more step (→)">Step →</button>
<button id="p-play" title="Play or pause (Space)">▶ Play</button>
<input id="p-scrub" type="range" min="-1" max="0" value="-1" aria-label="Time travel: any step">
<span id="p-where" aria-live="polite"></span>
<label class="p-toggle"><input id="p-presenter" type="checkbox"> Presenter sizes</label>
</div>
<div id="p-loading">Unpacking the run…</div>
<div id="p-head"></div>
<div id="p-now"></div>
<div id="p-views"></div>
</section>
</main>
<footer>Made with Scheduler Loop Lab: every chart is the lab's own, recorded step by step.
Modeled milliseconds are modeled, not measured, on the deployment each chart names.</footer>
<script type="application/octet-stream" id="p-plotly">$plotly</script>
<script type="application/octet-stream" id="p-data">$data</script>
<script>$script</script>
</body></html>
""")
