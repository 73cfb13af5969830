"""The waiting queues serve in exactly the order their policy defines, checked against
a plain list scanned at every pick, and a live policy switch reorders what waits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine import SamplingParams
from engine.request import Request
from engine.waiting_queue import waiting_queue
from tests.engine.test_engine_behaviour import greedy, make, prompt

# ("add", priority) a new arrival, ("preempted", None) the last request popped comes back, ("pop", None)
ops = st.lists(st.one_of(st.tuples(st.just("add"), st.integers(-2, 2)),
                         st.tuples(st.sampled_from(["preempted", "pop"]), st.none())), max_size=60)


@given(policy=st.sampled_from(["fcfs", "priority"]), ops=ops)
def test_queue_serves_the_order_a_full_scan_would(policy, ops):
    queue, reference, popped, arrivals = waiting_queue(policy), [], [], 0

    def add(req: Request, front: bool) -> None:
        (queue.add_preempted if front else queue.add)(req)
        reference.insert(0, req) if front and policy == "fcfs" else reference.append(req)

    for op, priority in ops:
        if op == "add":
            add(Request(f"r{arrivals}", [1], SamplingParams(), priority=priority, arrival_index=arrivals), False)
            arrivals += 1
        elif op == "preempted" and popped:
            add(popped.pop(), True)
        elif op == "pop" and reference:
            best = min(reference, key=lambda r: (r.priority, r.arrival_index)) if policy == "priority" \
                else reference[0]
            assert queue.peek() is best
            popped.append(queue.pop())
            reference.remove(best)
        assert len(queue) == len(reference)
        served = sorted(reference, key=lambda r: (r.priority, r.arrival_index)) if policy == "priority" \
            else reference
        assert list(queue) == served


def test_switching_to_priority_mid_run_serves_the_most_urgent_first(tiny_llama):
    # vLLM v0's rule (preempt_on_admission), so the urgent request can be seen taking a seat.
    eng = make(tiny_llama, max_num_seqs=1, scheduling_policy="fcfs", preempt_on_admission=True)
    for i, priority in enumerate([1, 2, 1, 0]):
        eng.add_request(prompt(30 * i, 5), greedy(3), priority=priority)
    first = eng.step()
    assert first.running == ["r0"] and first.waiting == ["r1", "r2", "r3"]  # arrival order
    eng.update_config(scheduling_policy="priority")
    rec = eng.step()
    # r3 (priority 0) takes r0's seat; what waits is listed in the order priority serves it.
    assert rec.running == ["r3"] and rec.waiting == ["r0", "r2", "r1"]
    order = [e.request_id for e in rec.events if e.kind == "admitted"]
    while eng.has_unfinished_requests():
        order += [e.request_id for e in eng.step().events if e.kind == "admitted"]
    assert order == ["r3", "r0", "r2", "r1"]
