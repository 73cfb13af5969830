"""Headless runs: ``python -m engine WORKLOAD.jsonl [knobs]`` replays a workload to the end.

Every EngineConfig field is a command-line flag (``num_gpu_blocks`` becomes
``--num-gpu-blocks``), generated from the dataclass so a new knob appears here by
itself. The run prints each request's outcome and a metrics table; ``--records``
saves every StepRecord as JSON Lines for later study. Bad input (a knob value, a
file, a line in it) ends with one line naming what is wrong and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from engine.cli import InputError, Parser, add_knob_flags, check_writable, open_records, run_to_end, write_json
from engine.cli import flag as flag_of
from engine.config import EngineConfig
from engine.engine import Engine
from engine.knobs import KNOB, KNOBS, Knob
from engine.metrics import METRICS, serving_metrics
from engine.presets import PRESET_RULES, PRESET_SOURCES
from engine.workload import FIELDS, PRESETS, WorkloadError, WorkloadItem, format_of, parse_workload, submit
from engine.workload.load import DEFAULT_SCALE, TRACES, RateSpec, TraceSpec


def build_parser(rows: tuple[Knob, ...] = KNOBS) -> argparse.ArgumentParser:
    """The command line: a workload, a load in time, outputs, and a flag per row of the knob table."""
    parser = Parser(prog="python -m engine", description="Replay a workload through the engine, step by step, "
                     "and print each request's outcome and the run's latency and memory metrics.",
                     epilog=_presets_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", nargs="?", type=Path, help="workload file: .jsonl (one JSON object per line) "
                        f"or .csv (header row naming columns of {','.join(FIELDS)}; only prompt is required)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="run a built-in workload instead of a file")
    load = parser.add_argument_group("load in time", "a real trace or requests at a rate, arriving by time "
                                     "(needs --deployment: arrivals sit on its modeled clock)")
    load.add_argument("--trace", choices=sorted(TRACES), help="the Azure LLM inference trace 2023 (Microsoft, "
                      "CC-BY 4.0): conversation or code requests, with their real lengths and arrival times")
    load.add_argument("--rate", type=float, help="requests/s: rescale --trace to it, or, without --trace, draw "
                      "requests at this rate (gamma gaps, see --cv)")
    load.add_argument("--cv", type=float, default=1.0, help="burstiness of drawn arrivals: the gaps' coefficient "
                      "of variation (1: Poisson; default 1)")
    load.add_argument("--duration-s", type=float, default=60.0, help="seconds of load (default 60)")
    load.add_argument("--length-scale", type=float, default=DEFAULT_SCALE, help="shrink prompt and output "
                      f"lengths by this to fit the model; the deployment prices them whole (default {DEFAULT_SCALE})")
    load.add_argument("--sweep-rate", help="comma-separated rates: run the load once per rate and print "
                      "throughput, goodput and latency percentiles against the offered load")
    parser.add_argument("--metrics-json", type=Path, help="write the run's aggregate metrics to this file, named "
                        "as vLLM's serving benchmark names them (request_throughput, goodput, ttft_ms_p90, ...)")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (default: run "
                        "until every request has finished)")
    parser.add_argument("--records", type=Path, help="write every StepRecord to this file as JSON Lines")
    add_knob_flags(parser.add_argument_group("engine knobs", "every EngineConfig field; defaults are EngineConfig's"),
                   rows)
    return parser


def _presets_help() -> str:
    """Which rules each --engine-preset sets, and the engine source they come from."""
    lines = ["engine presets (--engine-preset; any knob given beside it overrides the preset's value):"]
    for name, rules in PRESET_RULES.items():
        lines.append(f"  {name:16} " + ", ".join(f"{k}={v}" for k, v in rules.items()))
        lines.append(f"  {'':16} from {PRESET_SOURCES[name]}")
    return "\n".join(lines)


def _load_spec(args: argparse.Namespace, rate: float | None) -> TraceSpec | RateSpec:
    """The --trace or --rate load the flags describe; InputError names the flag that is wrong."""
    for flag, value, ok in (("--rate", rate, rate is None or rate > 0), ("--cv", args.cv, args.cv > 0),
                            ("--duration-s", args.duration_s, args.duration_s > 0),
                            ("--length-scale", args.length_scale, 0 < args.length_scale <= 1)):
        if not ok:
            raise InputError(f"{flag}: must be a positive number{' up to 1' if flag == '--length-scale' else ''}; "
                             f"got {value}")
    try:
        if args.trace:
            return TraceSpec(args.trace, rate=rate, duration_s=args.duration_s, length_scale=args.length_scale)
        return RateSpec(rate=rate, cv=args.cv, duration_s=args.duration_s, length_scale=args.length_scale)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _load_in_time(args: argparse.Namespace) -> list[WorkloadItem]:
    """A trace or a drawn load: arrivals by time, so a deployment's clock; every rate checked first."""
    if getattr(args, "deployment", None) is None:
        raise InputError("--trace and --rate need --deployment: their requests arrive by time, on the "
                         "deployment's modeled clock (e.g. --deployment llama-3.1-8b@h100-sxm)")
    if args.sweep_rate is not None:  # a bad list, or a rate the load refuses, is named before anything runs
        for rate in _rates(args.sweep_rate):
            _load_spec(args, rate)
    return _load_spec(args, args.rate).items()


def _load_items(args: argparse.Namespace) -> list[WorkloadItem]:
    load = args.trace is not None or args.rate is not None or args.sweep_rate is not None
    if sum([args.workload is not None, args.preset is not None, load]) != 1:
        raise InputError("give one workload: a file, --preset NAME, or --trace NAME / --rate R")
    if load:
        return _load_in_time(args)
    if args.preset:
        return PRESETS[args.preset]()
    path: Path = args.workload
    fmt = format_of(path.name)
    if fmt is None:
        raise InputError(f"{path}: cannot tell the format; name the file .jsonl or .csv")
    if path.exists() and not path.is_file():  # a FIFO or a device would block the read, or never end
        raise InputError(f"{path}: not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: workload file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it ({exc})") from None
    try:
        return parse_workload(text, fmt)
    except WorkloadError as exc:
        raise InputError(f"{path}: {exc}") from None


def _engine(args: argparse.Namespace) -> Engine:
    knobs = {k: v for k, v in vars(args).items() if k in KNOB}
    try:
        return Engine(EngineConfig.for_preset(**knobs))
    except ValueError as exc:  # a knob's value, or ModelLoadError for --model
        knob = str(exc).split(" ", 1)[0]
        flag = f"{flag_of(knob)}: " if knob in KNOB else ""
        raise InputError(f"{flag}{exc}") from None


def _run(eng: Engine, num_requests: int, max_steps: int | None, records_file: TextIO | None) -> float:
    """Step to the end, streaming records; returns the peak KV pool usage seen."""
    peak = 0.0
    with tqdm(total=num_requests, unit="req", desc="requests finished", file=sys.stderr) as bar:
        while eng.has_unfinished_requests() and (max_steps is None or eng.step_index < max_steps):
            rec = eng.step()
            peak = max(peak, rec.stats.kv_cache_usage_perc)
            bar.update(len(rec.finished))
            bar.set_postfix(step=rec.step, refresh=False)
            if records_file:
                records_file.write(json.dumps(rec.to_dict(), ensure_ascii=False) + "\n")
    return peak


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# The totals the report lists under the latencies, from the one metric catalogue.
REPORTED = tuple(METRICS[m] for m in ("num_steps", "generation_tokens", "throughput_tokens_per_s", "num_preemptions",
                                      "num_recomputed_tokens", "num_swapped_blocks", "prefix_cache_hit_rate",
                                      "peak_kv_cache_usage_perc"))


def report(eng: Engine, peak_usage: float) -> str:
    lines = [f"{'request':<8} {'status':<9} {'finish':<9} {'prompt':>6} {'output':>6} {'preempted':>9}  text"]
    for rid, req in eng.requests.items():
        lines.append(f"{rid:<8} {req.status.value:<9} {req.finish_reason.value if req.finish_reason else '-':<9} "
                     f"{req.num_prompt_tokens:>6} {len(req.output_token_ids):>6} {req.num_preemptions:>9}  "
                     + (f"refused: {req.refusal}" if req.refusal else json.dumps(req.output_text, ensure_ascii=False)))
    agg = {**eng.metrics()["aggregate"], "peak_kv_cache_usage_perc": peak_usage}  # the peak only the steps saw
    lines += ["", f"{'metric':<24} {'p50':>10} {'p95':>10}"]
    for key in ("ttft_steps", "ttft_ms", "itl_steps", "itl_ms", "e2e_steps", "e2e_ms"):
        p50, p95 = METRICS[f"{key}.p50"], METRICS[f"{key}.p95"]
        digits = 1 if p50.unit == "steps" else 2
        lines.append(f"{p50.name + ' (' + p50.unit + ')':<24} {_fmt(p50.value(agg), digits):>10} "
                     f"{_fmt(p95.value(agg), digits):>10}")
    lines.append("")
    for metric in REPORTED:
        value = metric.value(agg)
        shown = f"{_fmt(100 * value)} %" if metric.unit == "fraction" else \
            (_fmt(value) if isinstance(value, float) else str(value))
        lines.append(f"{metric.heading:<24} {shown:>10}")
    if eng.deployment is not None:
        lines += [f"{METRICS[k].heading:<24} {_fmt(100 * agg[k]) + ' %':>10}" for k in ("mfu", "mbu")]
    lines.append(f"{METRICS['request_throughput'].heading:<24} {_fmt(agg['request_throughput'], 2):>10}")
    if agg["slo_attainment"] is not None:
        lines += [f"{METRICS['goodput'].heading:<24} {_fmt(agg['goodput'], 2):>10}",
                  f"{'SLO attainment':<24} {_fmt(100 * agg['slo_attainment']) + ' %':>10}  "
                  f"({'met' if agg['slo_met'] else 'missed'}: the target is {eng.config.slo_percentile:g} %)"]
    clock = f"modeled on {eng.deployment.name}" if eng.deployment else "this machine's wall time"
    lines.append(f"\nms are {clock}")
    scales = sorted({r.length_scale for r in eng.requests.values() if r.length_scale < 1})
    if scales:
        lines.append(f"lengths scaled by {', '.join(f'{x:g}' for x in scales)} to fit the model (tokens counted "
                     "scaled; the deployment prices them at full size)")
    unfinished = sum(not r.is_finished for r in eng.requests.values())
    if unfinished:
        lines.append(f"\nstopped at --max-steps with {unfinished} request(s) unfinished")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.max_steps is not None and args.max_steps < 1:
            raise InputError(f"--max-steps: must be an integer >= 1; got {args.max_steps}")
        items = _load_items(args)
        eng = _engine(args)
        try:
            submit(eng, items)
        except WorkloadError as exc:
            raise InputError(str(exc)) from None
        if args.metrics_json is not None:  # said now, not after the whole run
            check_writable(args.metrics_json)
        records_file = open_records(args.records)
    except InputError as exc:
        parser.error(str(exc))
    peak = run_to_end(lambda: _run(eng, len(items), args.max_steps, records_file), records_file)
    print(report(eng, peak))
    if args.metrics_json:
        write_json(args.metrics_json, serving_metrics(eng.metrics()["aggregate"]), parser.prog)
    if args.sweep_rate:
        print(sweep_rates(args, eng))
    return 0


def _rates(text: str) -> list[float]:
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise InputError(f"--sweep-rate: give rates separated by commas, e.g. 1,2,4,8; got {text!r}") from None
    if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
        raise InputError(f"--sweep-rate: every rate must be a number > 0; got {text!r}")
    return rates


def sweep_rates(args: argparse.Namespace, first: Engine) -> str:
    """The same load at each rate, on fresh engines of the same config: the table of throughput,
    goodput and tail latencies against offered load, where the knee shows."""
    rows = [f"{'rate':>8} {'req/s':>8} {'goodput':>8} {'SLO %':>7} {'TTFT p90':>10} {'TPOT p90':>10} {'steps':>7}"]
    for rate in _rates(args.sweep_rate):
        eng = Engine(first.config, loaded=first.loaded)
        submit(eng, _load_spec(args, rate).items())
        eng.run()
        m = serving_metrics(eng.metrics()["aggregate"])
        attained = "-" if m["slo_attainment"] is None else f"{100 * m['slo_attainment']:.1f}"
        rows.append(f"{rate:>8g} {m['request_throughput']:>8.2f} {_fmt(m['goodput'], 2):>8} {attained:>7} "
                    f"{_fmt(m['ttft_ms_p90']):>10} {_fmt(m['tpot_ms_p90']):>10} {m['num_steps']:>7}")
    return "\n".join(["", "offered load against what the engine served (ms modeled on the deployment):", *rows])


if __name__ == "__main__":
    sys.exit(main())
