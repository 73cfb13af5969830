"""The fleet's knobs: how many replicas, which router, and the router's own weights, one row each.

The rows are the engine's ``Knob`` type (engine/knobs.py), so they read, check and print
as every other knob does; a row in group 'router' is live (read at each arrival), one in
group 'fleet' builds the fleet; the Dynamo rows keep the names of Dynamo's ``KvRouterConfig``.
Each replica's engine knobs are the ``EngineConfig`` beside this one; a replica may have
a pool of its own size (``replica_gpu_blocks``), so a student can watch a router cope with a
small replica.
"""

from __future__ import annotations

import dataclasses
import re

from engine.fleet.links import KV_LINKS
from engine.knobs import ENGINE_PRESETS, Knob

ROUTERS = ("round_robin", "least_loaded", "dynamo", "llmd", "sglang")
DECIDERS = ("always", "llmd_prefix", "dynamo_conditional")
MAX_REPLICAS = 64

FLEET_KNOBS: tuple[Knob, ...] = (
    Knob("num_replicas", int, 2, "engine replicas behind the router, each with its own scheduler loop and KV pool "
         "(one loaded model shared)", "fleet", low=1, high=MAX_REPLICAS),
    Knob("router", str, "dynamo", "which replica an arrival goes to: 'round_robin' (in turn), 'least_loaded' "
         "(fewest requests in flight), 'dynamo' (NVIDIA Dynamo's KV router: prefill and decode blocks, less the "
         "prefix the replica already caches), 'llmd' (llm-d's endpoint picker: weighted queue, KV-usage and "
         "prefix scores) or 'sglang' (SGLang router's cache-aware policy: the longest prefix seen, unless load is "
         "out of balance)", "fleet", choices=ROUTERS),
    Knob("replica_gpu_blocks", str, None, "KV pool sizes, one per replica, comma-separated (e.g. 64,64,16); none: "
         "every replica has num_gpu_blocks", "fleet", optional=True),
    Knob("replica_presets", str, None, "engine presets, one per replica, comma-separated (e.g. vllm_v1,vllm_v1,"
         "sglang); none: every replica runs the engine knobs' own preset", "fleet", optional=True),
    Knob("num_prefill_replicas", int, 0, "disaggregated serving: the first N replicas only prefill, the rest only "
         "decode, each request's KV copied between them over kv_link (0: every replica does both)", "fleet", low=0,
         high=MAX_REPLICAS - 1),
    Knob("kv_link", str, "ib-ndr", "the link KV caches cross from prefill to decode replicas: " + ", ".join(KV_LINKS)
         + " (engine/fleet/links.py)", "router", choices=tuple(KV_LINKS)),
    Knob("disagg_decider", str, "always", "which requests are disaggregated: 'always', 'llmd_prefix' (llm-d: when "
         "the decode replica would have non_cached_tokens or more to compute) or 'dynamo_conditional' (Dynamo: "
         "not when the prompt is short or mostly cached there)", "router", choices=DECIDERS),
    Knob("non_cached_tokens", int, 0, "llmd_prefix: disaggregate when this many prompt tokens (full size) are "
         "not cached on the decode replica; 0: always (llm-d's default)", "router", low=0, high=10_000_000),
    Knob("conditional_disagg_eff_isl_threshold", int, 2048, "dynamo_conditional: prefill on the decode replica "
         "when fewer prompt tokens than this (full size) are not cached there ... (Dynamo's default 2048)",
         "router", low=0, high=10_000_000),
    Knob("conditional_disagg_eff_isl_ratio_threshold", float, 0.7, "dynamo_conditional: ... and they are below "
         "this share of the prompt (Dynamo's default 0.7)", "router", low=0.0, high=1.0, noun="a fraction"),
    Knob("router_seed", int, 0, "seed for the router's tie-breaks and sampling", "fleet", low=0, high=2**31 - 1),
    Knob("prefill_load_scale", float, 1.0, "dynamo: weight of the prefill blocks left to compute (Dynamo's "
         "KvRouterConfig.prefill_load_scale)", "router", low=0.0, high=1000.0),
    Knob("overlap_score_credit", float, 1.0, "dynamo: blocks of prefill credited per block the replica already "
         "caches (KvRouterConfig.overlap_score_credit)", "router", low=0.0, high=1000.0),
    Knob("decode_active_request_weight", float, 0.0, "dynamo: blocks of cost per request in flight on the replica "
         "(KvRouterConfig.decode_active_request_weight)", "router", low=0.0, high=1000.0),
    Knob("queue_scorer_weight", float, 2.0, "llmd: weight of the queue scorer, (maxQ - q) / (maxQ - minQ) "
         "(llm-d's default 2)", "router", low=0.0, high=1000.0),
    Knob("kv_cache_utilization_scorer_weight", float, 2.0, "llmd: weight of the KV cache scorer, 1 - usage "
         "(llm-d's default 2)", "router", low=0.0, high=1000.0),
    Knob("prefix_cache_scorer_weight", float, 3.0, "llmd: weight of the prefix scorer, matched blocks / prompt "
         "blocks from the router's own index (llm-d's default 3)", "router", low=0.0, high=1000.0),
    Knob("cache_threshold", float, 0.5, "sglang: the share of a prompt a replica must have seen to be chosen for "
         "it (SGLang router's default 0.5)", "router", low=0.0, high=1.0, noun="a fraction"),
    Knob("balance_abs_threshold", int, 32, "sglang: load is out of balance when the most and fewest requests in "
         "flight differ by more than this (default 32) ...", "router", low=0, high=100_000),
    Knob("balance_rel_threshold", float, 1.1, "sglang: ... and the most is above this many times the fewest "
         "(default 1.1)", "router", low=1.0, high=1000.0),
    Knob("max_tree_size", int, 10_000, "sglang: tokens of sent prompts the router remembers per replica, least "
         "recently used forgotten first (default 10000)", "fleet", low=1, high=10_000_000),
    Knob("router_temperature", float, 0.0, "dynamo: 0 picks the cheapest replica (ties at random); above 0, "
         "softmax sampling over normalised costs (KvRouterConfig.router_temperature)", "router", low=0.0, high=100.0),
)
FLEET_KNOB = {knob.name: knob for knob in FLEET_KNOBS}
# The rows read afresh at each arrival (group 'router'): a running fleet takes a new value from its next
# event (Fleet.retune). The rest build the fleet (replicas, pools, the router and what it remembers).
LIVE_FLEET_KNOBS = frozenset(knob.name for knob in FLEET_KNOBS if knob.live)


class _FleetRules:
    """What FleetConfig does beyond holding its fields (which come from FLEET_KNOBS)."""

    ROWS: tuple[Knob, ...] = ()

    def __post_init__(self) -> None:
        for knob in self.ROWS:
            knob.check(getattr(self, knob.name))
        self.pool_sizes(1)  # a malformed list is named now, not when the fleet is built
        self.presets()
        if self.num_prefill_replicas >= self.num_replicas:
            raise ValueError(f"num_prefill_replicas must leave at least one decode replica: it is "
                             f"{self.num_prefill_replicas} of num_replicas={self.num_replicas}")

    def pool_sizes(self, num_gpu_blocks: int) -> list[int]:
        """Each replica's KV pool, in pages."""
        if self.replica_gpu_blocks is None:
            return [num_gpu_blocks] * self.num_replicas
        parts = [p.strip() for p in self.replica_gpu_blocks.split(",")]
        sizes_ok = all(re.fullmatch(r"[0-9]{1,7}", p) and 0 < int(p) <= 1_000_000 for p in parts)  # not isdigit(): "²"
        if len(parts) != self.num_replicas or not sizes_ok:
            raise ValueError(f"replica_gpu_blocks must list {self.num_replicas} pool sizes in [1, 1000000], one per "
                             f"replica, comma-separated; got {self.replica_gpu_blocks!r}")
        return [int(p) for p in parts]

    def presets(self) -> list[str | None]:
        """Each replica's engine preset (None: the engine knobs' own)."""
        if self.replica_presets is None:
            return [None] * self.num_replicas
        parts = [p.strip() for p in self.replica_presets.split(",")]
        if len(parts) != self.num_replicas or not all(p in ENGINE_PRESETS for p in parts):
            raise ValueError(f"replica_presets must list {self.num_replicas} engine presets, one per replica, "
                             f"comma-separated, each one of {', '.join(ENGINE_PRESETS)}; got {self.replica_presets!r}")
        return parts

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


FleetConfig = dataclasses.make_dataclass(
    "FleetConfig", [(k.name, k.annotation, dataclasses.field(default=k.default)) for k in FLEET_KNOBS],
    bases=(_FleetRules,), namespace={"ROWS": FLEET_KNOBS}, frozen=True)
FleetConfig.__module__ = __name__
FleetConfig.__doc__ = "The fleet's knobs: one field per row of FLEET_KNOBS, checked by its row."
