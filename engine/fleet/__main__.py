"""Headless fleet runs: ``python -m engine.fleet --trace mooncake-conv --num-replicas 4 --router dynamo
--deployment llama-3.1-8b@h100-sxm`` routes a trace over real engine replicas to the end.

Every fleet knob (engine/fleet/config.py) and every engine knob (engine/knobs.py, for each
replica) is a flag. The run prints each replica's load and prefix hits and the fleet's
metrics; ``--metrics-json`` keeps the serving benchmark's names plus the fleet's, and
``--records`` saves every routing decision and replica step as JSON Lines. Bad input
ends with one line naming what is wrong and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from engine.cli import InputError, Parser, add_knob_flags, check_writable, flag, open_records, run_to_end, write_json
from engine.config import EngineConfig
from engine.fleet.config import FLEET_KNOB, FLEET_KNOBS, FleetConfig
from engine.fleet.fleet import Fleet
from engine.fleet.metrics import fleet_metrics
from engine.fleet.report import report, versus_aggregated
from engine.fleet.workload import (
    FLEET_TRACES,
    MOONCAKE,
    MOONCAKE_BLOCK,
    FleetRequest,
    azure_requests,
    mooncake_requests,
    rate_requests,
    read_mooncake,
    shared_prefix_requests,
)
from engine.knobs import KNOB, KNOBS
from engine.metrics import serving_metrics

PROG = "python -m engine.fleet"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Route a trace over real engine replicas behind a router, and print "
                    "each replica's load and the fleet's latency and prefix-reuse metrics.")
    load = parser.add_argument_group("load", "a real trace, or sessions that share system prompts, arriving by time")
    load.add_argument("--trace", choices=FLEET_TRACES, help="mooncake-conv / mooncake-synth: Mooncake FAST'25 "
                      "(Moonshot AI, Apache-2.0), with prompts that share prefix blocks; azure-conv / azure-code: "
                      "the Azure LLM inference trace 2023 (Microsoft, CC-BY 4.0)")
    load.add_argument("--trace-file", type=Path, help="a Mooncake-format trace of your own (JSON Lines: timestamp, "
                      "input_length, output_length, hash_ids of 512-token blocks)")
    load.add_argument("--shared-prefix", action="store_true", help="instead of a trace: Poisson sessions that each "
                      "start with one of --num-prefixes system prompts")
    load.add_argument("--rate", type=float, help="requests/s: rescale the trace to it (default: its own timing); "
                      "alone, draw requests at this rate (gamma gaps, see --cv; --shared-prefix: default 4)")
    load.add_argument("--cv", type=float, default=1.0, help="drawn arrivals' burstiness, the gaps' coefficient of "
                      "variation (1: Poisson; default 1)")
    load.add_argument("--duration-s", type=float, default=60.0, help="seconds of load (default 60)")
    load.add_argument("--start-s", type=float, default=0.0, help="where in the trace the window starts (default 0)")
    load.add_argument("--block-tokens", type=int, default=16, help="Mooncake: tokens that stand for each 512-token "
                      "hash block (default 16: one page at block_size 16)")
    load.add_argument("--length-scale", type=float, default=0.1, help="Azure and --shared-prefix: shrink lengths "
                      "by this to fit the model (default 0.1)")
    load.add_argument("--num-prefixes", type=int, default=4, help="--shared-prefix: system prompts (default 4)")
    load.add_argument("--prefix-tokens", type=int, default=128, help="--shared-prefix: tokens in each (default 128)")
    parser.add_argument("--metrics-json", type=Path, help="write the fleet's metrics to this file (vLLM's serving "
                        "benchmark names, plus per-replica rows and each request's replica)")
    parser.add_argument("--records", type=Path, help="write every routing decision and replica step as JSON Lines")
    parser.add_argument("--max-events", type=int, default=None, help="stop after this many fleet events")
    parser.add_argument("--versus-aggregated", action="store_true", help="with --num-prefill-replicas: serve the "
                        "same load again on as many replicas that each prefill and decode, and compare")
    add_knob_flags(parser.add_argument_group("fleet knobs", "the replicas and the router"), FLEET_KNOBS)
    add_knob_flags(parser.add_argument_group("engine knobs", "each replica's; defaults are EngineConfig's"), KNOBS)
    return parser


def _named(exc: ValueError, table: dict) -> InputError:
    """A knob's ValueError, led by the flag it came from."""
    knob = str(exc).split(" ", 1)[0]
    return InputError(f"{flag(knob)}: {exc}" if knob in table else str(exc))


def _trace_rows(args: argparse.Namespace) -> tuple | None:
    """The one load the flags name, checked before the model loads: a trace file's rows, read now."""
    drawn = args.rate is not None and not (args.trace or args.trace_file or args.shared_prefix)
    if sum([args.trace is not None, args.trace_file is not None, args.shared_prefix, drawn]) != 1:
        raise InputError("give one load: --trace NAME, --trace-file PATH, --shared-prefix or --rate R")
    if not 1 <= args.block_tokens <= MOONCAKE_BLOCK:
        raise InputError(f"--block-tokens: block_tokens must be an integer in [1, {MOONCAKE_BLOCK}]; "
                         f"got {args.block_tokens}")
    if args.trace_file is None:
        return None
    try:
        return read_mooncake(_read(args.trace_file))
    except ValueError as exc:
        raise InputError(f"--trace-file: {args.trace_file}: {exc}") from None


def _requests(args: argparse.Namespace, vocab_size: int, rows: tuple | None) -> list[FleetRequest]:
    try:
        if rows is not None:
            return mooncake_requests(args.trace_file.name, vocab_size, args.duration_s, args.start_s, args.rate,
                                     args.block_tokens, rows=rows)
        if args.trace is None and not args.shared_prefix:
            return rate_requests(vocab_size, args.rate, args.duration_s, args.cv, length_scale=args.length_scale)
        if args.shared_prefix:
            return shared_prefix_requests(vocab_size, args.rate or 4.0, args.duration_s, args.num_prefixes,
                                          args.prefix_tokens, length_scale=args.length_scale)
        if args.trace in MOONCAKE:
            return mooncake_requests(args.trace, vocab_size, args.duration_s, args.start_s, args.rate,
                                     args.block_tokens)
        return azure_requests(args.trace, vocab_size, args.duration_s, args.rate, args.length_scale)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _read(path: Path) -> str:
    """A trace file's text; InputError for a missing, odd (a FIFO would never end) or unreadable file."""
    if path.exists() and not path.is_file():
        raise InputError(f"--trace-file: {path}: not a regular file")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"--trace-file: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--trace-file: {path}: cannot read it ({exc})") from None


def _fleet(args: argparse.Namespace) -> Fleet:
    given = vars(args)
    try:
        fleet = FleetConfig(**{k: v for k, v in given.items() if k in FLEET_KNOB})
    except ValueError as exc:
        raise _named(exc, FLEET_KNOB) from None
    try:
        config = EngineConfig.for_preset(**{k: v for k, v in given.items() if k in KNOB})
        return Fleet(config, fleet)
    except ValueError as exc:
        raise _named(exc, KNOB) from None


def _prepare(args: argparse.Namespace) -> tuple[Fleet, int, TextIO | None]:
    """The fleet with every request queued at its router, and the records file; InputError if not."""
    if args.max_events is not None and args.max_events < 1:
        raise InputError(f"--max-events: must be an integer >= 1; got {args.max_events}")
    rows = _trace_rows(args)
    if args.versus_aggregated and not args.__dict__.get("num_prefill_replicas"):
        raise InputError("--versus-aggregated compares a disaggregated fleet: give --num-prefill-replicas too")
    fleet = _fleet(args)
    requests = _requests(args, fleet.loaded.vocab_size, rows)
    for req in requests:
        req.submit(fleet)
    if args.metrics_json is not None:
        check_writable(args.metrics_json)
    return fleet, len(requests), open_records(args.records)


def _serve(fleet: Fleet, num_requests: int, max_events: int | None, records: TextIO | None) -> None:
    with tqdm(total=num_requests, unit="req", desc="requests finished", file=sys.stderr) as bar:
        while fleet.has_unfinished_requests() and (max_events is None or fleet.index < max_events):
            rec = fleet.step()
            if rec.step is not None:  # a disaggregated request's one-token prefill is not its finish
                bar.update(sum(fleet.placement.get(rid) == rec.replica for rid in rec.step.finished))
            if records:
                records.write(json.dumps(rec.to_dict(), ensure_ascii=False) + "\n")


def metrics_json(fleet: Fleet) -> dict:
    """The serving benchmark's names, then the fleet's: per-replica rows and each request's replica."""
    m = fleet_metrics(fleet)
    agg = m["aggregate"]
    return {**serving_metrics(agg), "router": agg["router"], "num_replicas": agg["num_replicas"],
            "prefix_reuse_ratio": agg["prefix_reuse_ratio"], "replicas": m["replicas"],
            "requests": [{key: r.get(key) for key in ("request_id", "replica", "ttft_ms", "e2e_ms")}
                         for r in m["requests"]]}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        fleet, num_requests, records = _prepare(args)
    except InputError as exc:
        parser.error(str(exc))
    run_to_end(lambda: _serve(fleet, num_requests, args.max_events, records), records)
    print(report(fleet))
    if args.versus_aggregated:
        print(versus_aggregated(fleet, _requests(args, fleet.loaded.vocab_size, _trace_rows(args))))
    if args.metrics_json:
        write_json(args.metrics_json, metrics_json(fleet), PROG)
    return 0


if __name__ == "__main__":
    sys.exit(main())
