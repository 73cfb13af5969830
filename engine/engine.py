"""The engine: one call to ``step()`` is one turn of the scheduler loop.

A turn is five calls, in the order a real engine makes them: the requests whose
arrival has come join the waiting queue, or are refused at the door
(engine/admission.py); the scheduler decides the batch (engine/scheduler.py); the
swap copies it ordered are made; one forward pass runs over every scheduled token
(engine/model_runner.py); the outputs are applied (tokens appended, finished
requests retired, the clock advanced, drafts proposed for the next step when
speculative decoding is on: engine/speculation.py) and the step is recorded as a
StepRecord (engine/recorder.py).

Under async scheduling (vLLM's AsyncScheduler) a step's tokens are handed back in the
next turn, after its decision and before its forward pass, which reads them.
"""

from __future__ import annotations

import heapq
import time

from engine import reasons
from engine.admission import Refusal, refusal
from engine.block_manager import BlockManager
from engine.clock import step_ms
from engine.config import EngineConfig, SamplingParams
from engine.handoff import Handoff
from engine.hardware import Deployment, StepCost
from engine.knobs import LIVE_KNOBS
from engine.limits import MAX_STEPS
from engine.metrics import Slo, aggregate_metrics, request_metrics
from engine.model_runner import LoadedModel, ModelRunner, load_model
from engine.pricing import price_step
from engine.recorder import Recorder
from engine.records import Event, ModeledCost, ScheduledChunk, StepRecord, StepTimings
from engine.request import FinishReason, Request, RequestStatus
from engine.request import request_id as default_id
from engine.scheduler import Scheduler, SchedulerOutput
from engine.speculation import NgramProposer
from engine.workload.item import is_text


class _Timer:
    """Wall time of each phase of a step, for StepTimings."""

    def __init__(self) -> None:
        self.timings = StepTimings()
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        setattr(self.timings, phase, (now - self._last) * 1000)
        self._last = now


class Engine(Handoff):
    """The serving engine: requests in, one scheduler step per call to step(), records out."""

    def __init__(self, config: EngineConfig | None = None, loaded: LoadedModel | None = None):
        self.config = config or EngineConfig()
        self.config.validate()
        self.loaded = loaded or load_model(self.config.model, self.config.device, self.config.dtype)
        limit = self.loaded.max_position_embeddings
        self.max_model_len = min(self.config.max_model_len or limit, limit)
        self.blocks = BlockManager(self.config)
        self.scheduler = Scheduler(self.config, self.blocks, self.max_model_len)
        self.runner = ModelRunner(self.loaded, self.config)
        c = self.config  # speculative decoding's drafts, proposed after each step (None: it is off)
        self.proposer = NgramProposer(c.prompt_lookup_min, c.prompt_lookup_max, c.num_speculative_tokens,
                                      self.max_model_len) if c.speculative_method == "ngram" else None
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
        self.modeled_steps: list[tuple[float, float, float]] = []  # (ms, mfu, mbu) of each priced step
        # Async: the last step's sampled tokens, not yet handed back, and its index (None: it ran no batch).
        self._in_flight: tuple[list[tuple[Request, list[int]]], int] | None = None
        self.recorder = Recorder(self.config, self.scheduler, self.requests, self.loaded.text_of,
                                 by_time=self.deployment is not None)

    # ---- requests ---------------------------------------------------------------------------

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None, priority: int = 0,
                    arrival_step: int | None = None, request_id: str | None = None,
                    arrival_ms: float | None = None, length_scale: float = 1.0, late: bool = False,
                    hold_kv: bool = False) -> str:
        """Queue a request; it joins the waiting queue at arrival_step (default: the next step), or
        at the first step that starts at or after arrival_ms on the modeled clock. An arrival_ms
        already past counts from now, unless `late`: then the request arrived while the last step
        ran (a fleet's router placed it on a busy replica) and its wait counts from arrival_ms. With
        hold_kv, its pages outlive it until release(): a prefill replica's, copied to a decode replica."""
        params = params or SamplingParams()
        token_ids = self.token_ids(prompt)
        self._check_arrival(priority, arrival_step, arrival_ms, length_scale)
        request_id = request_id or default_id(len(self.requests))
        if request_id in self.requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        req = Request(request_id, token_ids, params, priority=priority, length_scale=float(length_scale),
                      arrival_step=max(self.step_index, arrival_step or 0), arrival_index=len(self.requests),
                      hold_kv=hold_kv)
        self.requests[request_id] = req
        if arrival_ms is not None:
            if late and arrival_ms < self._step_start_ms:
                raise ValueError(f"a late arrival_ms must fall within the last step, from {self._step_start_ms} ms; "
                                 f"got {arrival_ms!r}")
            req.arrival_ms = float(arrival_ms) if late else max(float(arrival_ms), self.clock_ms)
            heapq.heappush(self._pending_ms, (req.arrival_ms, req.arrival_index, req))
        else:
            heapq.heappush(self._pending, (req.arrival_step, req.arrival_index, req))
        return request_id

    def token_ids(self, prompt: str | list[int]) -> list[int]:
        """The prompt as token ids, checked: text is tokenized, ids must be in the vocabulary."""
        if isinstance(prompt, str):
            if not is_text(prompt) or not prompt.strip():
                raise ValueError("prompt must be text (UTF-8, no lone surrogates) with a non-space character")
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

    def refusal(self, req: Request) -> Refusal | None:
        """Why the request is refused as it arrives (None: it queues): it could never fit, or a queue
        limit or the SLO admission rule turns it away (engine/admission.py)."""
        return refusal(self.config, self.scheduler, self.deployment, self.max_model_len, req)

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

    def next_step_ms(self) -> float | None:
        """When the next step starts on the modeled clock: now if there is work, the next arrival by
        time if idle, None if nothing is left to do (a fleet steps its replicas in this order)."""
        sched = self.scheduler
        if sched.waiting or sched.running or sched.swapped or sched.received or self._pending:
            return self.clock_ms
        return max(self.clock_ms, self._pending_ms[0][0]) if self._pending_ms else None

    def num_waiting(self) -> int:
        """Requests waiting for a first schedule: in the queue, or arrived during the step now running
        (what vLLM's num_requests_waiting gauge reports, and a router's queue scorer reads)."""
        due = sum(ms <= self.clock_ms for ms, _, _ in self._pending_ms)
        sched = self.scheduler
        return len(sched.waiting) + due + len(sched.incoming) + len(sched.received)

    def _idle(self) -> bool:
        sched = self.scheduler
        return not (sched.waiting or sched.running or sched.swapped or sched.received) and \
            not (self._pending and self._pending[0][0] <= self.step_index)

    # ---- the loop ---------------------------------------------------------------------------

    def step(self) -> StepRecord:
        """One turn of the loop: arrivals join the queue, the scheduler decides, the model runs,
        the outputs are applied, and the step is recorded."""
        timer = _Timer()
        events = self._take_arrivals()                    # due requests join the waiting queue
        decision = self.scheduler.schedule()              # who runs, with how many tokens; who is preempted
        for req in decision.preempted:                    # a victim queues again from this step
            req.queued_step, req.queued_ms = self.step_index, self._step_start_ms
        # The pages as planned (a request the last step's tokens stop, handed back now, still runs on its own:
        # freeing drops the block manager's table, never changes the list).
        tables = {rid: self.blocks.block_table(rid) for rid in decision.scheduled}
        handed_back = self._hand_back() if self.config.async_scheduling else []
        timer.lap("schedule_ms")
        self.runner.copy_pages(decision.swaps)            # the KV copies that swap preemption ordered
        timer.lap("swap_ms")
        sampled = self._run(decision, tables)             # one forward pass over every scheduled token
        timer.lap("forward_ms")
        chunks, events, modeled = self._postprocess(decision, sampled, events + decision.events + handed_back,
                                                    timer.timings)
        record = self.recorder.record(self.step_index, chunks, events, timer.timings, modeled)
        self.step_index += 1
        return record

    def _take_arrivals(self) -> list[Event]:
        """The requests whose arrival has come join the waiting queue, first come first queued; an
        idle engine's clock first jumps to the next arrival by time."""
        events = []
        if self._pending_ms and self._idle():
            self.clock_ms = max(self.clock_ms, self._pending_ms[0][0])
        arrived = []
        while self._pending and self._pending[0][0] <= self.step_index:
            req = heapq.heappop(self._pending)[2]
            req.arrival_ms = self.clock_ms
            arrived.append(req)
        while self._pending_ms and self._pending_ms[0][0] <= self.clock_ms:
            req = heapq.heappop(self._pending_ms)[2]
            req.arrival_step = self.step_index  # its latencies in steps count from the step it joined
            arrived.append(req)
        for req in sorted(arrived, key=lambda r: (r.arrival_ms, r.arrival_index)):
            events.append(Event("arrived", req.request_id, reasons.arrived(req), {}))
            why = self.refusal(req)  # refused when it arrives, not when it was submitted
            if why:
                req.refusal = why.reason
                self._finish(req, FinishReason.REJECTED)
                events.append(Event("rejected", req.request_id, why.reason, {"rule": why.rule}))
                continue
            req.queued_step, req.queued_ms = req.arrival_step, req.arrival_ms
            self.scheduler.add(req)
        self._step_start_ms = self.clock_ms
        return events

    def _run(self, decision: SchedulerOutput, tables: dict[str, list[int]]) -> dict[str, list[int]]:
        """The forward pass: each scheduled request's new tokens (and drafts), read against its KV pages."""
        batch = [(self.requests[rid], n, tables[rid], decision.drafts.get(rid, []))
                 for rid, n in decision.scheduled.items()]
        return self.runner.execute(batch) if batch else {}

    def _postprocess(self, decision: SchedulerOutput, sampled: dict[str, list[int]], events: list[Event],
                     timings: StepTimings) -> tuple[list[ScheduledChunk], list[Event], ModeledCost | None]:
        """The clock advances by the step's cost; each request gains its computed tokens and sampled
        tokens, those that are done finish, and the rest get their drafts for the next step. Returns the
        batch as chunks, the step's events and its modeled cost (None on this machine's wall clock)."""
        batch = [(self.requests[rid], n) for rid, n in decision.scheduled.items()]
        awaiting_output = self._in_flight is not None  # (async) a step before this one ran, and was handed back
        cost, events = self._price(batch, events)
        self.clock_ms += step_ms(timings, cost)
        chunks, in_flight = [], []
        for req, n in batch:
            tokens = sampled.get(req.request_id, [])
            chunk = self._advance(req, n, tokens, decision.drafts.get(req.request_id, []), events)
            if tokens and not chunk.discarded:
                if self.config.async_scheduling:  # handed back next step, after its decision
                    in_flight.append((req, tokens))
                else:
                    tokens = self._deliver(req, tokens, events, self.step_index)
                chunk.new_token_ids, chunk.new_token_id = tokens, tokens[-1]
                chunk.new_token_text = self.loaded.text_of(tokens)
            chunks.append(chunk)
        self._in_flight = (in_flight, self.step_index) if self.config.async_scheduling and batch else None
        if self.proposer is not None:
            for req, _ in batch:  # vLLM proposes for every request that sampled and is still decoding
                if req.request_id in sampled and not req.is_finished:
                    req.spec_token_ids = self.proposer.propose(req.all_token_ids)
        if not batch:
            events.append(Event("idle", None, self._why_idle(awaiting_output), {}))
        if cost is None:
            return chunks, events, None
        self.modeled_steps.append((cost.total_ms, cost.mfu, cost.mbu))
        return chunks, events, ModeledCost(self.deployment.name, **cost.to_dict(), clock_ms=self.clock_ms)

    def _price(self, batch: list[tuple[Request, int]], events: list[Event]) -> tuple[StepCost | None, list[Event]]:
        """The step on the deployment (engine/pricing.py); unpriced on this machine's wall clock. Under async
        scheduling its host work overlaps the GPU work of the step before, if one ran."""
        if self.deployment is None:
            return None, events
        return price_step(self.deployment, self.config, batch, events, self.requests, self._in_flight is not None)

    def _advance(self, req: Request, n: int, tokens: list[int], drafts: list[int],
                 events: list[Event]) -> ScheduledChunk:
        """Apply one step's work to a request: n more tokens computed (the drafts among them that the model
        rejected are taken back: their KV slots are written again next step), and the tokens it sampled, which
        _deliver hands to it (under async scheduling, one step later: until then they are placeholders)."""
        kind = req.chunk_kind(n - len(drafts))
        chunk = ScheduledChunk(req.request_id, kind, req.num_computed_tokens, n, draft_token_ids=list(drafts))
        if req.is_finished:  # async: its stop was handed back after this step was planned
            chunk.discarded = True
            self.counters["num_discarded_tokens"] += n
            return chunk
        if req.first_scheduled_step is None:
            req.first_scheduled_step, req.first_scheduled_ms = self.step_index, self._step_start_ms
        self.counters["num_recomputed_tokens"] += max(0, min(req.num_computed_tokens + n, req.peak_computed_tokens)
                                                      - req.num_computed_tokens)
        if kind == "prefill_chunk" and req.num_computed_tokens + n < req.num_tokens:
            events.append(Event("chunk_scheduled", req.request_id,
                                reasons.chunk_scheduled(req.num_computed_tokens, n, req.num_tokens),
                                {"start": req.num_computed_tokens, "num_tokens": n}))
        accepted = max(0, len(tokens) - 1) if drafts else 0
        req.num_computed_tokens += n - (len(drafts) - accepted)
        req.is_prefill_chunk = req.num_computed_tokens < req.num_tokens
        req.peak_computed_tokens = max(req.peak_computed_tokens, req.num_computed_tokens)
        if drafts and tokens:
            chunk.num_accepted = accepted
            self.counters["num_draft_tokens"] += len(drafts)
            self.counters["num_accepted_tokens"] += accepted
        if self.config.async_scheduling:
            req.num_output_placeholders += len(tokens)
        return chunk

    def _hand_back(self) -> list[Event]:
        """Async scheduling: the tokens the last step sampled reach the scheduler, after it planned this step.
        A request they stop has been planned into this step anyway; one preempted meanwhile gets its token all
        the same (it is real output), and is recomputed with it."""
        events: list[Event] = []
        in_flight, step = self._in_flight or ([], self.step_index)  # (None: that step ran no batch)
        for req, tokens in in_flight:
            running = req.status == RequestStatus.RUNNING  # (a preempted request's placeholders were cleared)
            if running:
                req.num_output_placeholders -= len(tokens)
            self._deliver(req, tokens, events, step, name_pages=running)
        return events

    def _deliver(self, req: Request, tokens: list[int], events: list[Event], step: int,
                 name_pages: bool = False) -> list[int]:
        """Append the tokens step `step` sampled (at the clock's now: that step's end), each checked for a stop;
        those after a stop are dropped, as vLLM drops them. name_pages (async): the pages the tokens complete
        are named for the prefix cache first, even if a stop then frees them, as vLLM's AsyncScheduler does.
        Returns the tokens kept."""
        kept, reason = [], None
        for token in tokens:
            req.output_token_ids.append(token)
            req.output_text += self.loaded.token_text(token)
            req.token_steps.append(step)
            req.token_ms.append(self.clock_ms)
            kept.append(token)
            reason = self._stop_reason(req, token)
            if reason:
                break
        if name_pages:
            self.blocks.name_full_pages(req, req.num_computed_tokens - req.num_output_placeholders)
        if reason:
            self._finish(req, reason)
            events.append(Event("finished", req.request_id, reasons.finished(req, self.step_index),
                                {"reason": reason.value}))
        return kept

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

    def _why_idle(self, awaiting_output: bool) -> str:
        return reasons.idle(self._pending[0][0] if self._pending else None,
                            self._pending_ms[0][0] if self._pending_ms else None,
                            bool(self.scheduler.waiting or self.scheduler.swapped), awaiting_output)

    # ---- reporting --------------------------------------------------------------------------

    @property
    def counters(self) -> dict[str, int]:
        """Running totals (engine.metrics.COUNTER_KEYS), kept by the scheduler as things happen."""
        return self.scheduler.counters

    def metrics(self) -> dict:
        """Per-request latencies and the run's aggregate: the numbers the lab, the CLI and the tests report."""
        sched = self.scheduler
        gauges = {"num_requests_finished": sched.num_finished, "num_requests_running": len(sched.running),
                  "num_requests_waiting": len(sched.waiting), "num_requests_swapped": len(sched.swapped),
                  "kv_cache_usage_perc": self.blocks.usage()}
        per_request = [request_metrics(r, priced=self.deployment is not None) for r in self.requests.values()]
        aggregate = aggregate_metrics(per_request, self.step_index, self.clock_ms, gauges, dict(self.counters),
                                      self.modeled_steps if self.deployment else None, Slo.of(self.config))
        return {"aggregate": aggregate, "requests": per_request}

    def run(self, max_steps: int = MAX_STEPS) -> list[StepRecord]:
        """Step until every request has finished (or max_steps), returning the records."""
        records = []
        while self.has_unfinished_requests() and len(records) < max_steps:
            records.append(self.step())
        return records
