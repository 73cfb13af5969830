"""Hostile input to ``python -m engine``, each as a real process (issue 32, case 11): whatever the
file, folder or flag, the run ends at once with exit status 2 and one line naming what is wrong,
before any work starts; never a traceback, a prompt, a hang or a huge allocation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SURROGATE = '{"prompt": "ROMEO: \\ud800"}\n'  # a lone surrogate: legal as a JSON escape, not as UTF-8 text


def _cases(tmp: Path, tiny: str) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, words the one line must hold)."""
    fifo = tmp / "x.jsonl"
    os.mkfifo(fifo)  # reading it would block forever
    corrupt = tmp / "corrupt"
    shutil.copytree(tiny, corrupt)
    weights = corrupt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    files = {"surrogate.jsonl": SURROGATE, "deep.jsonl": "[" * 100_000 + "\n",
             "digits.jsonl": '{"prompt": "A", "max_tokens": ' + "9" * 5000 + "}\n",
             "long_output.jsonl": '{"prompt": "A", "max_tokens": 1000000}\n'}
    for name, text in files.items():
        (tmp / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    model = ["--model", tiny]
    return {
        "fifo": ([str(fifo), *model], "not a regular file"),
        "corrupt_weights": (["--preset", "burst", "--model", str(corrupt)], "its weights could not be read"),
        "pool_past_memory": (["--preset", "burst", *model, "--num-gpu-blocks", "1000000", "--block-size", "256"],
                             "GB free"),
        "surrogate": ([str(tmp / "surrogate.jsonl"), *model], "line 1, field 'prompt'"),
        "deep_nesting": ([str(tmp / "deep.jsonl"), *model], "nested too deeply"),
        "huge_integer": ([str(tmp / "digits.jsonl"), *model], "4300 digits"),
        "huge_max_tokens": ([str(tmp / "long_output.jsonl"), *model], "field 'max_tokens'"),
    }


@pytest.fixture(scope="module")
def hostile_runs(tiny_llama, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, str]]:
    """Every case's process, started together (most of each one's time is importing torch)."""
    cases = _cases(tmp_path_factory.mktemp("hostile"), tiny_llama)
    procs = {name: subprocess.Popen([sys.executable, "-m", "engine", *argv], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
             for name, (argv, _) in cases.items()}
    runs = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        runs[name] = (subprocess.CompletedProcess(proc.args, proc.returncode, out, err), cases[name][1])
    return runs


@pytest.mark.parametrize("case", ["fifo", "corrupt_weights", "pool_past_memory", "surrogate", "deep_nesting",
                                  "huge_integer", "huge_max_tokens"])
def test_hostile_input_ends_with_one_line_and_exit_2(hostile_runs, case):
    run, words = hostile_runs[case]
    lines = [line for line in run.stderr.splitlines() if "python -m engine: error:" in line]
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and len(lines) == 1, run.stderr[-2000:]
    assert words in lines[0], lines[0]
    assert not run.stdout.strip()  # nothing ran
