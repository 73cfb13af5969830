"""Per-request metrics as CSV, for a spreadsheet."""

from __future__ import annotations

import csv
import io

import numpy as np

CSV_COLUMNS = ("request_id", "finish_reason", "num_prompt_tokens", "num_generation_tokens", "num_preemptions",
               "queue_time_steps", "queue_time_ms", "ttft_steps", "ttft_ms", "itl_steps_mean", "itl_steps_max",
               "itl_ms_mean", "itl_ms_max", "e2e_steps", "e2e_ms")


def metrics_csv(metrics: dict) -> str:
    """One row per request from run_metrics() (or engine.metrics()). A request has one ITL per
    generated token after the first, so a row gives their mean and max; a blank cell means
    the value does not exist yet (no token, not finished)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for m in metrics["requests"]:
        row = dict(m)
        for key in ("itl_steps", "itl_ms"):
            gaps = m.get(key) or []
            row[f"{key}_mean"] = float(np.mean(gaps)) if gaps else None
            row[f"{key}_max"] = max(gaps) if gaps else None
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in CSV_COLUMNS})
    return out.getvalue()
