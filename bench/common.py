"""What every benchmark shares: command-line knobs, a random Llama, tables and the JSON results file.

Benchmarks report ratios measured in the same run (the engine against a baseline on
the same model and machine), repeated and reduced to medians, because absolute
times on a shared CPU drift from minute to minute.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
# Debian's chromium through Playwright (its own browser download does not work here).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"]

# Random Llamas by name: 'tiny' for --quick, '5m' the CPU benchmark model, '100m' for a GPU.
MODEL_SIZES = {
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
    "5m": dict(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=6,
               num_attention_heads=4, num_key_value_heads=2),
    "100m": dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=12, num_key_value_heads=4),
}


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run (what CI runs)")
    p.add_argument("--repeats", type=int, default=None,
                   help="runs per measurement, the median one reported (default: 3; 1 with --quick)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice); on a shared machine 1 avoids oversubscription")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for the JSON results")
    return p


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line and apply what applies to the whole process."""
    args = p.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            p.error(f"--threads must be >= 1; got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1; got {args.repeats}")
    return args


def machine() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def random_llama(size: str, folder: Path, seed: int = 0) -> str:
    """Save a randomly initialised Llama of the named size into folder, with a word-level
    tokenizer covering its whole vocabulary, and return the folder's path.

    A wide init spreads the logits so greedy picks are stable under float noise:
    that is what lets the baselines' outputs be compared with the engine's.
    """
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    shape = MODEL_SIZES[size]
    torch.manual_seed(seed)
    config = LlamaConfig(**shape, max_position_embeddings=1024, initializer_range=0.1, tie_word_embeddings=True,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0)
    LlamaForCausalLM(config).save_pretrained(folder)
    vocab = {"<eos>": 0} | {f" t{i}": i for i in range(1, shape["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>").save_pretrained(folder)
    return str(folder)


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclass
class Timing:
    """Wall seconds, and CPU seconds of the whole process (all threads).

    On a machine shared with other jobs the wall clock also counts time the
    scheduler gave to them; CPU time counts only this process's work (plus any
    spinning of its own idle threads), so both are reported.
    """

    wall: float
    cpu: float


def timed(fn: Callable[[], object]) -> tuple[Timing, object]:
    w0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    return Timing(time.perf_counter() - w0, time.process_time() - c0), result


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: an actual measured value, never an interpolation."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def write_results(out_dir: Path, name: str, data: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **data}, indent=2) + "\n")
    print(f"\nwrote {path}")
    return path
