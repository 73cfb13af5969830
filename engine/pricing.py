"""A step priced on a deployment (engine/hardware.py), and the reasons that quote what it cost there.

The engine runs a small model; a deployment says what the same step would cost a
production model on a named GPU. Requests scaled down to fit the small model
(length_scale) are priced at their real size.
"""

from __future__ import annotations

from engine.hardware import Deployment, StepCost
from engine.records import Event
from engine.request import Request


def price_step(dep: Deployment, block_size: int, batch: list[tuple[Request, int]], events: list[Event],
               requests: dict[str, Request]) -> tuple[StepCost, list[Event]]:
    """The step's cost, each request's new tokens against its cached context, plus the swap copies
    (read off the step's swap events); and the events, where a swap's or a recompute's reason gains
    what it costs on the deployment."""

    def real(tokens: float, e: Event) -> float:  # a request scaled to fit the small model, at full size
        return tokens / requests[e.request_id].length_scale

    copied = {i: real(len(e.data["blocks"]) * block_size, e) for i, e in enumerate(events)
              if e.kind in ("swapped_out", "swapped_in")}
    cost = dep.step_cost([(n / req.length_scale, req.num_computed_tokens / req.length_scale) for req, n in batch],
                         sum(copied.values()))
    priced = []
    for i, e in enumerate(events):
        if i in copied:
            tokens = copied[i]
            e = Event(e.kind, e.request_id, f"{e.reason}; {tokens * dep.kv_bytes_per_token / 1e6:.1f} MB of KV at "
                      f"{dep.model}'s size, {dep.swap_ms(tokens) * 1000:.0f} us over {dep.host_link} (modeled)", e.data)
        elif e.kind == "recompute_started":
            alone = dep.step_cost([(real(e.data["tokens"], e), 0)]).total_ms
            e = Event(e.kind, e.request_id, f"{e.reason}; about {alone:.1f} ms of prefill on {dep.name} if it ran "
                      "alone (modeled)", e.data)
        priced.append(e)
    return cost, priced
