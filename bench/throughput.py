"""Engine throughput against transformers' own batching, on one fixed mixed workload.

Three systems generate the same greedy tokens for the same seeded requests (64
prompts of 16 to 256 tokens, 64 new tokens each, end-of-sequence ignored) on the
same model, in the same process, one after the other, repeated:

* engine:        this repo's engine, stepped to completion (scheduling, paging, records and all);
* hf_static:     ``model.generate`` on static left-padded batches of 16, in arrival order;
* hf_continuous: transformers' continuous batching, ``generate_batch``'s loop (paged cache, 'sdpa').

It reports generated tokens per second, the engine's speed-up over each baseline
(the median of per-repeat ratios, so drift on a shared machine cancels), whether
the three agree token for token, and how close the engine's decode steps come to
this machine's measured matmul rate.

    python -m bench.throughput                 # CPU: default model (if trained) and a random 5M Llama
    python -m bench.throughput --quick         # seconds-long smoke run (a tiny random Llama only)
    python -m bench.throughput --device cuda --model-size 100m
"""

from __future__ import annotations

import logging
import math
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.common import (
    MODEL_SIZES,
    Timing,
    count_params,
    median,
    parse,
    parser,
    print_table,
    random_llama,
    timed,
    write_results,
)
from engine import DEFAULT_MODEL, Engine, EngineConfig, ModelLoadError, SamplingParams, load_model

# Engine knobs for the run: pages of 16 tokens, a pool that holds every request at full
# length at once (a throughput run measures batching, not preemption), all 64 requests
# in one batch, and a token budget that takes a few prompts per step while decodes run.
ENGINE_SETTINGS = dict(block_size=16, max_num_seqs=64, max_num_batched_tokens=1024, enable_chunked_prefill=True,
                       enable_prefix_caching=False, num_cpu_blocks=0)
STATIC_BATCH = 16
TARGETS = {"vs_hf_static": 1.5, "vs_hf_continuous": 5.0}


@dataclass
class Workload:
    prompts: list[list[int]]
    new_tokens: int
    seed: int

    @property
    def generated_tokens(self) -> int:
        return len(self.prompts) * self.new_tokens

    def describe(self) -> dict:
        lengths = [len(p) for p in self.prompts]
        return {"seed": self.seed, "num_requests": len(self.prompts), "prompt_tokens_min": min(lengths),
                "prompt_tokens_max": max(lengths), "prompt_tokens_total": sum(lengths),
                "new_tokens_each": self.new_tokens, "greedy": True, "ignore_eos": True}


def make_workload(seed: int, num_requests: int, prompt_tokens: tuple[int, int], new_tokens: int,
                  vocab_size: int, avoid: frozenset[int]) -> Workload:
    """Random token ids (never an end-of-sequence id), so any model's vocabulary serves."""
    rng = random.Random(seed)
    ids = [t for t in range(vocab_size) if t not in avoid]
    prompts = [[rng.choice(ids) for _ in range(rng.randint(*prompt_tokens))] for _ in range(num_requests)]
    return Workload(prompts, new_tokens, seed)


@dataclass
class Result:
    """One system's timed pass over the workload."""

    time: Timing
    outputs: list[list[int]]
    records: list = field(default_factory=list)


def pool_blocks(work: Workload) -> int:
    per_request = math.ceil((max(map(len, work.prompts)) + work.new_tokens) / ENGINE_SETTINGS["block_size"])
    return len(work.prompts) * per_request


def run_engine(path: str, device: str, work: Workload) -> Result:
    loaded = load_model(path, device)
    eng = Engine(EngineConfig(model=path, device=device, num_gpu_blocks=pool_blocks(work), **ENGINE_SETTINGS),
                 loaded=loaded)
    params = SamplingParams(max_tokens=work.new_tokens, ignore_eos=True)

    def go() -> tuple[list[str], list]:
        ids = [eng.add_request(p, params) for p in work.prompts]
        return ids, eng.run()

    took, (ids, records) = timed(go)
    return Result(took, [eng.requests[i].output_token_ids for i in ids], records)


def run_hf_static(model, work: Workload, pad_id: int) -> Result:
    """Batches of STATIC_BATCH in arrival order, left-padded: each batch runs until its last request is done."""
    device = model.device

    def go() -> list[list[int]]:
        outputs = []
        for i in range(0, len(work.prompts), STATIC_BATCH):
            batch = work.prompts[i:i + STATIC_BATCH]
            width = max(map(len, batch))
            ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=work.new_tokens,
                                 do_sample=False, eos_token_id=None, pad_token_id=pad_id)
            outputs += out[:, width:].tolist()
        return outputs

    took, outputs = timed(go)
    return Result(took, outputs)


def run_hf_continuous(model, work: Workload, num_blocks: int) -> Result:
    """transformers' continuous batching with the engine's page size, pool, token budget and
    sequence cap. The manager is built and warmed up before the clock starts, as the engine is."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    # eos -1 disables stopping (None would fall back to the model's eos).
    gen = GenerationConfig(max_new_tokens=work.new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(page_size=ENGINE_SETTINGS["block_size"], num_blocks=num_blocks,
                                  max_batch_tokens=ENGINE_SETTINGS["max_num_batched_tokens"],
                                  max_requests_per_batch=ENGINE_SETTINGS["max_num_seqs"], allow_block_sharing=False)
    with model.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cb,
                                                   block=True, timeout=30) as manager:
        def go() -> list[list[int]]:
            ids = manager.add_requests(work.prompts, max_new_tokens=work.new_tokens)
            done = {}
            while len(done) < len(ids):
                result = manager.get_result(timeout=30)
                if result is None:
                    raise RuntimeError("transformers continuous batching stopped before finishing every request")
                if result.is_finished():
                    done[result.request_id] = result.generated_tokens
            return [done[i] for i in ids]

        took, outputs = timed(go)
    return Result(took, outputs)


def matmul_gflops(device: torch.device, m: int, k: int, n: int, seconds: float = 0.5) -> float:
    """Measured rate of one torch matmul of the given shape (float32)."""
    a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        a @ b
    sync()
    reps, elapsed = 0, 0.0
    while elapsed < seconds:
        took, _ = timed(lambda: (a @ b, sync()))
        elapsed += took.wall
        reps += 1
    return 2 * m * k * n * reps / elapsed / 1e9


def model_flops(model) -> dict:
    """Matmul FLOPs per token: 2 per weight of every Linear (the LM head included, the
    embedding lookup not), plus attention: 4 * layers * context * query width."""
    cfg = model.config.get_text_config()
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return {"hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
            "linear_params": linear, "per_token_linear": 2 * linear,
            "per_context_token": 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim}


def decode_efficiency(records: list, flops: dict) -> dict:
    """Achieved GFLOP/s over the engine's pure-decode steps (forward time only)."""
    total_flops, total_ms, steps = 0, 0.0, 0
    for rec in records:
        if rec.batch and all(c.kind == "decode" for c in rec.batch):
            total_flops += sum(flops["per_token_linear"] + flops["per_context_token"] * (c.start + 1)
                               for c in rec.batch)
            total_ms += rec.timings.forward_ms
            steps += 1
    return {"decode_steps": steps, "gflops": total_flops / total_ms / 1e6 if total_ms else 0.0,
            "mean_forward_ms": total_ms / steps if steps else 0.0}


def agreement(reference: list[list[int]], other: list[list[int]]) -> float:
    """Fraction of requests whose generated tokens equal the engine's exactly."""
    return sum(a == b for a, b in zip(reference, other, strict=True)) / len(reference)


def bench_model(name: str, path: str, device: str, work_args: dict, repeats: int) -> dict:
    from transformers import AutoModelForCausalLM

    loaded = load_model(path, device)
    eos = loaded.eos_token_ids
    work = make_workload(vocab_size=loaded.vocab_size, avoid=eos, **work_args)
    hf = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").to(loaded.device).eval()
    pad_id = min(eos) if eos else 0
    blocks = pool_blocks(work)
    flops = model_flops(hf)
    # Warm every path once (lazy inits, allocator), untimed.
    warm = Workload(work.prompts[:2], 2, work.seed)
    run_engine(path, device, warm), run_hf_static(hf, warm, pad_id), run_hf_continuous(hf, warm, blocks)

    # The machine's matmul rate, measured at every repeat beside the engine's run: the model's
    # MLP matmul at the engine's decode batch.
    shape = [ENGINE_SETTINGS["max_num_seqs"], flops["hidden_size"], flops["intermediate_size"]]
    runs: dict[str, list[Result]] = {"engine": [], "hf_static": [], "hf_continuous": []}
    decode = []
    for _ in range(repeats):
        runs["engine"].append(run_engine(path, device, work))
        decode.append({**decode_efficiency(runs["engine"][-1].records, flops),
                       "matmul_gflops": matmul_gflops(torch.device(device), *shape)})
        runs["hf_static"].append(run_hf_static(hf, work, pad_id))
        runs["hf_continuous"].append(run_hf_continuous(hf, work, blocks))
    tps = {k: [work.generated_tokens / r.time.wall for r in v] for k, v in runs.items()}
    per_cpu_s = {k: [work.generated_tokens / r.time.cpu for r in v] for k, v in runs.items()}
    for key, rs in runs.items():
        lengths = {len(o) for r in rs for o in r.outputs}
        if lengths != {work.new_tokens}:
            raise RuntimeError(f"{key} generated {sorted(lengths)} tokens per request, expected {work.new_tokens}")
    engine_out = runs["engine"][0].outputs
    baselines = ("hf_static", "hf_continuous")
    ratios = {f"vs_{k}": median([e / b for e, b in zip(tps["engine"], tps[k], strict=True)]) for k in baselines}
    cpu_ratios = {f"vs_{k}": median([e / b for e, b in zip(per_cpu_s["engine"], per_cpu_s[k], strict=True)])
                  for k in baselines}
    return {
        "model": name, "path": path, "params": count_params(hf), "flops": flops, "workload": work.describe(),
        "engine_settings": {**ENGINE_SETTINGS, "num_gpu_blocks": blocks},
        "tokens_per_s": {k: {"median": median(v), "runs": v} for k, v in tps.items()},
        "tokens_per_cpu_s": {k: {"median": median(v), "runs": v} for k, v in per_cpu_s.items()},
        "ratios": ratios, "cpu_time_ratios": cpu_ratios, "targets": TARGETS,
        "meets_targets": {k: ratios[k] >= t for k, t in TARGETS.items()},
        "output_agreement_with_engine": {k: agreement(engine_out, runs[k][0].outputs)
                                         for k in baselines},
        "engine_deterministic": all(r.outputs == engine_out for r in runs["engine"]),
        "decode": {"matmul_shape": shape, **{k: median([d[k] for d in decode]) for k in decode[0]},
                   "fraction_of_matmul_rate": median([d["gflops"] / d["matmul_gflops"] for d in decode])},
        "engine_steps": len(runs["engine"][-1].records),
    }


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--model-size", default=None, choices=sorted(MODEL_SIZES),
                   help="the random Llama to build (default: 5m; tiny with --quick)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="a trained model folder to bench too ('none' to skip)")
    args = parse(p, argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU is visible on this machine")
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.CRITICAL)
    size = args.model_size or ("tiny" if args.quick else "5m")
    if args.quick:
        work_args = dict(seed=0, num_requests=8, prompt_tokens=(4, 24), new_tokens=4)
    else:
        work_args = dict(seed=0, num_requests=64, prompt_tokens=(16, 256), new_tokens=64)
    repeats = args.repeats

    models, notes = [], []
    if args.model.lower() != "none" and not args.quick:
        if Path(args.model).is_dir():
            models.append(("default" if args.model == DEFAULT_MODEL else Path(args.model).name, args.model))
        else:
            notes.append(f"skipped the trained model: {args.model} does not exist (not trained yet?)")
    with tempfile.TemporaryDirectory(prefix="bench_llama_") as folder:
        models.append((f"random-llama-{size}", random_llama(size, Path(folder))))
        try:
            results = [bench_model(name, path, args.device, work_args, repeats) for name, path in models]
        except ModelLoadError as exc:
            raise SystemExit(str(exc)) from exc

    square = matmul_gflops(torch.device(args.device), 1024, 1024, 1024)
    for r in results:
        t, c = r["tokens_per_s"], r["tokens_per_cpu_s"]
        print_table(f"{r['model']} ({r['params'] / 1e6:.1f}M params), {r['workload']['num_requests']} requests, "
                    f"median of {repeats}",
                    ["system", "tokens/s", "speed-up", "target", "tokens/CPU-s", "speed-up (CPU)", "same tokens"],
                    [["engine", t["engine"]["median"], "", "", c["engine"]["median"], "", ""],
                     *[[k, t[k]["median"], f"{r['ratios']['vs_' + k]:.2f}x", f">= {TARGETS['vs_' + k]}x",
                        c[k]["median"], f"{r['cpu_time_ratios']['vs_' + k]:.2f}x",
                        f"{r['output_agreement_with_engine'][k]:.0%}"] for k in ("hf_static", "hf_continuous")]])
        d = r["decode"]
        print(f"decode steps: {d['decode_steps']}, {d['mean_forward_ms']:.1f} ms each, {d['gflops']:.1f} GFLOP/s "
              f"= {d['fraction_of_matmul_rate']:.0%} of a {d['matmul_shape']} matmul ({d['matmul_gflops']:.1f} "
              f"GFLOP/s); square 1024 matmul: {square:.1f} GFLOP/s")
    for note in notes:
        print(f"note: {note}")
    data = {"quick": args.quick, "device": args.device, "repeats": repeats, "models": results,
            "square_matmul_gflops": square, "notes": notes}
    write_results(args.out, "throughput", data)
    return data


if __name__ == "__main__":
    main()
