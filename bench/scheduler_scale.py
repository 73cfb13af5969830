"""How the scheduler loop's own cost grows: with the batch, not with the KV pool.

The real Scheduler and BlockManager run with a stub in place of the forward
pass: every scheduled request is advanced as if its tokens had been computed,
and a request whose tokens are all computed "samples" one fixed token. So the
times are the scheduling decisions, the page allocation and the bookkeeping,
nothing else. The block-map snapshot the lab draws is UI cost: it is measured
apart, against the pages in use and the size of the pool.

    python -m bench.scheduler_scale            # 256 running, 100k pages, 10k requests, plus the sweeps
    python -m bench.scheduler_scale --quick    # seconds-long smoke run
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from bench.common import median, parse, parser, percentile, print_table, write_results
from engine.block_manager import BlockManager
from engine.config import EngineConfig, SamplingParams
from engine.kv.block_map import BlockMap
from engine.request import FinishReason, Request, request_id
from engine.scheduler import Scheduler

FIXED_TOKEN = 7
BLOCK_SIZE = 16
VOCAB = 1000
# Each request: a 16..32-token prompt and 16 new tokens, so at most 3 pages of 16 at full length:
# 256 requests fit in 1k pages, and the pool size alone varies across the sweep.
PROMPT_TOKENS = (16, 32)
NEW_TOKENS = 16


@dataclass
class Setup:
    running: int  # max_num_seqs: how many requests decode together
    blocks: int  # num_gpu_blocks
    requests: int
    prefix_caching: bool = False
    policy: str = "fcfs"

    def config(self) -> EngineConfig:
        # The token budget lets every running request decode and leaves room for admissions.
        return EngineConfig(model="stub", num_gpu_blocks=self.blocks, num_cpu_blocks=0, block_size=BLOCK_SIZE,
                            max_num_seqs=self.running, max_num_batched_tokens=2 * self.running + 512,
                            enable_prefix_caching=self.prefix_caching, scheduling_policy=self.policy)


class StubLoop:
    """The engine's step with the model taken out: schedule, then advance what was scheduled."""

    def __init__(self, setup: Setup, seed: int = 0):
        config = setup.config()
        self.blocks = BlockManager(config)
        self.scheduler = Scheduler(config, self.blocks)
        self.requests: dict[str, Request] = {}
        rng = random.Random(seed)
        shared = [rng.randrange(VOCAB) for _ in range(PROMPT_TOKENS[0])]  # a common prefix, for prefix caching
        for i in range(setup.requests):
            prompt = shared + [rng.randrange(VOCAB) for _ in range(rng.randint(0, PROMPT_TOKENS[1] - len(shared)))]
            req = Request(request_id(i), prompt, SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True),
                          priority=rng.randrange(3), arrival_index=i)
            self.requests[req.request_id] = req
            self.scheduler.add(req)

    def step(self) -> int:
        """One step; returns how many requests were in the batch."""
        out = self.scheduler.schedule()
        for rid, n in out.scheduled.items():
            req = self.requests[rid]
            req.num_computed_tokens += n
            if req.num_computed_tokens == req.num_tokens:
                req.output_token_ids.append(FIXED_TOKEN)
                if len(req.output_token_ids) >= req.sampling.max_tokens:
                    self.scheduler.finish(req, FinishReason.LENGTH)
        return len(out.scheduled)

    @property
    def done(self) -> bool:
        return self.scheduler.num_finished == len(self.requests)


def measure(setup: Setup, warmup: int, steps: int) -> dict:
    """Microseconds per step once the batch is full, over `steps` steps after `warmup`."""
    loop = StubLoop(setup)
    for _ in range(warmup):
        loop.step()
    times, batch = [], []
    for _ in range(steps):
        if loop.done:
            break
        t0 = time.perf_counter()
        batch.append(loop.step())
        times.append((time.perf_counter() - t0) * 1e6)
    us = median(times)
    return {"running": setup.running, "blocks": setup.blocks, "requests": setup.requests,
            "prefix_caching": setup.prefix_caching, "policy": setup.policy, "steps": len(times),
            "mean_batch": sum(batch) / len(batch), "us_per_step_p50": us, "us_per_step_p95": percentile(times, 95),
            "us_per_scheduled_request": us / (sum(batch) / len(batch))}


def snapshot_cost(loop: StubLoop, calls: int) -> dict:
    """Time to build the lab's block map of the loop's current state."""
    text = [f" t{i}" for i in range(VOCAB)]

    def text_of(ids: list[int]) -> str:
        return "".join(text[i] for i in ids)

    block_map = BlockMap(loop.blocks)
    block_map.snapshot(loop.requests, text_of)  # first call decodes every page; later ones only filling pages
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        shown = block_map.snapshot(loop.requests, text_of)
        times.append((time.perf_counter() - t0) * 1e6)
    return {"blocks": loop.blocks.num_gpu_blocks, "pages_shown": len(shown), "us_p50": median(times),
            "us_per_page_shown": median(times) / max(1, len(shown))}


def accounting_cost(loop: StubLoop, calls: int) -> dict:
    """The per-step numbers the engine's record reads from the block manager."""
    b = loop.blocks
    t0 = time.perf_counter()
    for _ in range(calls):
        b.num_free_blocks, b.num_cached_free_blocks, b.num_cpu_used, b.usage()
    return {"blocks": b.num_gpu_blocks, "cached_pages": len(b.prefix.cached),
            "us_per_call": (time.perf_counter() - t0) * 1e6 / calls}


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__.split("\n\n")[0])
    args = parse(p, argv)
    if args.quick:
        head = Setup(running=32, blocks=10_000, requests=400)
        running_sweep, block_sweep, warmup, steps = [16, 32], [1_000, 10_000], 10, 20
    else:
        head = Setup(running=256, blocks=100_000, requests=10_000)
        running_sweep, block_sweep = [32, 64, 128, 256, 512], [1_000, 10_000, 100_000]
        warmup, steps = 40, 200

    def median_run(setup: Setup) -> dict:
        runs = sorted((measure(setup, warmup, steps) for _ in range(args.repeats)), key=lambda r: r["us_per_step_p50"])
        return runs[len(runs) // 2]  # the median run

    headline = [median_run(Setup(head.running, head.blocks, head.requests, caching, policy))
                for caching, policy in ((False, "fcfs"), (True, "fcfs"), (False, "priority"))]
    by_running = [median_run(Setup(r, head.blocks, max(head.requests, 20 * r))) for r in running_sweep]
    by_blocks = [median_run(Setup(head.running, b, head.requests, caching))
                 for caching in (False, True) for b in block_sweep]

    snapshots, accounting = [], []
    for b in block_sweep:
        loop = StubLoop(Setup(head.running, b, head.requests, prefix_caching=True))
        for _ in range(warmup * 3):  # long enough that finished requests leave cached-free pages behind
            loop.step()
        snapshots.append(snapshot_cost(loop, 20))
        accounting.append(accounting_cost(loop, 1000))

    small, large = (next(r for r in by_blocks if r["blocks"] == b and not r["prefix_caching"])
                    for b in (block_sweep[0], block_sweep[-1]))
    growth = {"step_us_ratio_largest_to_smallest_pool": large["us_per_step_p50"] / small["us_per_step_p50"],
              "pool_size_ratio": block_sweep[-1] / block_sweep[0],
              "step_us_ratio_largest_to_smallest_batch":
                  by_running[-1]["us_per_step_p50"] / by_running[0]["us_per_step_p50"],
              "batch_size_ratio": running_sweep[-1] / running_sweep[0]}

    def rows(results: list[dict]) -> list[list]:
        return [[r["running"], r["blocks"], r["requests"], "on" if r["prefix_caching"] else "off", r["policy"],
                 r["mean_batch"], r["us_per_step_p50"], r["us_per_step_p95"], r["us_per_scheduled_request"]]
                for r in results]

    headers = ["max_num_seqs", "pages", "requests", "prefix cache", "policy", "batch", "us/step p50", "p95",
               "us/request"]
    print_table(f"Scheduling alone, headline ({head.running} running, {head.blocks} pages, {head.requests} requests)",
                headers, rows(headline))
    print_table("Growth with the running batch", headers, rows(by_running))
    print_table("Growth with the pool", headers, rows(by_blocks))
    print_table("Block-map snapshot (UI cost, not in the times above), prefix caching on",
                ["pages", "pages shown", "us p50", "us/page shown"],
                [[s["blocks"], s["pages_shown"], s["us_p50"], s["us_per_page_shown"]] for s in snapshots])
    print_table("Per-step accounting the record reads", ["pages", "cached pages", "us/call"],
                [[a["blocks"], a["cached_pages"], a["us_per_call"]] for a in accounting])
    g = growth
    print(f"\npool x{g['pool_size_ratio']:.0f} -> step time x{g['step_us_ratio_largest_to_smallest_pool']:.2f}; "
          f"batch x{g['batch_size_ratio']:.0f} -> step time x{g['step_us_ratio_largest_to_smallest_batch']:.2f}")
    data = {"quick": args.quick, "repeats": args.repeats, "block_size": BLOCK_SIZE, "prompt_tokens": PROMPT_TOKENS,
            "new_tokens": NEW_TOKENS,
            "headline": headline, "by_running": by_running, "by_blocks": by_blocks, "snapshot": snapshots,
            "accounting": accounting, "growth": growth}
    write_results(args.out, "scheduler_scale", data)
    return data


if __name__ == "__main__":
    main()
