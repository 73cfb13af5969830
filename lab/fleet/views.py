"""What the Fleet page shows, read from FleetRecords alone: each request's journey through the
fleet, a routing decision as a table, and one line per event.

Pure functions of the records up to the event on screen, so looking back at a past event
shows the fleet as it was then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.fleet.records import FleetRecord, RoutingDecision


@dataclass
class Journey:
    """One request's way through the fleet, on the fleet clock (None: not yet)."""

    request_id: str
    arrival_ms: float
    replica: int  # where it runs (decodes, when disaggregated)
    prefill_replica: int | None = None  # disaggregated: where its prompt was prefilled
    transfer_start_ms: float | None = None
    transfer_end_ms: float | None = None
    kv_bytes: float = 0.0
    finished_ms: float | None = None  # the end of the step that finished it (on the replica it ran on last)


def journeys(records: Sequence[FleetRecord]) -> dict[str, Journey]:
    """Request id -> its journey, in arrival order."""
    out: dict[str, Journey] = {}
    for record in records:
        if record.kind == "route":
            d = record.decision
            out[d.request_id] = Journey(d.request_id, record.clock_ms, d.replica,
                                        record.prefill.replica if record.prefill else None)
        elif record.handoff is not None and record.handoff.request_id in out:
            h, j = record.handoff, out[record.handoff.request_id]
            j.transfer_start_ms, j.transfer_end_ms, j.kv_bytes = h.transfer_start_ms, h.transfer_end_ms, h.bytes
        elif record.kind == "step":
            for event in record.step.events:
                j = out.get(event.request_id)
                if event.kind in ("finished", "rejected") and j is not None and record.replica == j.replica:
                    j.finished_ms = record.step.modeled.clock_ms
    return out


def on_link(trips: Iterable[Journey], now_ms: float) -> list[Journey]:
    """The requests whose KV cache is on the link at now_ms (one arriving then included)."""
    return [j for j in trips if j.transfer_start_ms is not None and j.transfer_start_ms <= now_ms
            and (j.transfer_end_ms is None or j.transfer_end_ms >= now_ms)]


def decision_rows(decision: RoutingDecision) -> list[dict[str, object]]:
    """One row per candidate replica: what the router read, each weighted term, the total, and which won."""
    rows = []
    for cand in decision.candidates:
        row: dict[str, object] = {"replica": cand.replica}
        row |= {f"read: {k}": v for k, v in cand.inputs.items()}
        row |= {f"term: {k}": v for k, v in cand.terms.items()}
        row["total"] = cand.total
        row["chosen"] = "✓" if cand.replica == decision.replica else ""
        rows.append(row)
    return rows


def describe(record: FleetRecord) -> str:
    """The event in one line, as the page's heading and event list say it."""
    at = f"at {record.clock_ms:,.1f} ms"
    if record.kind == "route":
        d = record.decision
        where = f": prefill on replica {record.prefill.replica}, decode on replica {d.replica}" if record.prefill \
            else f" to replica {d.replica}"
        return f"{d.request_id} arrives {at} and is routed{where}" + (f" ({record.placed})" if record.placed else "")
    if record.kind == "step":
        s = record.step
        tokens = sum(c.num_tokens for c in s.batch)
        took = s.modeled.clock_ms - record.clock_ms
        seqs = f"{len(s.batch)} sequence{'' if len(s.batch) == 1 else 's'}"
        return f"replica {record.replica} runs its step {s.step} {at}: {seqs}, {tokens} " \
               f"token{'' if tokens == 1 else 's'}, {took:,.2f} ms"
    h = record.handoff
    if record.kind == "kv_arrived":
        return f"{h.request_id}'s KV cache arrives on replica {h.decode_replica} {at}, after " \
               f"{h.transfer_end_ms - h.transfer_start_ms:,.2f} ms on the link"
    if h.transfer_start_ms is None:
        return f"{h.request_id}'s KV cache waits {at}: replica {h.decode_replica} has no free pages for it yet"
    return f"{h.request_id}'s KV cache ({h.tokens} tokens; {h.bytes / 2**20:,.1f} MiB at the trace's full length) " \
           f"goes from replica {h.prefill_replica} to replica {h.decode_replica}, on the link from " \
           f"{h.transfer_start_ms:,.1f} ms"
