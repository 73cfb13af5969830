"""Prefill and decode apart: a disaggregated fleet's deciders and KV transfers.

The first num_prefill_replicas replicas only prefill; the rest only decode. For each arrival
the decode pool's router picks a decode replica, then the decider says whether to prefill it
elsewhere:

- ``always``: every request (llm-d's always-disagg decider; Dynamo without conditional disagg);
- ``llmd_prefix``: when the tokens the decode replica has not cached reach non_cached_tokens (0:
  always), as llm-d-inference-scheduler ``pkg/plugins/profile/prefix_disagg_decider.go`` at
  17f32e6c7d1e decides;
- ``dynamo_conditional``: Dynamo's "isl_bounding" conditional disaggregation (ai-dynamo-runtime
  1.6.1, ``KvRouterConfig.conditional_disagg_*``): prefill on the decode replica when the
  effective prompt (its tokens not cached there) is below conditional_disagg_eff_isl_threshold
  and below conditional_disagg_eff_isl_ratio_threshold of the prompt.

A disaggregated request runs on a prefill replica with max_tokens 1 (it samples the first
token there, as vLLM's and Dynamo's P/D do) and keeps its pages when it finishes. Then the
decode replica takes pages for the prompt (its own cached prefix, and new pages for the rest;
if it has no room, the request waits for its next step), the pages are copied for real from
one pool's tensors to the other's, and the link carries them for transfer_ms (one transfer
at a time from each prefill replica). When they have arrived the prefill replica's pages go
back to its pool and the decode replica schedules the request as a decode. Prompt lengths are
the engine's (scaled); the decider's thresholds and the bytes are at full size.
"""

from __future__ import annotations

import dataclasses
import heapq
import math

from engine.config import SamplingParams
from engine.fleet.config import FleetConfig
from engine.fleet.links import transfer_bytes, transfer_ms
from engine.fleet.records import FleetRecord, Handoff
from engine.fleet.router import Arrival, cached_prefix_pages
from engine.records import StepRecord
from engine.request import FinishReason


def decode_rules(fleet: FleetConfig) -> FleetConfig:
    """The decode pool's router rules: Dynamo routes decode by load alone (its decode router forces the
    overlap credit to 0 and tracks no prefill tokens: the prompt was prefilled elsewhere)."""
    return dataclasses.replace(fleet, overlap_score_credit=0.0, prefill_load_scale=0.0)


def decide(fleet: FleetConfig, prompt_tokens: int, cached_tokens: int, scale: float) -> tuple[bool, str]:
    """Disaggregate this request? And why, in words. Tokens are the engine's; thresholds are full size."""
    uncached, prompt = (prompt_tokens - cached_tokens) / scale, prompt_tokens / scale
    if fleet.disagg_decider == "always":
        return True, "every request is prefilled on a prefill replica"
    if fleet.disagg_decider == "llmd_prefix":
        n = fleet.non_cached_tokens
        if n <= 0 or uncached >= n:
            return True, f"{uncached:.0f} prompt tokens are not cached on the decode replica (threshold {n})"
        return False, f"only {uncached:.0f} prompt tokens are not cached on the decode replica (< {n}): it prefills"
    short = uncached < fleet.conditional_disagg_eff_isl_threshold
    cached_enough = uncached / max(prompt, 1.0) < fleet.conditional_disagg_eff_isl_ratio_threshold
    if short and cached_enough:
        ratio = 100 * fleet.conditional_disagg_eff_isl_ratio_threshold
        return False, (f"effective prompt {uncached:.0f} tokens < {fleet.conditional_disagg_eff_isl_threshold} and "
                       f"{100 * uncached / max(prompt, 1.0):.0f}% of it < {ratio:.0f}%: the decode replica prefills")
    return True, f"effective prompt {uncached:.0f} of {prompt:.0f} tokens: prefilled apart"


class Disaggregation:
    """A fleet's prefill/decode split: where each request goes, and its KV's journey between them."""

    def __init__(self, fleet):
        self.fleet = fleet
        self.handoffs: dict[str, Handoff] = {}
        self.params: dict[str, SamplingParams] = {}
        self._events: list[tuple[float, int, str, str]] = []  # (time, order, 'start' or 'end', request id)
        self._order = 0
        self._link_free = [0.0] * fleet.fleet.num_prefill_replicas  # when each prefill replica's NIC is free
        self._waiting: dict[int, list[str]] = {}  # decode replica -> requests waiting for its pages
        self.deployment = fleet.replicas[0].deployment

    def busy(self) -> bool:
        return bool(self._events or any(self._waiting.values()))

    def next_event_ms(self) -> float:
        return self._events[0][0] if self._events else math.inf

    def _push(self, at: float, kind: str, rid: str) -> None:
        heapq.heappush(self._events, (at, self._order, kind, rid))
        self._order += 1

    # ---- an arrival ---------------------------------------------------------------------------

    def route(self, index: int, arrival: Arrival, params: SamplingParams, scale: float, now: float) -> FleetRecord:
        f = self.fleet
        prefill_pool, decode_pool = f.pools
        decision = decode_pool.route(arrival)
        decode = f.replicas[decision.replica]
        cached = cached_prefix_pages(decode, arrival.page_hashes) * f.config.block_size
        apart, why = decide(f.fleet, len(arrival.token_ids), min(cached, len(arrival.token_ids)), scale)
        if apart and params.max_tokens == 1:
            apart, why = False, "its one output token is its prefill's: there is nothing to decode apart"
        if not apart:
            f.place(decode_pool, decision, arrival, params, scale, now)
            return FleetRecord(index, now, "route", decision.replica, decision=decision, placed=why)
        prefill = prefill_pool.route(arrival)
        first = dataclasses.replace(params, max_tokens=1)
        f.place(prefill_pool, prefill, arrival, first, scale, now, hold_kv=True)
        decode_pool.routed(arrival, decision)  # the decode replica's load counts it from now
        f.placement[arrival.request_id] = decision.replica
        self.handoffs[arrival.request_id] = Handoff(arrival.request_id, prefill.replica, decision.replica, why)
        self.params[arrival.request_id] = params
        return FleetRecord(index, now, "route", decision.replica, decision=decision, prefill=prefill, placed=why)

    # ---- a replica's step ---------------------------------------------------------------------

    def stepped(self, replica: int, record: StepRecord, start_ms: float) -> None:
        """After a replica's step: a prefill done starts its KV's journey when the step ends; a decode
        replica's step may have freed pages that a waiting transfer needs, or begun a received request."""
        end = record.modeled.clock_ms
        for event in record.events:
            h = self.handoffs.get(event.request_id)
            if h is None:
                continue
            if event.kind == "finished" and replica == h.prefill_replica:
                self._prefilled(h, end)
            elif event.kind == "kv_received" and replica == h.decode_replica:
                h.decode_start_ms = start_ms
        for rid in self._waiting.pop(replica, []):
            self._push(end, "start", rid)

    def _prefilled(self, h: Handoff, end: float) -> None:
        prefill = self.fleet.replicas[h.prefill_replica]
        req, params = prefill.requests[h.request_id], self.params[h.request_id]
        h.prefill_done_ms = end
        token = req.output_token_ids[-1]
        stop = (token in prefill.loaded.eos_token_ids and not params.ignore_eos) or token in params.stop_token_ids
        if stop:  # its first token ended it: nothing to decode
            req.finish_reason = FinishReason.STOP if token in params.stop_token_ids else FinishReason.EOS
            prefill.release(h.request_id)
            decode_pool = self.fleet.pools[1]  # it was counted on its decode replica from its arrival
            decode_pool.router.forget(h.decode_replica - decode_pool.first, h.request_id)
            del self.handoffs[h.request_id]
            self.fleet.placement[h.request_id] = h.prefill_replica
            return
        self._push(end, "start", h.request_id)

    # ---- the transfer -------------------------------------------------------------------------

    def transfer(self, index: int) -> FleetRecord:
        now, _, kind, rid = heapq.heappop(self._events)
        h = self.handoffs[rid]
        decode = self.fleet.replicas[h.decode_replica]
        if kind == "end":
            self.fleet.replicas[h.prefill_replica].release(rid)
            self.fleet.wake(h.prefill_replica, now)  # its pages are free again
            self.fleet.wake(h.decode_replica, now)
            decode.kv_arrived(rid, now)
            h.transfer_end_ms = now
            return FleetRecord(index, now, "kv_arrived", h.decode_replica, handoff=dataclasses.replace(h))
        prefill = self.fleet.replicas[h.prefill_replica]
        got = decode.receive(prefill.requests[rid], self.params[rid])
        if got is None:  # no room on the decode replica: try again when its next step ends
            self._waiting.setdefault(h.decode_replica, []).append(rid)
            return FleetRecord(index, now, "kv_transfer", h.decode_replica, handoff=dataclasses.replace(h))
        table, cached = got
        source = prefill.blocks.block_table(rid)
        pages = -(-prefill.requests[rid].num_prompt_tokens // decode.config.block_size)
        decode.runner.cache.copy_from(prefill.runner.cache, list(zip(source[cached:pages], table[cached:pages],
                                                                     strict=True)))
        req = prefill.requests[rid]
        h.pages_reserved_ms, h.cached_pages = now, cached
        h.tokens = max(0, req.num_prompt_tokens - cached * decode.config.block_size)
        full = h.tokens / req.length_scale
        h.bytes = transfer_bytes(self.deployment, full)
        link = h.prefill_replica
        h.transfer_start_ms = max(now, self._link_free[link])
        self._link_free[link] = h.transfer_start_ms + transfer_ms(self.deployment, full, self.fleet.fleet.kv_link)
        self._push(self._link_free[link], "end", rid)
        return FleetRecord(index, now, "kv_transfer", h.decode_replica, handoff=dataclasses.replace(h))
