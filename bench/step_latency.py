"""What one click of Step costs in the lab: an engine step plus every figure drawn for it.

For each lesson's scenario (lessons/ via lab.lessons.load_lessons, on the model the
lessons are written for) the lab's own Run is stepped to the end, and after each
step every figure builder in lab.charts is called on the history so far, as the
page does (the live views and every history tab, open or not; the replay
animation, built only on request while paused, is timed once per lesson). Then
the two kinds of time travel:

* scrubbing: showing a past step again, i.e. redrawing the page's figures from the stored records;
* branching: stepping from a past step, which rebuilds the engine by replaying the
  run's script up to it (N steps re-executed), then takes the new step.

The Fleet page's click is timed the same way, beside them: a 4-replica fleet (the page's
default) stepped one event at a time, each event followed by the page's figures (the
replica strips, the fleet timeline, the decision table, and the last-stepped replica
opened: its queues and block map), as a ratio to the lessons' median page p50.

The whole click, as a person meets it in Chromium, is bench/click_latency.py.

    python -m bench.step_latency            # every lesson, to the end of its run
    python -m bench.step_latency --quick    # two lessons, a few steps each
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import plotly.io as pio

from bench.common import median, parse, parser, percentile, print_table, write_results
from engine import DEFAULT_MODEL, EngineConfig, ModelLoadError, load_model

TARGETS_MS = {"p50": 100.0, "p95": 250.0}
# What ui/pages/lab/views.py draws on a Step click: the three live views and the open history tab
# (Timeline, the first, unless the student opened another).
PAGE = ("queues", "budget", "blocks", "timeline")
MAX_STEPS = 300  # a lesson run longer than this is cut off (none is, today)

try:
    from lab.charts.registry import FIGURE, Frame, figures_at
    from lab.lessons import load_lessons
    from lab.run import Run
except ImportError as exc:  # the lab is being built alongside the engine
    raise SystemExit(f"step_latency needs the lab's lessons and chart builders, and cannot import them: {exc}") \
        from exc


def draw(records: list, num_steps: int, serialize: bool, names: tuple[str, ...] | None = None) -> dict[str, float]:
    """Build each figure named (default: all), and if asked turn it into the JSON the browser
    receives; returns ms per figure."""
    out = {}
    frame = Frame(records, num_steps)
    for name, figure in figures_at(frame).items():
        if (names is not None and name not in names) or (names is None and not figure.exported):
            continue
        t0 = time.perf_counter()
        fig = figure.build(frame)
        if serialize:
            pio.to_json(fig, validate=False)
        out[name] = (time.perf_counter() - t0) * 1000
    return out


def ms(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def summary(values: list[float]) -> dict:
    return {"p50": median(values), "p95": percentile(values, 95), "max": max(values), "n": len(values)}


def bench_lesson(lesson, model: str, max_steps: int, scrubs: int, depths: list[int], serialize: bool) -> dict:
    run = Run(lesson.engine_config(model=model), lesson.workload.items(), load=load_model)
    step_ms, page, totals, per_figure = [], [], [], {}
    while not run.done and len(run.records) < max_steps:
        t_step = ms(lambda: run.step(1))
        figs = draw(run.records, len(run.records), serialize)
        step_ms.append(t_step)
        page.append(t_step + sum(figs[name] for name in PAGE))
        totals.append(t_step + sum(figs.values()))
        for name, value in figs.items():
            per_figure.setdefault(name, []).append(value)
    num_steps = len(run.records)
    replay_ms = ms(lambda: FIGURE["replay"].build(Frame(run.records, len(run.records))))

    rng = random.Random(0)
    scrub_ms = []
    for index in (rng.randrange(num_steps) for _ in range(scrubs)):
        def scrub(index: int = index) -> None:
            run.seek(index)
            draw(run.records[: index + 1], num_steps, serialize, PAGE)
        scrub_ms.append(ms(scrub))

    branches = []
    for depth in (d for d in depths if d < num_steps):
        run.seek(depth - 1)  # on screen: the record of step depth-1; Step replays `depth` steps, then runs one
        took = ms(lambda: run.step(1))
        branches.append({"replayed_steps": depth, "ms": took, "ms_per_step": took / (depth + 1)})
        run.step(num_steps)  # back to a full history for the next branch
    return {"lesson": lesson.id, "title": lesson.title, "steps": num_steps, "step_ms": summary(step_ms),
            "page_ms": summary(page), "all_figures_ms": summary(totals),
            "per_figure_ms_p50": {k: median(v) for k, v in per_figure.items()}, "replay_ms": replay_ms,
            "scrub_ms": summary(scrub_ms) if scrub_ms else None, "branch": branches}


def fleet_figures(run, serialize: bool) -> None:
    """What the Fleet page draws for the event on screen, with the last-stepped replica opened."""
    from lab.charts import blocks, queues
    from lab.charts.fleet import replicas_figure, timeline_figure
    from lab.fleet.views import decision_rows, journeys, on_link

    record = run.record
    replica = next((r.replica for r in reversed(run.records) if r.kind == "step"), None)
    trips = journeys(run.records[: run.cursor + 1])
    figs = [replicas_figure(record, on_link(trips.values(), record.clock_ms)), timeline_figure(trips, record.clock_ms)]
    if replica is not None:
        steps = run.replica_steps(replica)
        figs += [queues.figure(steps), blocks.figure(steps[-1], steps[-2] if len(steps) > 1 else None)]
    if record.decision is not None:
        decision_rows(record.decision)
    for fig in figs if serialize else ():
        pio.to_json(fig, validate=False)


def bench_fleet(model: str, max_events: int, serialize: bool) -> dict:
    """The Fleet page's Step click: one fleet event, then the figures the page draws for it."""
    from lab.fleet.link import DEFAULTS
    from lab.fleet.run import FleetRun

    run = FleetRun(EngineConfig(model=model, **DEFAULTS.engine), DEFAULTS.fleet, DEFAULTS.load)
    step_ms, page = [], []
    while not run.done and len(run.records) < max_events:
        t_step = ms(lambda: run.step(1))
        step_ms.append(t_step)
        page.append(t_step + ms(lambda: fleet_figures(run, serialize)))
    return {"replicas": DEFAULTS.fleet.num_replicas, "router": DEFAULTS.fleet.router, "events": len(run.records),
            "step_ms": summary(step_ms), "page_ms": summary(page)}


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL, help="the model folder (default: the lessons' model)")
    p.add_argument("--no-json", action="store_true", help="time building the figures only, not their JSON")
    args = parse(p, argv)
    if not Path(args.model).is_dir():
        raise SystemExit(f"no model at {args.model}: train it first (tools/train_default_model.py) or pass --model")
    try:
        load_model(args.model)
    except ModelLoadError as exc:
        raise SystemExit(str(exc)) from exc
    lessons = load_lessons()
    if args.quick:
        lessons, max_steps, scrubs, depths = lessons[:2], 4, 2, [2]
    else:
        max_steps, scrubs, depths = MAX_STEPS, 20, [5, 20, 50]

    results = []
    for lesson in lessons:
        runs = sorted((bench_lesson(lesson, args.model, max_steps, scrubs, depths, not args.no_json)
                       for _ in range(args.repeats)), key=lambda r: r["page_ms"]["p95"])
        results.append({**runs[len(runs) // 2], "repeats": args.repeats})  # the median run
    print_table("One Step click (ms): the engine step, plus the page's figures (" + ", ".join(PAGE) +
                "), or plus every figure",
                ["lesson", "steps", "step p50", "page p50", "page p95", "all p50", "all p95", "replay",
                 "scrub p50", "scrub p95"],
                [[r["lesson"], r["steps"], r["step_ms"]["p50"], r["page_ms"]["p50"], r["page_ms"]["p95"],
                  r["all_figures_ms"]["p50"], r["all_figures_ms"]["p95"], r["replay_ms"],
                  r["scrub_ms"]["p50"] if r["scrub_ms"] else "", r["scrub_ms"]["p95"] if r["scrub_ms"] else ""]
                 for r in results])
    print_table("Branching from a past step (replays the script, then steps)",
                ["lesson", "replayed steps", "ms", "ms per step"],
                [[r["lesson"], b["replayed_steps"], b["ms"], b["ms_per_step"]]
                 for r in results for b in r["branch"]])
    names = list(results[0]["per_figure_ms_p50"])
    print_table("Each figure, p50 ms", ["lesson", *names],
                [[r["lesson"], *(r["per_figure_ms_p50"][n] for n in names)] for r in results])
    worst = {view: {k: max(r[f"{view}_ms"][k] for r in results) for k in TARGETS_MS}
             for view in ("page", "all_figures")}
    for view, w in worst.items():
        print(f"\nworst lesson, step + {view.replace('_', ' ')}: p50 {w['p50']:.1f} ms "
              f"(target <= {TARGETS_MS['p50']:.0f}), p95 {w['p95']:.1f} ms (target <= {TARGETS_MS['p95']:.0f})")
    fleet = bench_fleet(args.model, 40 if args.quick else 2_000, not args.no_json)
    baseline = median([r["page_ms"]["p50"] for r in results])
    fleet["page_p50_vs_lessons"] = fleet["page_ms"]["p50"] / baseline
    print_table(f"One Step click on the Fleet page ({fleet['replicas']} replicas, {fleet['router']}), ms",
                ["events", "event p50", "page p50", "page p95", "page p50 / lessons' median page p50"],
                [[fleet["events"], fleet["step_ms"]["p50"], fleet["page_ms"]["p50"], fleet["page_ms"]["p95"],
                  fleet["page_p50_vs_lessons"]]])
    data = {"quick": args.quick, "model": args.model, "serialize_json": not args.no_json, "targets_ms": TARGETS_MS,
            "page_figures": PAGE, "worst": worst, "fleet": fleet,
            "meets_targets": {view: {k: w[k] <= TARGETS_MS[k] for k in TARGETS_MS} for view, w in worst.items()},
            "lessons": results}
    write_results(args.out, "step_latency", data)
    return data


if __name__ == "__main__":
    main()
