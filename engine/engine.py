"""The engine: one call to ``step()`` is one turn of the scheduler loop.

A turn admits the requests whose arrival step has come, asks the scheduler for
the batch, performs the swap copies it ordered, runs one forward pass over every
scheduled token, appends the sampled tokens, retires finished requests (their
pages go back to the pool) and returns a StepRecord of all of it.
"""

from __future__ import annotations

import heapq
import time

from engine.block_manager import BlockManager
from engine.config import LIVE_KNOBS, EngineConfig, SamplingParams
from engine.hardware import Deployment, StepCost
from engine.metrics import COUNTER_KEYS, Slo, aggregate_metrics, request_metrics
from engine.model_runner import LoadedModel, ModelRunner, load_model
from engine.records import (
    Budget,
    Event,
    ModeledCost,
    RequestView,
    ScheduledChunk,
    StepRecord,
    StepStats,
    StepTimings,
    Unchanged,
)
from engine.request import FinishReason, Request
from engine.scheduler import Scheduler


class Engine:
    def __init__(self, config: EngineConfig | None = None, loaded: LoadedModel | None = None):
        self.config = config or EngineConfig()
        self.config.validate()
        self.loaded = loaded or load_model(self.config.model, self.config.device, self.config.dtype)
        limit = self.loaded.max_position_embeddings
        self.max_model_len = min(self.config.max_model_len or limit, limit)
        self.blocks = BlockManager(self.config)
        self.scheduler = Scheduler(self.config, self.blocks)
        self.runner = ModelRunner(self.loaded, self.config)
        self.requests: dict[str, Request] = {}
        self.step_index = 0
        # What each step is priced as; None: the clock is this machine's wall time.
        self.deployment = Deployment.parse(self.config.deployment, self.config.model) \
            if self.config.deployment else None
        # Engine time, the clock latencies are measured on: the sum of the steps' modeled costs on
        # the deployment (jumping ahead to the next arrival when idle), or of their wall times.
        self.clock_ms = 0.0
        self._step_start_ms = 0.0
        # Added, arrival not reached: heaps by (arrival step or ms, arrival index), so a step
        # looks only at the requests that arrive in it.
        self._pending: list[tuple[int, int, Request]] = []
        self._pending_ms: list[tuple[float, int, Request]] = []
        self._events: list[Event] = []  # said between steps, reported with the next one
        self.counters = dict.fromkeys(COUNTER_KEYS, 0)
        self.modeled_steps: list[tuple[float, float, float]] = []  # (ms, mfu, mbu) of each priced step
        self._unchanged = Unchanged()

    # ---- requests ---------------------------------------------------------------------------

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None, priority: int = 0,
                    arrival_step: int | None = None, request_id: str | None = None,
                    arrival_ms: float | None = None, length_scale: float = 1.0) -> str:
        """Queue a request; it joins the waiting queue at arrival_step (default: the next step), or
        at the first step that starts at or after arrival_ms on the modeled clock."""
        params = params or SamplingParams()
        token_ids = self._token_ids(prompt)
        self._check_arrival(priority, arrival_step, arrival_ms, length_scale)
        request_id = request_id or f"r{len(self.requests)}"
        if request_id in self.requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        req = Request(request_id, token_ids, params, priority=priority, length_scale=float(length_scale),
                      arrival_step=max(self.step_index, arrival_step or 0), arrival_index=len(self.requests))
        self.requests[request_id] = req
        why = self._never_fits(req)
        if why:
            self._finish(req, FinishReason.REJECTED)
            self._events.append(Event("rejected", request_id, why, {}))
        elif arrival_ms is not None:
            req.arrival_ms = max(float(arrival_ms), self.clock_ms)
            heapq.heappush(self._pending_ms, (req.arrival_ms, req.arrival_index, req))
        else:
            heapq.heappush(self._pending, (req.arrival_step, req.arrival_index, req))
        return request_id

    def _token_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if not prompt.strip():
                raise ValueError("prompt must not be empty")
            token_ids = self.loaded.tokenizer.encode(prompt)
        else:
            token_ids = list(prompt)
        if not token_ids:
            raise ValueError("prompt must contain at least one token")
        vocab = self.loaded.vocab_size
        if not all(isinstance(t, int) and 0 <= t < vocab for t in token_ids):
            raise ValueError(f"prompt token ids must be integers in [0, {vocab})")
        return token_ids

    def _check_arrival(self, priority: int, arrival_step: int | None, arrival_ms: float | None,
                       length_scale: float) -> None:
        """Refuse a request whose place in line or size could not be honoured, naming the field."""
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError(f"priority must be an integer; got {priority!r}")
        if arrival_step is not None and (not isinstance(arrival_step, int) or arrival_step < 0):
            raise ValueError(f"arrival_step must be an integer >= 0; got {arrival_step!r}")
        if not isinstance(length_scale, int | float) or isinstance(length_scale, bool) or not 0 < length_scale <= 1:
            raise ValueError(f"length_scale must be a fraction in (0, 1]; got {length_scale!r}")
        if arrival_ms is None:
            return
        if self.deployment is None:
            raise ValueError("arrival_ms needs a deployment: arrivals by time are placed on its modeled clock "
                             "(this machine's wall time would differ from run to run)")
        if not isinstance(arrival_ms, int | float) or isinstance(arrival_ms, bool) or not arrival_ms >= 0:
            raise ValueError(f"arrival_ms must be a number >= 0; got {arrival_ms!r}")

    def _never_fits(self, req: Request) -> str | None:
        """Reject at once what could never be served, instead of letting it wait forever."""
        total = req.max_total_tokens
        if total > self.max_model_len:
            return f"can never fit: prompt plus max_tokens is {total} tokens, max_model_len is {self.max_model_len}"
        pages = self.blocks.blocks_needed(total)
        usable = self.config.num_gpu_blocks - self.config.watermark_blocks
        if pages > usable:
            # After a recompute preemption it must be re-admitted at full length, watermark and all.
            return (f"can never fit: at full length it needs {pages} KV pages, and the pool has {usable} "
                    f"to admit into ({self.config.num_gpu_blocks} minus {self.config.watermark_blocks} kept "
                    "free by the watermark)")
        slots = usable * self.config.block_size
        if self.config.admission_reserve == "output_estimate" and total + self.config.block_size >= slots:
            return (f"can never fit: SGLang's admission wants its {total} tokens plus a spare page of "
                    f"{self.config.block_size} below the pool's {slots} token slots")
        if not self.config.enable_chunked_prefill and total > self.config.max_num_batched_tokens:
            return (f"can never fit: with chunked prefill off, its prompt (and any recompute of prompt plus "
                    f"output, up to {total} tokens) must run in one step of max_num_batched_tokens="
                    f"{self.config.max_num_batched_tokens}")
        return None

    @property
    def unreported(self) -> tuple[Event, ...]:
        """Decisions made between steps (a request refused as it was added), not yet in a record:
        what a run that cannot start has to say for itself."""
        return tuple(self._events)

    def update_config(self, **changes) -> None:
        """Change live knobs between steps; the next step schedules under the new values."""
        restart = sorted(set(changes) - LIVE_KNOBS)
        if restart:
            raise ValueError(f"{', '.join(restart)} cannot change on a running engine (they shape the model, "
                             "the KV pool or the allocator): start a new engine")
        updated = self.config.with_changes(**changes)  # validates
        for knob in LIVE_KNOBS:  # a preset brings its rules with it
            setattr(self.config, knob, getattr(updated, knob))

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.num_finished < len(self.requests)

    def _idle(self) -> bool:
        sched = self.scheduler
        return not (sched.waiting or sched.running or sched.swapped) and \
            not (self._pending and self._pending[0][0] <= self.step_index)

    # ---- the loop ---------------------------------------------------------------------------

    def step(self) -> StepRecord:
        t0 = time.perf_counter()
        events, self._events = self._events, []
        if self._pending_ms and self._idle():  # nothing to do until the next arrival: the clock jumps there
            self.clock_ms = max(self.clock_ms, self._pending_ms[0][0])
        self._admit_arrivals(events)
        self._step_start_ms = self.clock_ms
        out = self.scheduler.schedule()
        events += out.events
        for e in out.events:
            if e.kind == "admitted":
                kind = "preempted_prefix_cache" if e.data["resumed"] else "prefix_cache"
                self.counters[f"{kind}_queries"] += e.data["query_tokens"]
                self.counters[f"{kind}_hits"] += e.data["prefix_hit_tokens"]
        batch = [(self.requests[rid], n) for rid, n in out.scheduled.items()]
        t1 = time.perf_counter()
        for direction, pairs in out.swaps:
            (self.runner.cache.swap_out if direction == "out" else self.runner.cache.swap_in)(pairs)
        t2 = time.perf_counter()
        sampled = self.runner.execute([(r, n, self.blocks.block_table(r.request_id)) for r, n in batch]) \
            if batch else {}
        t3 = time.perf_counter()
        timings = StepTimings((t1 - t0) * 1000, (t3 - t2) * 1000, (t2 - t1) * 1000)
        cost = self._price(batch, events)
        self.clock_ms += timings.total_ms if cost is None else cost.total_ms
        chunks = [self._advance(req, n, sampled.get(req.request_id), events) for req, n in batch]
        self.counters["num_preemptions"] += len(out.preempted)
        self.counters["num_swapped_blocks"] += sum(len(pairs) for _, pairs in out.swaps)
        if not batch:
            events.append(Event("idle", None, self._why_idle(), {}))
        record = self._record(chunks, events, timings)
        if cost is not None:
            self.modeled_steps.append((cost.total_ms, cost.mfu, cost.mbu))
            record.modeled = ModeledCost(self.deployment.name, **cost.to_dict(), clock_ms=self.clock_ms)
        self.step_index += 1
        return record

    def _price(self, batch: list[tuple[Request, int]], events: list[Event]) -> StepCost | None:
        """The step on the deployment: each request's new tokens against its cached context, plus
        the swap copies (read off the step's swap events); the reasons of swaps and recomputes gain
        what they cost there."""
        if self.deployment is None:
            return None
        dep, block_size = self.deployment, self.config.block_size

        def real(tokens: float, e: Event) -> float:  # a request scaled to fit the small model, at full size
            return tokens / self.requests[e.request_id].length_scale

        copies = [(i, e, real(len(e.data["blocks"]) * block_size, e)) for i, e in enumerate(events)
                  if e.kind in ("swapped_out", "swapped_in")]
        cost = dep.step_cost([(n / req.length_scale, req.num_computed_tokens / req.length_scale)
                              for req, n in batch], sum(tokens for _, _, tokens in copies))
        for i, e, tokens in copies:
            cost_text = (f"{tokens * dep.kv_bytes_per_token / 1e6:.1f} MB of KV at {dep.model}'s size, "
                         f"{dep.swap_ms(tokens) * 1000:.0f} us over {dep.host_link} (modeled)")
            events[i] = Event(e.kind, e.request_id, f"{e.reason}; {cost_text}", e.data)
        for i, e in enumerate(events):
            if e.kind == "recompute_started":
                alone = dep.step_cost([(real(e.data["tokens"], e), 0)]).total_ms
                events[i] = Event(e.kind, e.request_id, f"{e.reason}; about {alone:.1f} ms of prefill on "
                                  f"{dep.name} if it ran alone (modeled)", e.data)
        return cost

    def _admit_arrivals(self, events: list[Event]) -> None:
        arrived = []
        while self._pending and self._pending[0][0] <= self.step_index:
            req = heapq.heappop(self._pending)[2]
            req.arrival_ms = self.clock_ms
            arrived.append(req)
        while self._pending_ms and self._pending_ms[0][0] <= self.clock_ms:
            req = heapq.heappop(self._pending_ms)[2]
            req.arrival_step = self.step_index  # its latencies in steps count from the step it joined
            arrived.append(req)
        for req in sorted(arrived, key=lambda r: (r.arrival_ms, r.arrival_index)):  # first come, first queued
            self.scheduler.add(req)
            events.append(Event("arrived", req.request_id, f"joins the waiting queue with {req.num_prompt_tokens} "
                                f"prompt tokens, wants up to {req.sampling.max_tokens} more", {}))

    def _advance(self, req: Request, n: int, token: int | None, events: list[Event]) -> ScheduledChunk:
        """Apply one step's work to a request: n more tokens computed, maybe one more sampled."""
        kind = req.chunk_kind(n)
        chunk = ScheduledChunk(req.request_id, kind, req.num_computed_tokens, n)
        if req.first_scheduled_step is None:
            req.first_scheduled_step, req.first_scheduled_ms = self.step_index, self._step_start_ms
        self.counters["num_recomputed_tokens"] += max(0, min(req.num_computed_tokens + n, req.peak_computed_tokens)
                                                      - req.num_computed_tokens)
        if kind == "prefill_chunk" and req.num_computed_tokens + n < req.num_tokens:
            events.append(Event("chunk_scheduled", req.request_id, f"prompt tokens {req.num_computed_tokens}-"
                                f"{req.num_computed_tokens + n - 1} of {req.num_tokens}: the rest waits for later "
                                "steps", {"start": req.num_computed_tokens, "num_tokens": n}))
        req.num_computed_tokens += n
        req.peak_computed_tokens = max(req.peak_computed_tokens, req.num_computed_tokens)
        if token is not None:
            req.output_token_ids.append(token)
            req.output_text += self.loaded.token_text(token)
            req.token_steps.append(self.step_index)
            req.token_ms.append(self.clock_ms)
            chunk.new_token_id, chunk.new_token_text = token, self.loaded.token_text(token)
            reason = self._stop_reason(req, token)
            if reason:
                self._finish(req, reason)
                events.append(Event("finished", req.request_id, self._finish_text(req), {"reason": reason.value}))
        return chunk

    def _stop_reason(self, req: Request, token: int) -> FinishReason | None:
        params = req.sampling
        if not params.ignore_eos and token in self.loaded.eos_token_ids:
            return FinishReason.EOS
        if token in params.stop_token_ids:
            return FinishReason.STOP
        if len(req.output_token_ids) >= params.max_tokens or req.num_tokens >= self.max_model_len:
            return FinishReason.LENGTH
        return None

    def _finish(self, req: Request, reason: FinishReason) -> None:
        self.scheduler.finish(req, reason)
        req.finish_step = self.step_index
        req.finish_ms = self.clock_ms

    @staticmethod
    def _finish_text(req: Request) -> str:
        return {
            FinishReason.EOS: "produced the end-of-sequence token",
            FinishReason.STOP: "produced one of its stop tokens",
            FinishReason.LENGTH: f"reached its length limit ({len(req.output_token_ids)} tokens generated)",
        }[req.finish_reason] + "; its KV pages go back to the pool"

    def _why_idle(self) -> str:
        if self._pending:
            return f"nothing to run: the next request arrives at step {self._pending[0][0]}"
        if self._pending_ms:
            return f"nothing to run: the next request arrives at {self._pending_ms[0][0]:.1f} ms"
        if self.scheduler.waiting or self.scheduler.swapped:
            return "nothing could be scheduled: every waiting request is blocked (see the blocked events)"
        return "nothing to run: no requests"

    # ---- reporting --------------------------------------------------------------------------

    def _record(self, chunks: list[ScheduledChunk], events: list[Event], timings: StepTimings) -> StepRecord:
        sched, blocks, cfg = self.scheduler, self.blocks, self.config
        finished = [e.request_id for e in events if e.kind in ("finished", "rejected")]
        shown = [r.request_id for r in (*sched.waiting, *sched.running, *sched.swapped)] + finished
        decode_tokens = sum(c.num_tokens for c in chunks if c.kind == "decode")
        tokens = sum(c.num_tokens for c in chunks)
        cached = blocks.num_cached_free_blocks
        budget = Budget(
            tokens_used=tokens, token_budget=cfg.max_num_batched_tokens, decode_tokens=decode_tokens,
            prefill_tokens=tokens - decode_tokens, seqs_used=len(chunks), seq_cap=cfg.max_num_seqs,
            gpu_blocks_used=cfg.num_gpu_blocks - blocks.num_free_blocks, gpu_blocks_cached=cached,
            gpu_blocks_free=blocks.num_free_blocks - cached, num_gpu_blocks=cfg.num_gpu_blocks,
            cpu_blocks_used=blocks.num_cpu_used, num_cpu_blocks=cfg.num_cpu_blocks)
        stats = StepStats(
            num_requests_running=len(sched.running), num_requests_waiting=len(sched.waiting),
            num_requests_swapped=len(sched.swapped),
            num_requests_finished=sched.num_finished,
            kv_cache_usage_perc=round(blocks.usage(), 6), num_batched_tokens=tokens, **self.counters)
        # Keys no request id can collide with: ("queue", name), ("card", id), (device, block id).
        pages = {(p.device, p.block_id): p for p in blocks.snapshot(self.requests, self.loaded.text_of)}
        kept = self._unchanged({
            **{("queue", name): [r.request_id for r in queue]
               for name, queue in (("waiting", sched.waiting), ("running", sched.running), ("swapped", sched.swapped))},
            ("queue", "pages"): list(pages), **{("card", rid): self._view(self.requests[rid]) for rid in shown},
            **pages})
        return StepRecord(
            step=self.step_index, batch=chunks, budget=budget, waiting=kept["queue", "waiting"],
            running=kept["queue", "running"], swapped=kept["queue", "swapped"], finished=finished,
            requests={rid: kept["card", rid] for rid in shown}, blocks=[kept[key] for key in kept["queue", "pages"]],
            events=events, stats=stats, timings=timings)

    def _view(self, req: Request) -> RequestView:
        return RequestView(
            request_id=req.request_id, status=req.status.value, priority=req.priority,
            arrival_step=req.arrival_step, num_prompt_tokens=req.num_prompt_tokens,
            num_output_tokens=len(req.output_token_ids), num_computed_tokens=req.num_computed_tokens,
            max_tokens=req.sampling.max_tokens, num_preemptions=req.num_preemptions,
            num_blocks=len(self.blocks.block_table(req.request_id)) or
            len(self.blocks.cpu_req_blocks.get(req.request_id, [])),
            finish_reason=req.finish_reason.value if req.finish_reason else None, output_text=req.output_text,
            arrival_ms=req.arrival_ms if self.deployment is not None else None)

    def metrics(self) -> dict:
        """Per-request latencies and the run's aggregate: the numbers the lab, the CLI and the tests report."""
        sched = self.scheduler
        gauges = {"num_requests_finished": sched.num_finished, "num_requests_running": len(sched.running),
                  "num_requests_waiting": len(sched.waiting), "num_requests_swapped": len(sched.swapped),
                  "kv_cache_usage_perc": self.blocks.usage()}
        per_request = [request_metrics(r) for r in self.requests.values()]
        aggregate = aggregate_metrics(per_request, self.step_index, self.clock_ms, gauges, dict(self.counters),
                                      self.modeled_steps if self.deployment else None, Slo.of(self.config))
        return {"aggregate": aggregate, "requests": per_request}

    def run(self, max_steps: int = 100_000) -> list[StepRecord]:
        """Step until every request has finished (or max_steps), returning the records."""
        records = []
        while self.has_unfinished_requests() and len(records) < max_steps:
            records.append(self.step())
        return records
