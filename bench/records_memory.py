"""What a run's records cost in memory for time travel, against run length: shared against whole copies.

The run is the long trace of bench/page_payload.py (the Azure conversation trace at 2 req/s on
llama-3.1-8b@a100-80gb, four seats, lengths at half size), opened from its link and stepped with
the lab's own Run. At each length the records are measured twice, in the same run, by the bytes
tracemalloc sees allocated while copying them:

* as kept: one deep copy of the whole list, which keeps the sharing between steps (an unchanged
  card, page or queue is the same object in consecutive records, engine/records.py `Unchanged`);
* as whole copies (the baseline, what every record cost before sharing): each record deep-copied
  on its own, so nothing is shared between steps.

Strings (page texts, generated text) are shared in both, so both figures leave them out.

    python -m bench.records_memory            # 100, 1,000 and 10,000 steps
    python -m bench.records_memory --quick    # 100 and 1,000
"""

from __future__ import annotations

import copy
import tracemalloc
import urllib.parse
from collections.abc import Callable

from bench.common import parse, parser, print_table, write_results
from bench.page_payload import LINK
from engine import load_model
from lab.link import decode_scenario, open_scenario
from lab.run import default_config


def allocated_mb(build: Callable[[], object]) -> float:
    """MB allocated (and still held) while building what build returns."""
    tracemalloc.start()
    kept = build()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return size / 1e6


def main(argv: list[str] | None = None) -> dict:
    args = parse(parser(__doc__.splitlines()[0]), argv)
    lengths = [100, 1000] if args.quick else [100, 1000, 10_000]
    scenario, warnings = decode_scenario(dict(urllib.parse.parse_qsl(LINK)), default_config())
    assert not warnings, warnings
    run, _ = open_scenario(scenario, default_config(), [], load_model)
    rows = []
    for n in lengths:
        run.step(n - len(run.records))
        records = run.records
        shared = allocated_mb(lambda records=records: copy.deepcopy(records))
        whole = allocated_mb(lambda records=records: [copy.deepcopy(r) for r in records])
        last = records[-1]
        rows.append({"steps": len(records), "shared_mb": round(shared, 2), "whole_mb": round(whole, 2),
                     "ratio": round(whole / shared, 1), "cards_last_step": len(last.requests),
                     "pages_last_step": len(last.blocks)})
    print_table("Records kept for time travel (MB, strings excluded)",
                ["steps", "shared", "whole copies", "whole / shared", "cards at last step", "pages at last step"],
                [[r["steps"], r["shared_mb"], r["whole_mb"], r["ratio"], r["cards_last_step"], r["pages_last_step"]]
                 for r in rows])
    data = {"quick": args.quick, "link": LINK, "runs": rows}
    write_results(args.out, "records_memory", data)
    return data


if __name__ == "__main__":
    main()
