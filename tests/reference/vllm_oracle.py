"""vLLM's own v1 Scheduler as the oracle for the engine's scheduling decisions.

Run with the reference venv's python (tests/reference/make_venv.sh makes it):

    python tests/reference/vllm_oracle.py --workloads 500

Each seeded random workload (fcfs and priority, chunked or not, a chunk cap, prefix
caching with shared prefixes, pools from roomy to tight enough to preempt often,
staggered arrivals, up to 16 sequences) runs on the lab's engine with its default
rules (the vllm_v1 preset) and on vLLM's Scheduler, which is plain Python and needs no
model: each step it is fed the tokens the engine sampled, so both see the same
sequences. In every step they must schedule the same tokens for each request,
preempt the same requests and find the same prefix-cache hit at each admission.
A mismatch prints the first differing step, both decisions and the rule most likely
behind it, and the exit status is 1.

--speculative runs every workload with n-gram drafts; --async-scheduling runs them on
vLLM's AsyncScheduler, which plans step n+1 before step n's tokens are handed back (so
here each step's tokens reach it after its next schedule()), with stop tokens the model
really produces, so that stops are seen a step late.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # before vllm is imported: its config logs every build

import torch
import vllm_parts  # its sibling here: the script runs from this folder
from vllm import SamplingParams as VllmSamplingParams
from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
from vllm.utils.hashing import sha256_cbor
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler as VllmAsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request as VllmRequest
from vllm.v1.structured_output import StructuredOutputManager

from engine import DEFAULT_MODEL, Engine, EngineConfig, SamplingParams, load_model


@dataclass
class Workload:
    config: dict  # EngineConfig knobs
    requests: list[dict]  # prompt_ids, max_tokens, priority, arrival_step, stop_token_ids


def random_workload(seed: int, speculative: bool = False) -> Workload:
    """One random workload that every engine can serve (no request larger than the pool); speculative:
    with n-gram drafts, short n-grams so that drafts are found often."""
    rng = random.Random(seed)
    block_size = rng.choice([2, 4, 8, 16])
    chunked = rng.random() < 0.6
    prefix = rng.random() < 0.5
    shared = [rng.randrange(256) for _ in range(rng.randrange(0, 3 * block_size + 1))]
    requests = []
    for _ in range(rng.randint(1, 16)):
        own = [rng.randrange(256) for _ in range(rng.randint(1, 40))]
        prompt = (shared + own) if shared and rng.random() < 0.6 else own
        requests.append(dict(prompt_ids=prompt, max_tokens=rng.randint(1, 16), priority=rng.randint(0, 3),
                             arrival_step=0 if rng.random() < 0.4 else rng.randint(0, 12)))
    # Arrival against list order on purpose: in half the workloads a request listed later arrives
    # no later than one listed before it, so a tie broken by add order instead of arrival shows.
    if rng.random() < 0.5:
        for r, step in zip(requests, sorted((r["arrival_step"] for r in requests), reverse=True), strict=True):
            r["arrival_step"] = step
    longest = max(len(r["prompt_ids"]) + r["max_tokens"] for r in requests)
    max_model_len = longest + rng.randint(0, 8)
    pages_longest = -(-longest // block_size)
    # From exactly the largest request (preemption nearly every step) to room for everything.
    pages_all = sum(-(-(len(r["prompt_ids"]) + r["max_tokens"]) // block_size) for r in requests)
    num_gpu_blocks = rng.randint(pages_longest, max(pages_longest, pages_all + 2))
    max_num_seqs = rng.randint(1, 16)
    if chunked:
        budget = rng.randint(max(max_num_seqs, 4), 96)
    else:
        budget = rng.randint(max(max_model_len, max_num_seqs), max(max_model_len, max_num_seqs) + 64)
    config = dict(block_size=block_size, num_gpu_blocks=num_gpu_blocks, max_num_seqs=max_num_seqs,
                  max_num_batched_tokens=budget, enable_chunked_prefill=chunked,
                  long_prefill_token_threshold=min(rng.choice([0, 0, 4, 8, 16, 24]), max_model_len) if chunked else 0,
                  scheduling_policy=rng.choice(["fcfs", "priority"]), enable_prefix_caching=prefix,
                  max_model_len=max_model_len)
    if speculative:  # (a chunk cap under 1 + k would trip an assertion in vLLM's padding of drafts)
        config |= dict(speculative_method="ngram", num_speculative_tokens=rng.randint(1, 5), prompt_lookup_min=1,
                       prompt_lookup_max=rng.randint(1, 3))
        if 0 < config["long_prefill_token_threshold"] < 1 + config["num_speculative_tokens"]:
            config["long_prefill_token_threshold"] = 0
        # Room for a resumed request's placeholder drafts: padded beyond the whole pool, vLLM would wait
        # forever for pages it can never get, where the lab leaves it unpadded (Scheduler._pads_drafts).
        padded = -(-(longest + config["num_speculative_tokens"]) // block_size)
        config["num_gpu_blocks"] = max(config["num_gpu_blocks"], padded)
    return Workload(config, requests)


def asynchronous(work: Workload, seed: int, loaded) -> Workload:
    """The workload under async scheduling, with a stop token for about half its requests: one the model really
    samples for it (read off a run with async scheduling off: greedy tokens do not depend on it)."""
    rng = random.Random(seed)
    engine = Engine(EngineConfig(**work.config), loaded)
    ids = [engine.add_request(r["prompt_ids"], SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True),
                              priority=r["priority"], arrival_step=r["arrival_step"]) for r in work.requests]
    engine.run()
    for rid, r in zip(ids, work.requests, strict=True):
        outputs = engine.requests[rid].output_token_ids
        r["stop_token_ids"] = [rng.choice(outputs)] if rng.random() < 0.5 else []
    work.config["async_scheduling"] = True
    return work


def vllm_scheduler(cfg: EngineConfig) -> VllmScheduler:
    model = ModelConfig(model=DEFAULT_MODEL, dtype="float32", skip_tokenizer_init=True,
                        max_model_len=cfg.max_model_len)
    sched = SchedulerConfig(is_encoder_decoder=False, max_num_seqs=cfg.max_num_seqs,
                            max_num_batched_tokens=cfg.max_num_batched_tokens, max_model_len=cfg.max_model_len,
                            enable_chunked_prefill=cfg.enable_chunked_prefill,
                            long_prefill_token_threshold=cfg.long_prefill_token_threshold,
                            policy=cfg.scheduling_policy, async_scheduling=cfg.async_scheduling)
    cache = CacheConfig(block_size=cfg.block_size, enable_prefix_caching=cfg.enable_prefix_caching)
    cache.num_gpu_blocks = cfg.num_gpu_blocks + 1  # vLLM keeps block 0 as its null block
    speculative = None if cfg.speculative_method == "none" else SpeculativeConfig(
        method="ngram", num_speculative_tokens=cfg.num_speculative_tokens, prompt_lookup_min=cfg.prompt_lookup_min,
        prompt_lookup_max=cfg.prompt_lookup_max, target_model_config=model, target_parallel_config=ParallelConfig())
    vllm_config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                             speculative_config=speculative)
    spec = FullAttentionSpec(block_size=cfg.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=cfg.num_gpu_blocks + 1, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    cls = VllmAsyncScheduler if cfg.async_scheduling else VllmScheduler
    return cls(vllm_config=vllm_config, kv_cache_config=kv,
                         structured_output_manager=StructuredOutputManager(vllm_config),
                         block_size=cfg.block_size, log_stats=True)


def likely_rule(ours: dict, theirs: dict, cfg: EngineConfig) -> str:
    """Name the scheduling rule most likely behind a difference, for the failure message."""
    if ours["preempted"] != theirs["preempted"]:
        return ("preemption: the victim rule (fcfs: the last running; priority: max (priority, arrival)), "
                "or when a request that preempted itself ends the running pass")
    if ours["drafts"] != theirs["drafts"]:
        return ("speculative decoding: drafts the budget lets in, drafts cleared on preemption, or placeholder "
                "drafts padding a request admitted with one token left")
    if ours["hits"] != theirs["hits"]:
        return ("prefix cache: pages are named at allocation (same-step sharing), every equal page is kept "
                "under its hash, and unnamed freed pages are reused before cached ones")
    extra = set(ours["tokens"]) ^ set(theirs["tokens"])
    if extra:
        return ("admission: the waiting request needs pages for its whole sequence (plus watermark), the "
                "sequence cap, or no admissions in a step that preempted")
    if cfg.long_prefill_token_threshold:
        return "chunk size: long_prefill_token_threshold applies only while more than one request is eligible"
    return "chunk size: the token budget left when the request's turn came"


def workload_kind(work: Workload) -> str:
    """The policy, and whether some request arrives before one listed ahead of it."""
    steps = [r["arrival_step"] for r in work.requests]
    against = any(later < earlier for i, earlier in enumerate(steps) for later in steps[i + 1:])
    return f"{work.config['scheduling_policy']}, arrivals {'against' if against else 'in'} list order"


def arrival_time(step: int, index: int) -> float:
    """What a real server gives vLLM: the time the request reached it. One step is one second here,
    and requests that reach the engine in the same step arrive in list order, a microsecond apart."""
    return step + index * 1e-6


def add_arrivals(theirs: VllmScheduler, work: Workload, ids: list[str], step: int, hasher) -> None:
    """The requests that reach the server in this step, as its API server hands them to the scheduler."""
    for i, (rid, r) in enumerate(zip(ids, work.requests, strict=True)):
        if r["arrival_step"] == step:
            theirs.add_request(VllmRequest(
                rid, r["prompt_ids"], sampling_params=VllmSamplingParams(
                    max_tokens=r["max_tokens"], ignore_eos=True, stop_token_ids=r.get("stop_token_ids", [])),
                pooling_params=None, priority=r["priority"], arrival_time=arrival_time(r["arrival_step"], i),
                block_hasher=hasher))


def compare(seed: int, work: Workload, loaded, seen: Counter) -> str | None:
    """Run one workload (made from seed) on both; None if they agree in every step, else what differs.
    seen counts what the workloads exercised: preemptions, and (async) discarded steps and stale tokens."""
    cfg = EngineConfig(**work.config)
    engine = Engine(cfg, loaded)
    ids = [engine.add_request(r["prompt_ids"], SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True,
                                                              stop_token_ids=r.get("stop_token_ids", [])),
                              priority=r["priority"], arrival_step=r["arrival_step"]) for r in work.requests]
    theirs = vllm_scheduler(cfg)
    in_flight = None  # async scheduling: the last step's output, handed back after the next schedule()
    hasher = get_request_block_hasher(cfg.block_size, sha256_cbor)
    for step in range(2000):
        if not engine.has_unfinished_requests():
            return None
        add_arrivals(theirs, work, ids, step, hasher)
        record = engine.step()
        out = theirs.schedule()
        preempted = {e.request_id for e in record.events if e.kind == "preempted"}
        seen["preemptions"] += len(preempted)
        seen["steps run after a stop (async)"] += sum(c.discarded for c in record.batch)
        if in_flight:  # its last step's output still to be handed back (a token in it is delivered all the same)
            seen["preempted with a step in flight (async)"] += len(preempted & set(in_flight[1].req_ids))
        hits = {e.request_id: e.data["prefix_hit_tokens"] for e in record.events if e.kind == "admitted"}
        ours = dict(tokens={c.request_id: c.num_tokens for c in record.batch},
                    preempted={e.request_id for e in record.events if e.kind == "preempted"}, hits=hits,
                    drafts={c.request_id: c.draft_token_ids for c in record.batch if c.draft_token_ids})
        vllm_hits = {r.req_id: r.num_computed_tokens for r in out.scheduled_new_reqs}
        cached = out.scheduled_cached_reqs
        vllm_hits.update({rid: n for rid, n in zip(cached.req_ids, cached.num_computed_tokens, strict=True)
                          if rid in cached.resumed_req_ids})
        vllm = dict(tokens=dict(out.num_scheduled_tokens), preempted=set(out.preempted_req_ids), hits=vllm_hits,
                    drafts={rid: list(d) for rid, d in out.scheduled_spec_decode_tokens.items()})
        if ours != vllm:
            return (f"workload seed {seed}, step {step}, config {work.config}\n  engine: {ours}\n  vLLM:   {vllm}\n"
                    f"  likely rule: {likely_rule(ours, vllm, cfg)}")
        sampled = {c.request_id: c.new_token_ids for c in record.batch if c.new_token_ids}
        sampling = set(sampled) | {c.request_id for c in record.batch if c.discarded}
        req_ids = list(out.num_scheduled_tokens)
        samples = {rid for rid in req_ids if not theirs.requests[rid].is_prefill_chunk}
        if samples != sampling:
            return f"workload seed {seed}, step {step}: the engine sampled for {sampling}, vLLM for {samples}"
        output = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                                   sampled_token_ids=[sampled.get(rid, []) for rid in req_ids])  # drafts, then one
        if cfg.async_scheduling:
            if in_flight:
                theirs.update_from_output(*in_flight)
            in_flight = out, output
            continue
        theirs.update_from_output(out, output)
        if cfg.speculative_method != "none":  # the drafts the engine proposed, as vLLM's model runner hands them over
            theirs.update_draft_token_ids(DraftTokenIds(req_ids, [engine.requests[rid].spec_token_ids
                                                                  for rid in req_ids]))
    return f"workload seed {seed}: not finished after 2000 steps"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=500)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--async-scheduling", action="store_true",
                        help="every workload on vLLM's AsyncScheduler, with stop tokens the model really samples")
    parser.add_argument("--speculative", action="store_true",
                        help="every workload with n-gram speculative decoding (vLLM's Scheduler with an ngram config)")
    args = parser.parse_args(argv)
    init_none_hash(sha256_cbor)
    loaded = load_model(DEFAULT_MODEL, "cpu")
    start, failures, kinds, seen = time.perf_counter(), [], Counter(), Counter()
    for seed in range(args.first_seed, args.first_seed + args.workloads):
        work = random_workload(seed, args.speculative)
        if args.async_scheduling:
            work = asynchronous(work, seed, loaded)
        why = compare(seed, work, loaded, seen)
        kinds[workload_kind(work), why is None] += 1
        if why:
            failures.append(why)
            print("MISMATCH", why, flush=True)
    agreed = args.workloads - len(failures)
    theirs = "AsyncScheduler" if args.async_scheduling else "Scheduler"
    print(f"{agreed}/{args.workloads} workloads scheduled identically by the engine (vllm_v1 preset) and vLLM "
          f"0.32's v1 {theirs}, step for step, in {time.perf_counter() - start:.0f} s")
    for kind in sorted({k for k, _ in kinds}):
        print(f"  {kind}: {kinds[kind, True]}/{kinds[kind, True] + kinds[kind, False]} agreed")
    print("exercised: " + ", ".join(f"{name} {n}" for name, n in sorted(seen.items())))
    parts = vllm_parts.check()  # the n-gram proposer and CUDA-graph padding, against vLLM's own code
    print("\n".join(parts) or f"the n-gram proposer and the CUDA-graph sizes and padding agree with vLLM 0.32 "
          f"({vllm_parts.CHECKED})")
    return 1 if failures or parts else 0


if __name__ == "__main__":
    sys.exit(main())
