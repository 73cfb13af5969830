"""A fleet: N real engines behind one router, on one modeled clock.

Each replica is a whole ``Engine`` (its own scheduler loop, KV pool and preset) and
all of them share one loaded model, so the weights sit in memory once. The fleet
clock is the deployment's: every replica's steps are priced on it, and a fleet step is
the next event in time, either an arrival (routed the moment it arrives) or the replica
whose next step starts first (the moment its last one ended). Arrivals go first on a tie,
so a replica's step includes the requests that arrived as it began.

What a router knows follows the real ones: the pages a replica's prefix cache holds (the
scheduler names them when it schedules a step, as KV events would report), and what the
router counts itself (requests sent; first tokens and finishes, heard when the step
that produced them ends).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass

from engine.config import EngineConfig, SamplingParams
from engine.engine import Engine
from engine.fleet.config import LIVE_FLEET_KNOBS, FleetConfig
from engine.fleet.disagg import Disaggregation, decode_rules
from engine.fleet.dynamo import DynamoRouter
from engine.fleet.llmd import LlmdRouter
from engine.fleet.records import FleetRecord, ReplicaState, RoutingDecision
from engine.fleet.router import Arrival, LeastLoaded, RoundRobin, Router
from engine.fleet.sglang import SglangRouter
from engine.kv.prefix_cache import page_hashes
from engine.limits import MAX_STEPS
from engine.model_runner import LoadedModel, load_model
from engine.records import StepRecord
from engine.request import request_id as default_id

ROUTER_CLASSES: dict[str, type[Router]] = {
    cls.name: cls for cls in (RoundRobin, LeastLoaded, DynamoRouter, LlmdRouter, SglangRouter)}


@dataclass
class Pool:
    """Replicas one router chooses among: the whole fleet, or in a disaggregated one its prefill or its
    decode replicas. The router sees them as 0, 1, ...; the fleet numbers them from `first`."""

    role: str  # 'all', 'prefill' or 'decode'
    first: int
    engines: list[Engine]
    router: Router

    def route(self, arrival: Arrival) -> RoutingDecision:
        """The router's decision, its replica numbers made the fleet's."""
        decision = self.router.route(arrival, self.engines)
        decision.pool, decision.replica = self.role, decision.replica + self.first
        for cand in decision.candidates:
            cand.replica += self.first
        return decision

    def routed(self, arrival: Arrival, decision: RoutingDecision) -> None:
        local = dataclasses.replace(decision, replica=decision.replica - self.first, candidates=[
            dataclasses.replace(c, replica=c.replica - self.first) for c in decision.candidates])
        self.router.routed(arrival, local.replica, local)


class Fleet:
    def __init__(self, config: EngineConfig, fleet: FleetConfig | None = None, loaded: LoadedModel | None = None):
        if config.deployment is None:
            raise ValueError("a fleet needs a deployment (e.g. llama-3.1-8b@h100-sxm): its replicas step side by "
                             "side on the deployment's modeled clock, which this machine's wall time cannot give")
        self.config, self.fleet = config, fleet or FleetConfig()
        self.loaded = loaded or load_model(config.model, config.device, config.dtype)
        pools, presets = self.fleet.pool_sizes(config.num_gpu_blocks), self.fleet.presets()
        self.replicas = [Engine(config.with_changes(num_gpu_blocks=n, **({"engine_preset": p} if p else {})),
                                self.loaded) for n, p in zip(pools, presets, strict=True)]
        split, n = self.fleet.num_prefill_replicas, len(pools)
        self.pools = [self._pool("all", 0, n)] if not split else [self._pool("prefill", 0, split),
                                                                   self._pool("decode", split, n)]
        self.disagg = Disaggregation(self) if split else None
        self.placement: dict[str, int] = {}  # request id -> the replica it was sent to
        self.decisions: list[RoutingDecision] = []
        self.index = 0  # fleet events so far
        self.clock_ms = 0.0
        self._arrivals: list[tuple[float, int, Arrival, SamplingParams, float]] = []
        self._heard: list[tuple[float, int, int, StepRecord]] = []  # (step end, order, replica, record)
        self._added = 0
        # Replicas whose last step could schedule nothing (their pages held for KV transfers): they wait for
        # a change (an arrival, or pages freed or filled by a transfer), not step again at the same time.
        self._stalled: set[int] = set()

    def _rules(self, role: str) -> FleetConfig:
        """The knobs a pool's router reads: the fleet's, or for decode replicas Dynamo's decode rules."""
        return decode_rules(self.fleet) if role == "decode" else self.fleet

    def _pool(self, role: str, first: int, end: int) -> Pool:
        sizes = [e.config.num_gpu_blocks for e in self.replicas[first:end]]
        rules = self._rules(role)
        router = ROUTER_CLASSES[rules.router](rules, self.config.block_size, sizes)
        return Pool(role, first, self.replicas[first:end], router)

    def pool_of(self, replica: int) -> Pool:
        return next(p for p in reversed(self.pools) if replica >= p.first)

    @property
    def router(self) -> Router:
        """The router of the fleet (of its decode replicas, when disaggregated)."""
        return self.pools[-1].router

    @router.setter
    def router(self, router: Router) -> None:
        self.pools[-1].router = router

    def retune(self, **knobs) -> None:
        """Set live fleet knobs (a router weight, the decider and its thresholds, the link) from the next
        event on: the routers keep everything they count and remember, and read the new values at the
        next arrival. The knobs that build the fleet cannot change mid-run. A bad value raises ValueError
        and changes nothing."""
        fixed = sorted(set(knobs) - LIVE_FLEET_KNOBS)
        if fixed:
            raise ValueError(f"{', '.join(fixed)} cannot change mid-run: the replicas and the router are built "
                             f"from it (live: {', '.join(sorted(LIVE_FLEET_KNOBS))})")
        self.fleet = dataclasses.replace(self.fleet, **knobs)  # checked before anything changes
        for pool in self.pools:
            pool.router.fleet = self._rules(pool.role)

    # ---- requests ---------------------------------------------------------------------------

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None, arrival_ms: float = 0.0,
                    length_scale: float = 1.0, request_id: str | None = None) -> str:
        """Queue a request at the router; it is routed when its arrival_ms comes."""
        token_ids = self.replicas[0].token_ids(prompt)
        if not (isinstance(arrival_ms, int | float) and not isinstance(arrival_ms, bool) and math.isfinite(arrival_ms)
                and arrival_ms >= 0):
            raise ValueError(f"arrival_ms must be a number >= 0; got {arrival_ms!r}")
        if not (isinstance(length_scale, int | float) and 0 < length_scale <= 1):
            raise ValueError(f"length_scale must be a fraction in (0, 1]; got {length_scale!r}")
        request_id = request_id or default_id(self._added)
        if request_id in self.placement or any(a.request_id == request_id for _, _, a, _, _ in self._arrivals):
            raise ValueError(f"request_id {request_id!r} is already in use")
        arrival = Arrival(request_id, tuple(token_ids), tuple(page_hashes(token_ids, self.config.block_size)),
                          float(arrival_ms))
        heapq.heappush(self._arrivals, (arrival.arrival_ms, self._added, arrival, params or SamplingParams(),
                                        float(length_scale)))
        self._added += 1
        return request_id

    # ---- the loop ---------------------------------------------------------------------------

    def has_unfinished_requests(self) -> bool:
        return bool(self._arrivals) or any(e.has_unfinished_requests() for e in self.replicas) or \
            bool(self.disagg and self.disagg.busy())

    def step(self) -> FleetRecord:
        """The next event: route the next arrival, move a KV cache (disaggregated), or step the replica
        whose step starts first; at equal times in that order."""
        arrival_ms = self._arrivals[0][0] if self._arrivals else math.inf
        transfer_ms = self.disagg.next_event_ms() if self.disagg else math.inf
        starts = [(e.next_step_ms(), i) for i, e in enumerate(self.replicas)
                  if e.next_step_ms() is not None and i not in self._stalled]
        start_ms, replica = min(starts) if starts else (math.inf, -1)
        if min(arrival_ms, transfer_ms, start_ms) == math.inf:
            raise RuntimeError("nothing left to do: every request has finished")
        if arrival_ms <= min(transfer_ms, start_ms):
            record = self._route(arrival_ms)
        elif transfer_ms <= start_ms:
            self.clock_ms = transfer_ms
            record = self.disagg.transfer(self.index)
        else:
            record = self._step_replica(replica, start_ms)
        self.index += 1
        if not self.has_unfinished_requests():
            self._hear(math.inf)  # the last steps' news: the router's counts end at zero
        record.replicas = [self.state_of(i) for i in range(len(self.replicas))]
        return record

    def state_of(self, replica: int) -> ReplicaState:
        """One replica as it stands now, from its engine and its router's count."""
        engine, pool = self.replicas[replica], self.pool_of(replica)
        blocks, pages = engine.blocks, engine.config.num_gpu_blocks
        return ReplicaState(replica, pool.role, engine.num_waiting(), len(engine.scheduler.running),
                            pages - blocks.num_free_blocks, blocks.num_cached_free_blocks, pages,
                            pool.router.in_flight[replica - pool.first], engine.clock_ms)

    def _route(self, now: float) -> FleetRecord:
        self.clock_ms = now
        self._hear(now)
        _, _, arrival, params, scale = heapq.heappop(self._arrivals)
        if self.disagg:
            return self.disagg.route(self.index, arrival, params, scale, now)
        decision = self.pools[0].route(arrival)
        self.place(self.pools[0], decision, arrival, params, scale, now)
        return FleetRecord(self.index, now, "route", decision.replica, decision=decision)

    def place(self, pool: Pool, decision: RoutingDecision, arrival: Arrival, params: SamplingParams, scale: float,
              now: float, hold_kv: bool = False) -> None:
        """Send the arrival where the decision says, and tell the pool's router."""
        engine = self.replicas[decision.replica]
        self.wake(decision.replica, now)
        engine.add_request(list(arrival.token_ids), params, arrival_ms=now, length_scale=scale,
                           request_id=arrival.request_id, late=now < engine.clock_ms, hold_kv=hold_kv)
        pool.routed(arrival, decision)
        self.placement.setdefault(arrival.request_id, decision.replica)
        self.decisions.append(decision)

    def _step_replica(self, replica: int, start_ms: float) -> FleetRecord:
        self.clock_ms = start_ms
        self._hear(start_ms)
        record = self.replicas[replica].step()
        if not record.batch and all(e.kind in ("blocked", "idle") for e in record.events):
            self._stalled.add(replica)  # it changed nothing: stepping it again now would change nothing either
        heapq.heappush(self._heard, (record.modeled.clock_ms, self.index, replica, record))
        if self.disagg:
            self.disagg.stepped(replica, record, start_ms)
        return FleetRecord(self.index, start_ms, "step", replica, step=record)

    def wake(self, replica: int, now: float) -> None:
        """Something changed for a stalled replica: it may step again, from now."""
        if replica in self._stalled:
            self._stalled.discard(replica)
            self.replicas[replica].wait_until(now)

    def _hear(self, now: float) -> None:
        """The router hears each step's first tokens and finishes when the step ends."""
        while self._heard and self._heard[0][0] <= now:
            _, _, replica, record = heapq.heappop(self._heard)
            pool = self.pool_of(replica)
            pool.router.observe(replica - pool.first, record)

    def run(self, max_events: int = MAX_STEPS * 8) -> list[FleetRecord]:
        """Every event until every request has finished (or max_events)."""
        records = []
        while self.has_unfinished_requests() and len(records) < max_events:
            records.append(self.step())
        return records
