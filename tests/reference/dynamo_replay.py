"""Replay a Mooncake-format trace through NVIDIA Dynamo's own KV router and mock engines (offline),
and print, as JSON, where it sent each request and at what cost.

Runs in the Dynamo venv (tests/reference/make_dynamo_venv.sh) and needs nothing of the lab:
tests/reference/dynamo_oracle.py writes the trace, runs this, and compares.

    python dynamo_replay.py TRACE.jsonl --workers 4 --router kv_router --block-size 16 --num-gpu-blocks 4096

Output: {"summary": Dynamo's report, "requests": [one per request, in arrival order:
{"arrival_ms", "input_length", "worker", "logit", "selected_overlap_blocks",
"best_available_overlap_blocks", "overlap_regret_blocks", "reused_input_tokens", "prefill_worker",
"decode_overlap_tokens"}]}; prefill_worker is null for a request prefilled on its decode worker
(a conditional-disagg bypass), and decode_overlap_tokens is the prefix the decode pool's router
saw cached there, the input of Dynamo's conditional-disagg predicate. The logit is
read from the selector's own log line ("Selected worker ... logit=..."), joined by request id.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SELECTED = re.compile(r"Selected worker .*?request_id=\"?([0-9a-f-]+)\"? worker_id=(\d+) .*?logit=([0-9.eE+-]+)")


def replay(args: argparse.Namespace) -> dict:
    from dynamo._core import KvRouterConfig, run_mocker_trace_replay

    engine = {"block_size": args.block_size, "num_gpu_blocks": args.num_gpu_blocks, "enable_prefix_caching": True,
              "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
              "speedup_ratio": args.speedup_ratio}
    conditional = {} if args.conditional_disagg is None else dict(
        conditional_disagg_enabled=True, conditional_disagg_eff_isl_threshold=int(args.conditional_disagg[0]),
        conditional_disagg_eff_isl_ratio_threshold=args.conditional_disagg[1])
    router = KvRouterConfig(prefill_load_scale=args.prefill_load_scale, overlap_score_credit=args.overlap_score_credit,
                            **conditional)
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.jsonl")
        # The router logs each pick on stderr (file descriptor 2, from Rust): catch it in a file.
        log_path = os.path.join(tmp, "router.log")
        saved = os.dup(2)
        with open(log_path, "w") as log:
            os.dup2(log.fileno(), 2)
            if args.prefill_workers:  # disaggregated: prefill workers and decode workers, KV moved between
                workers = dict(prefill_engine_args={"engine": {**engine, "worker_type": "prefill"}},
                               decode_engine_args={"engine": {**engine, "worker_type": "decode"}},
                               num_prefill_workers=args.prefill_workers,
                               num_decode_workers=args.workers - args.prefill_workers)
            else:
                workers = dict(extra_engine_args={"engine": engine}, num_workers=args.workers)
            try:
                result = run_mocker_trace_replay([args.trace], router_config=router, router_mode=args.router,
                                                 trace_block_size=args.block_size, report_jsonl_path=report,
                                                 **workers)
            finally:
                os.dup2(saved, 2)
                os.close(saved)
        with open(log_path) as f:
            picks = {m.group(1): (int(m.group(2)), float(m.group(3)))
                     for m in (SELECTED.search(ANSI.sub("", line)) for line in f) if m}
        with open(report) as f:
            rows = [json.loads(line) for line in f]
    out = []
    for row in rows:
        history = (row.get("routing_history") or [{}])[0]
        _, logit = picks.get(row["uuid"], (None, None))
        out.append({"arrival_ms": row["arrival_time_ms"], "input_length": row["input_length"],
                    "worker": row["decode_worker_idx"], "logit": logit,
                    "selected_overlap_blocks": history.get("selected_overlap_blocks"),
                    "best_available_overlap_blocks": history.get("best_available_overlap_blocks"),
                    "overlap_regret_blocks": history.get("overlap_regret_blocks"),
                    "reused_input_tokens": row.get("reused_input_tokens"),
                    "prefill_worker": row.get("prefill_worker_idx"),
                    "decode_overlap_tokens": row.get("decode_route_overlap_tokens")})
    out.sort(key=lambda r: r["arrival_ms"])
    return {"summary": result.summary, "requests": out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--prefill-workers", type=int, default=0, help="disaggregated: this many of the workers "
                        "only prefill (0: aggregated)")
    parser.add_argument("--router", choices=("kv_router", "round_robin"), default="kv_router")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--num-gpu-blocks", type=int, default=4096)
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--max-num-batched-tokens", type=int, default=256)
    parser.add_argument("--speedup-ratio", type=float, default=1.0, help="the mock engines' speed (below 1: slower)")
    parser.add_argument("--prefill-load-scale", type=float, default=1.0)
    parser.add_argument("--overlap-score-credit", type=float, default=1.0)
    parser.add_argument("--conditional-disagg", nargs=2, type=float, metavar=("EFF_ISL", "RATIO"),
                        help="disaggregated: Dynamo's conditional disaggregation (isl_bounding) at these thresholds")
    json.dump(replay(parser.parse_args()), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
