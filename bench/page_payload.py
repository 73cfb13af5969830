"""What the browser receives per click on a long run, and what the server holds: measured on the wire.

A real `streamlit run app.py` and a real Chromium (Playwright, Debian's chromium). For each
run length N a fresh browser session opens a link to step N-1 of a long trace (the server
replays the run's script up to it), then presses Step once; the bytes of every websocket
frame the server sends for that one rerun are counted, and the server's resident memory is
read from /proc after it. The run: 250 s of the Azure conversation trace at 2 req/s on
llama-3.1-8b@a100-80gb, four seats, lengths at half size (over 20,000 steps).

    python -m bench.page_payload            # 100, 1,000 and 10,000 steps
    python -m bench.page_payload --quick    # 100 and 1,000
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from bench.common import CHROMIUM, CHROMIUM_ARGS, parse, parser, print_table, write_results
from tools.classroom import lab_server

LINK = ("trace=azure-conv&trace.rate=2&trace.duration_s=250&trace.length_scale=0.5"
        "&k.deployment=llama-3.1-8b%40a100-80gb&k.max_num_seqs=4")
BUDGET_BYTES = 2_000_000  # what issue 16 allows one rerun to send at 10,000 steps


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def measure(browser, url: str, pid: int, steps: int) -> dict:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(600_000)
    received: list[int] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: received.append(len(frame))))
    t0 = time.perf_counter()
    page.goto(f"{url}/?{LINK}&step={steps - 2}")
    page.get_by_role("heading", name=re.compile(rf"^Step {steps - 2}\b")).wait_for()
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)
    opened_s = time.perf_counter() - t0
    received.clear()
    t1 = time.perf_counter()
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Step", exact=True).click()
    page.get_by_role("heading", name=re.compile(rf"^Step {steps - 1}\b")).wait_for()
    page.wait_for_load_state("networkidle")
    click_s = time.perf_counter() - t1
    result = {"steps": steps, "rerun_bytes": sum(received), "largest_frame": max(received, default=0),
              "click_s": round(click_s, 2), "open_s": round(opened_s, 1), "server_rss_mb": round(_rss_mb(pid))}
    context.close()
    return result


def main(argv: list[str] | None = None) -> dict:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    lengths = [100, 1000] if args.quick else [100, 1000, 10_000]
    from playwright.sync_api import sync_playwright

    with lab_server() as (proc, url), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        start_rss = _rss_mb(proc.pid)
        rows = [measure(browser, url, proc.pid, n) for n in lengths]
        browser.close()
    print_table(f"One Step click on a long run (server RSS {start_rss:.0f} MB at start)",
                ["steps", "bytes sent", "largest frame", "click s", "open s", "server RSS MB"],
                [[r["steps"], r["rerun_bytes"], r["largest_frame"], r["click_s"], r["open_s"], r["server_rss_mb"]]
                 for r in rows])
    data = {"start_rss_mb": round(start_rss), "runs": rows, "budget_bytes": BUDGET_BYTES,
            "within_budget": all(r["rerun_bytes"] < BUDGET_BYTES for r in rows)}
    write_results(args.out, "page_payload", data)
    return data


if __name__ == "__main__":
    main()
