"""The waiting queue, kept in the order the scheduling policy serves it.

fcfs serves in arrival order, and a request preempted by recompute goes back to
the front: it has waited longest. priority serves the lowest priority value
first, ties by arrival (Request.arrival_order), so it is a heap: picking the
next request costs log n instead of a scan of everything waiting, which matters
with thousands waiting.
vLLM v1 keeps the same two queues (FCFSRequestQueue, PriorityRequestQueue).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from engine.request import Request


class FcfsQueue:
    policy = "fcfs"

    def __init__(self, requests: Iterable[Request] = ()):
        self._queue = deque(requests)

    def add(self, req: Request) -> None:
        self._queue.append(req)

    def add_preempted(self, req: Request) -> None:
        self._queue.appendleft(req)

    def peek(self) -> Request:
        return self._queue[0]

    def remove(self, req: Request) -> None:
        self._queue.remove(req)

    def pop(self) -> Request:
        return self._queue.popleft()

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)

    def __len__(self) -> int:
        return len(self._queue)


class PriorityQueue:
    policy = "priority"

    def __init__(self, requests: Iterable[Request] = ()):
        # arrival_order ends in the unique arrival_index, so ties never fall through to comparing requests.
        self._heap = [(r.priority, r.arrival_order, r) for r in requests]
        heapq.heapify(self._heap)

    def add(self, req: Request) -> None:
        heapq.heappush(self._heap, (req.priority, req.arrival_order, req))

    # A preempted request's priority and arrival already say where it belongs.
    add_preempted = add

    def peek(self) -> Request:
        return self._heap[0][2]

    def remove(self, req: Request) -> None:
        """Rare (a preempted request stopped by a token still in flight): a rebuild is cheap enough."""
        self._heap = [entry for entry in self._heap if entry[2] is not req]
        heapq.heapify(self._heap)

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[2]

    def __iter__(self) -> Iterator[Request]:
        """In the order they will be served (the heap itself is only partly sorted)."""
        return (entry[2] for entry in sorted(self._heap))

    def __len__(self) -> int:
        return len(self._heap)


def waiting_queue(policy: str, requests: Iterable[Request] = ()) -> FcfsQueue | PriorityQueue:
    """A queue for policy holding requests; switching policy mid-run rebuilds the queue from
    the old one's serving order, so fcfs after priority keeps the order priority left."""
    return (PriorityQueue if policy == "priority" else FcfsQueue)(requests)
