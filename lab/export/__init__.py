"""Turn a run's StepRecords into files a user can keep, share or open elsewhere.

Everything here reads only the records (plus the config and workload that made
them), never a live engine, so a run loaded back from a file exports the same
way as one just computed. Four formats, a module each:

* runfile: the run itself as JSONL, to load back and replay step by step.
* trace: one track per request in Perfetto or chrome://tracing.
* table: per-request latency metrics as CSV, for a spreadsheet.
* page: the charts, as one standalone HTML page.
* player (and lesson_page): every step of a run, or a lesson beside its run, as one HTML page that
  steps through it offline.

``downloads`` lists them as the lab's sidebar offers them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

from lab.budgets import heavy_job
from lab.charts.registry import Frame, figures_at
from lab.export.page import figures_html
from lab.export.player import run_page
from lab.export.runfile import RUN_FORMAT, RUN_FORMAT_VERSION, SavedRun, dump_run, load_run, saved_run
from lab.export.table import CSV_COLUMNS, metrics_csv
from lab.export.trace import STEP_US, chrome_trace, chrome_trace_json
from lab.metrics import run_metrics  # the CSV's numbers

__all__ = ["CSV_COLUMNS", "RUN_FORMAT", "RUN_FORMAT_VERSION", "STEP_US", "SavedRun", "chrome_trace",
           "chrome_trace_json", "downloads", "dump_run", "figures_html", "load_run", "metrics_csv", "offline_player",
           "run_page", "saved_run", "step_figures"]


def step_figures(run) -> dict[str, object]:
    """The step on screen's figures (run: lab.run.History), each under the heading the lab gives
    it (lab/charts/registry.py), for the HTML export."""
    records = run.records[:run.cursor + 1]
    if not records:
        return {}
    frame = Frame(records, len(run.records))
    return {f.heading(frame): f.build(frame) for f in figures_at(frame, exported_only=True).values()}


def offline_player(run) -> str:
    """The run as an offline page. A long run's page takes seconds of CPU to make (about 18 s at 500
    steps), so it waits for one of the server's heavy-job turns, as a sweep does."""
    about = f"{len(run.items())} requests under {run.config.engine_preset}'s rules, {len(run.records)} steps recorded."
    with heavy_job() if len(run.records) > HEAVY_STEPS else nullcontext():
        return run_page(run, "Scheduler Loop Lab", about)


HEAVY_STEPS = 100  # a page of more steps than this takes a heavy-job turn to make


def downloads(run) -> list[tuple[str, str, Callable[[], str], str, str]]:
    """(label, file name, contents, mime type, help) for each export. The contents are callables,
    so nothing is serialised until the user asks for that file."""
    step = run.cursor
    return [
        ("Run (JSONL)", "run.jsonl", lambda: dump_run(saved_run(run)), "application/jsonl",
         "Every step record: load it back here (Load a saved run) to replay it without the model."),
        ("Trace (JSON)", "trace.json", lambda: chrome_trace_json(run.records, run.config), "application/json",
         "One track per request: open it in ui.perfetto.dev (or chrome://tracing)."),
        ("Metrics (CSV)", "metrics.csv", lambda: metrics_csv(run_metrics(run.records)), "text/csv",
         "Per-request TTFT, inter-token and end-to-end latency, for a spreadsheet."),
        ("Charts (HTML)", f"charts_step{step}.html",
         lambda: figures_html(step_figures(run), f"Scheduler Loop Lab, step {step}",
                              f"{len(run.items())} requests under {run.config.engine_preset}'s rules, "
                              f"at step {step} of {len(run.records)} run."), "text/html",
         "This step's charts as one page that works offline."),
        ("Offline player (HTML)", "run_player.html", lambda: offline_player(run), "text/html",
         "Every step of this run as one page that steps through it in any browser, offline, with no install: "
         "for slides, a course site or an e-mail (python -m lab.export makes one from a saved run or a lesson)."),
    ]
