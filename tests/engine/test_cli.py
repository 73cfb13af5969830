"""``python -m engine``: a headless run prints every request and the metrics; bad input
ends with one line naming what is wrong and exit status 2, never a traceback."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine import Engine, EngineConfig, StepRecord
from engine.__main__ import build_parser, main
from engine.knobs import KNOB
from engine.limits import MAX_REQUESTS
from engine.workload import WorkloadItem, dump_workload, submit

ROOT = Path(__file__).resolve().parents[2]
ITEMS = [WorkloadItem("ROMEO:", max_tokens=8, ignore_eos=True),
         WorkloadItem("JULIET:\nO Romeo", max_tokens=12, arrival_step=2, temperature=0.8, ignore_eos=True),
         WorkloadItem("HAMLET:", max_tokens=10, priority=1, arrival_step=3)]
KNOBS = ["--block-size", "4", "--num-gpu-blocks", "8", "--preemption-mode", "swap", "--no-enable-chunked-prefill"]


@pytest.fixture
def workload_file(tmp_path) -> Path:
    path = tmp_path / "work.jsonl"
    path.write_text(dump_workload(ITEMS, "jsonl"))
    return path


@pytest.fixture(scope="module")
def cli_runs(tiny_llama, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Real `python -m engine` processes, started together: most of each one's time is
    importing torch, and that overlaps."""
    folder = tmp_path_factory.mktemp("cli")
    work = folder / "work.jsonl"
    work.write_text(dump_workload(ITEMS, "jsonl"))
    argvs = {"ok": [str(work), "--model", tiny_llama, *KNOBS, "--records", str(folder / "records.jsonl")],
             "bad_knob": [str(work), "--num-gpu-blocks", "0"]}
    procs = {name: subprocess.Popen([sys.executable, "-m", "engine", *argv], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name, argv in argvs.items()}
    runs = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        runs[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    runs["records"] = folder / "records.jsonl"
    return runs


def test_run_prints_outputs_and_metrics(tiny_llama, cli_runs):
    proc = cli_runs["ok"]
    assert proc.returncode == 0, proc.stderr
    # The same run in this process: the CLI must print what the engine produced.
    eng = Engine(EngineConfig(model=tiny_llama, block_size=4, num_gpu_blocks=8, preemption_mode="swap",
                              enable_chunked_prefill=False))
    ids = submit(eng, ITEMS)
    steps = eng.run()
    assert eng.counters["num_preemptions"] > 0, "the knobs were meant to make the pool tight"
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("r")}
    for rid in ids:
        req = eng.requests[rid]
        assert rows[rid].split()[1:3] == ["finished", req.finish_reason.value]
        assert rows[rid].endswith(json.dumps(req.output_text, ensure_ascii=False))
    for label in ("TTFT (steps)", "TTFT (ms)", "ITL (steps)", "e2e latency (ms)", "throughput (tokens/s)",
                  "recomputed tokens", "swapped blocks", "prefix cache hit rate", "peak KV usage"):
        assert label in proc.stdout
    agg = eng.metrics()["aggregate"]
    assert f"{'preemptions (count)':<24} {agg['num_preemptions']:>10}" in proc.stdout
    assert f"{'swapped blocks':<24} {agg['num_swapped_blocks']:>10}" in proc.stdout
    assert "requests finished" in proc.stderr and "Traceback" not in proc.stderr  # the progress bar
    saved = [StepRecord.from_dict(json.loads(line)) for line in cli_runs["records"].read_text().splitlines()]
    assert [r.without_timings() for r in saved] == [r.without_timings() for r in steps]


def test_bad_knob_exits_2_naming_the_knob(cli_runs):
    proc = cli_runs["bad_knob"]
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "--num-gpu-blocks" in proc.stderr and "num_gpu_blocks must be" in proc.stderr
    assert proc.stdout == ""


def _fails(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize(("knob", "value", "words"), [
    ("--preemption-mode", "sideways", "preemption_mode must be one of"),
    ("--block-size", "four", "expected an integer, got 'four'"),  # read as a link or CSV reads it
    ("--watermark", "1.5", "watermark must be"),
    ("--max-steps", "0", "--max-steps"),
])
def test_bad_knob_values(capsys, tiny_llama, workload_file, knob, value, words):
    err = _fails(capsys, [str(workload_file), "--model", tiny_llama, knob, value])
    assert knob in err and words in err


def test_bad_file_line_is_named(capsys, tiny_llama, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ROMEO:"}\n{"prompt": "JULIET:", "max_tokens": "many"}\n')
    err = _fails(capsys, [str(bad), "--model", tiny_llama])
    assert str(bad) in err and "line 2, field 'max_tokens'" in err
    csv = tmp_path / "bad.csv"
    csv.write_text("prompt,max_tokens\nROMEO:,4\nJULIET:,-4\n")
    assert "line 3, field 'max_tokens'" in _fails(capsys, [str(csv), "--model", tiny_llama])


@pytest.mark.parametrize(("argv", "words"), [
    (["missing.jsonl"], "not found"),
    (["work.txt"], "name the file .jsonl or .csv"),
    ([], "give one workload: a file, --preset NAME"),
    (["--preset", "chat_mix", "--model", "/no/such/model"], "not found"),
    (["--preset", "chat_mix", "--records", "/no/such/dir/r.jsonl"], "--records"),
])
def test_bad_input_is_one_line(capsys, tiny_llama, tmp_path, argv, words):
    (tmp_path / "work.txt").write_text("ROMEO:")
    argv = [str(tmp_path / a) if a.endswith((".jsonl", ".txt")) and "/" not in a else a for a in argv]
    if "--model" not in argv and argv:
        argv += ["--model", tiny_llama]
    assert words in _fails(capsys, argv)


def test_unknown_flag_is_named(capsys, tiny_llama):
    assert "unrecognized arguments: --colour" in _fails(capsys, ["--preset", "burst", "--colour", "red"])


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_binary_garbage_is_refused_in_one_short_line(capsys, tiny_llama, tmp_path, suffix):
    garbage = tmp_path / f"garbage{suffix}"
    garbage.write_bytes(bytes(random.Random(suffix).randrange(256) for _ in range(20_000)))
    err = _fails(capsys, [str(garbage), "--model", tiny_llama])
    assert str(garbage) in err and len(err) < 600


@pytest.mark.parametrize(("lines", "line_bytes"), [(10_000, 40), (50_000, 1_000)])  # a 10,000-line file; 50 MB
def test_files_over_the_request_limit_are_refused_at_the_first_line_too_many(capsys, tiny_llama, tmp_path, lines,
                                                                            line_bytes):
    big = tmp_path / "big.jsonl"
    line = json.dumps({"prompt": "ROMEO:".ljust(line_bytes - 16, "x"), "max_tokens": 2}) + "\n"
    big.write_text(line * lines)
    assert big.stat().st_size >= lines * line_bytes * 0.9
    err = _fails(capsys, [str(big), "--model", tiny_llama])
    assert f"line {MAX_REQUESTS + 1}: more than {MAX_REQUESTS} requests" in err


def test_preset_run_can_stop_early(capsys, tiny_llama):
    assert main(["--preset", "burst", "--model", tiny_llama, "--max-steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "stopped at --max-steps" in out and "running" in out


def test_every_engine_knob_is_a_flag_with_help():
    names = [f.name for f in dataclasses.fields(EngineConfig)]
    assert names == list(KNOB) and all(k.help for k in KNOB.values())
    parser = build_parser()
    args = parser.parse_args(["w.jsonl", "--no-enable-chunked-prefill", "--max-model-len", "64",
                              "--watermark", "0.25", "--step-order", "prefill_first"])
    assert (args.enable_chunked_prefill, args.max_model_len, args.watermark, args.step_order) == \
        (False, 64, 0.25, "prefill_first")
    assert not any(hasattr(args, n) for n in names if n not in
                   ("enable_chunked_prefill", "max_model_len", "watermark", "step_order")), "unset knobs stay unset"
    help_text = parser.format_help()
    for name in names:
        assert "--" + name.replace("_", "-") in help_text


def test_a_request_the_model_cannot_hold_is_reported_with_its_reason(capsys, tiny_llama, workload_file):
    """Issue 32, case 12: a prompt longer than the model ended "rejected" with no reason and exit 0."""
    assert main([str(workload_file), "--model", tiny_llama, "--max-model-len", "4"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if re.match(r"r\d+ ", line)]
    assert rows and all("rejected" in row and "refused: can never fit" in row and "max_model_len" in row
                        for row in rows), rows
