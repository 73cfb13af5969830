"""The offline page (lab/export/player.py) of a long run: its size, how long it takes to make, and
how long Chromium takes to open it from file:// and to step through it.

The run: the Azure conversation trace at 2 req/s on llama-3.1-8b@a100-80gb with four seats and
lengths at half size, cut at STEPS steps (issue 39's bar: 500 steps under 5 MB, open under 2 s).

    python -m bench.offline_page            # 500 steps
    python -m bench.offline_page --quick    # 60 steps, one repeat
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import CHROMIUM, CHROMIUM_ARGS, median, parse, parser, print_table, write_results
from engine.workload import WorkloadSource
from engine.workload.load import TraceSpec
from lab.export.player import run_page
from lab.run import Run, default_config

STEPS = 500
SIZE_BUDGET_MB = 5.0
OPEN_BUDGET_S = 2.0


def long_run(steps: int) -> Run:
    """A run of a real trace, priced on a deployment, `steps` steps long (it is still busy then)."""
    source = WorkloadSource(load=TraceSpec("azure-conv", rate=2.0, duration_s=250.0, length_scale=0.5))
    run = Run(default_config(deployment="llama-3.1-8b@a100-80gb", max_num_seqs=4), source.items())
    run.step(steps)
    return run


def open_page(browser, path: Path) -> dict:
    """Open the page from file:// with every other request refused; time it ready, ten steps and ten back."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    refused: list[str] = []
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                  else (refused.append(route.request.url), route.abort()))
    page = context.new_page()
    t0 = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_function("document.body.dataset.ready === '1'", timeout=60_000)
    opened = time.perf_counter() - t0
    timings = page.evaluate("window.labPlayer.timings")  # ms since navigation: where opening goes
    page.evaluate("window.labPlayer.seek(-1)")  # it opens at the run's last step, the step on screen
    t1 = time.perf_counter()
    for _ in range(10):
        page.keyboard.press("ArrowRight")
    page.wait_for_function("window.labPlayer.cursor >= 9")
    forward = (time.perf_counter() - t1) / 10
    t2 = time.perf_counter()
    for _ in range(10):
        page.keyboard.press("ArrowLeft")
    page.wait_for_function("window.labPlayer.cursor <= -1")
    back = (time.perf_counter() - t2) / 10
    context.close()
    return {"open_s": opened, "step_s": forward, "back_s": back, "refused_requests": len(refused),
            "plotly_s": (timings["plotly_ready"] - timings["unpacked"]) / 1000}


def main(argv: list[str] | None = None) -> None:
    args = parse(parser(__doc__.split("\n\n")[0]), argv)
    steps = 60 if args.quick else STEPS
    run = long_run(steps)
    t0 = time.perf_counter()
    html = run_page(run, "Scheduler Loop Lab", f"{steps} steps of the Azure conversation trace")
    build_s = time.perf_counter() - t0
    size_mb = len(html.encode()) / 1e6
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        path = Path(tmp) / "run.html"
        path.write_text(html, encoding="utf-8")
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        runs = [open_page(browser, path) for _ in range(args.repeats)]
        browser.close()
    result = {"steps": len(run.records), "size_mb": size_mb, "build_s": build_s,
              **{key: median([r[key] for r in runs]) for key in ("open_s", "plotly_s", "step_s", "back_s")},
              "refused_requests": max(r["refused_requests"] for r in runs),
              "budgets": {"size_mb": SIZE_BUDGET_MB, "open_s": OPEN_BUDGET_S}}
    print_table("The offline page", ["steps", "size MB", "made in s", "opens in s", "of it plotly.js", "step s",
                                     "back s", "requests"],
                [[result["steps"], size_mb, build_s, result["open_s"], result["plotly_s"], result["step_s"],
                  result["back_s"], result["refused_requests"]]])
    write_results(args.out, "offline_page", result)


if __name__ == "__main__":
    main()
