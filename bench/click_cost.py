"""What a Step click costs the server, and what that CPU time goes to (issue 38).

A lab process on 127.0.0.1 is clicked by a headless session (bench/stream_client.py: its click costs
the server 0.7 to 1.0 times a Chromium tab's, as bench/classroom.py measures), opened by link at a late step of the
default lab run and past step 100 of a lesson. Each click's CPU time is the server process's, read
from /proc (in the kernel's 10 ms ticks). A probe loaded into that server (bench/probe/) times each
script run in its own thread's CPU time and splits it:

- engine step: the Step callback's Run.step (the engine's step and its records);
- figures built: the views' figures, built by the lab's figure registry (lab/charts/);
- figures to JSON: st.plotly_chart turning each figure into its message;
- page script: the rest of the run (the page's other elements, the lesson panel, session state);
- outside the script: the process's CPU beyond its script runs (Streamlit's event loop serialising
  and writing the messages, the websocket).

The parts are means per click; the headline is the median click's process CPU.

    python -m bench.click_cost           # 15 clicks per page
    python -m bench.click_cost --quick   # 3 clicks, a lesson at step 20
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

from bench.click_latency import server_cpu_s
from bench.common import median, parse, parser, print_table, write_results
from bench.stream_client import HeadlessSession
from tools.classroom import lab_server

TARGET_MS = 100.0  # issue 38: median server CPU per Step click
LAB_LAST_STEP = 65  # the default lab run's last step (lessons' runs are longer)
LESSON_AT = 125  # lesson 12's run has 200 steps; past step 124 no question holds the step bar
PARTS = ("engine step", "figures built", "figures to JSON", "page script", "outside the script")
ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "bench" / "probe"  # its sitecustomize.py times the server's script runs


async def _clicks(url: str, query: str, at: int, clicks: int, pid: int, probe: Path) -> tuple[list[float], list[dict]]:
    """Open the page's link at step `at`, then click Step: each click's process CPU in ms, and the
    probe's lines for the runs the clicks started."""
    session = await HeadlessSession.open(url, query + f"&step={at}" if query else f"step={at}")
    cpu, before = [], len(_lines(probe))
    try:
        for n in range(clicks):
            start = server_cpu_s(pid)
            await session.click("step", f"Step {at + 1 + n}")
            cpu.append(round((server_cpu_s(pid) - start) * 1000, 3))
        await asyncio.sleep(0.5)  # the probe writes a run's line just after the run's last message
    finally:
        await session.close()
    return cpu, _lines(probe)[before:]


def _lines(probe: Path) -> list[dict]:
    return [json.loads(line) for line in probe.read_text().splitlines()] if probe.exists() else []


def measure(url: str, pid: int, probe: Path, query: str, at: int, clicks: int) -> dict:
    """CPU per click, and its split into PARTS (means per click)."""
    cpu, runs = asyncio.run(_clicks(url, query, at, clicks, pid, probe))
    total = {key: sum(run.get(key, 0.0) for run in runs) / clicks
             for key in ("script_ms", "engine_ms", "figure_ms", "to_json_ms")}
    split_ms = {"engine step": total["engine_ms"], "figures built": total["figure_ms"] - total["to_json_ms"],
                "figures to JSON": total["to_json_ms"],
                "page script": total["script_ms"] - total["engine_ms"] - total["figure_ms"],
                "outside the script": sum(cpu) / clicks - total["script_ms"]}
    return {"at": at, "clicks": clicks, "server_cpu_ms": cpu, "server_cpu_ms_p50": median(cpu),
            "server_cpu_ms_mean": sum(cpu) / clicks, "script_runs": len(runs), "split_ms": split_ms}


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--clicks", type=int, default=None, help="Step clicks per page (default 15; 3 with --quick)")
    args = parse(p, argv)
    clicks = args.clicks or (3 if args.quick else 15)
    lesson_at = 20 if args.quick else LESSON_AT
    pages = {"lab": ("", LAB_LAST_STEP - clicks), f"lesson 12 from step {lesson_at}": ("lesson=12_queue_under_load",
                                                                                    lesson_at)}
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "runs.jsonl"
        env = {"PYTHONPATH": os.pathsep.join([str(PROBE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "LAB_PROBE_OUT": str(probe)}
        with lab_server(env) as (server, url):
            results = {name: measure(url, server.pid, probe, query, at, clicks) for name, (query, at) in pages.items()}
    print_table(f"Server CPU per Step click (ms): the median of {clicks}, their mean, and the mean's parts",
                ["page", "from step", "p50", "mean", *PARTS],
                [[name, r["at"], r["server_cpu_ms_p50"], r["server_cpu_ms_mean"], *r["split_ms"].values()]
                 for name, r in results.items()])
    met = all(r["server_cpu_ms_p50"] <= TARGET_MS for r in results.values())
    print(f"\nserver CPU per click <= {TARGET_MS:.0f} ms on every page: " + ("met" if met else "missed"))
    data = {"quick": args.quick, "target_ms": TARGET_MS, "pages": results, "meets_target": met}
    write_results(args.out, "click_cost", data)
    return data


if __name__ == "__main__":
    main()
