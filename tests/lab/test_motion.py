"""A step's motion (lab/charts/motion.py), read against the figures it animates.

Each card rule must start the card where the previous step's queue figure drew that request,
read back from that figure's bar trace (not from the lanes the rules were made from); cards
that stayed put get no rule; the pool bar starts at the previous step's length; and nothing
moves for a visitor who asks for reduced motion.
"""

from __future__ import annotations

import re

import pytest

from engine import Engine, EngineConfig
from engine.workload import WorkloadItem, submit
from lab.charts import budget, motion, queues

CARD_RULE = re.compile(
    r"@keyframes lab-card-(\d+) \{from \{(opacity: 0; )?transform: translate\((-?\d+)%, (-?\d+)%\)\}\}")


@pytest.fixture(scope="module")
def records(tiny_llama):
    """A pool too small for its burst: cards queue, are admitted, preempted, swapped and finish."""
    engine = Engine(EngineConfig(model=tiny_llama, block_size=8, num_gpu_blocks=14, num_cpu_blocks=6,
                                 preemption_mode="swap", max_num_batched_tokens=48))
    submit(engine, [WorkloadItem(f"Request {i} says hello", max_tokens=16 + 3 * i, arrival_step=i // 3,
                                 ignore_eos=True) for i in range(7)])
    return engine.run(300)


def drawn_cards(records) -> list[tuple[str, float, float]]:
    """(request id, place, lane y) of each card, in trace order, as the queue figure draws them."""
    cards = queues.figure(records).data[0]
    return [(re.match(r"<b>(\w+)</b>", text).group(1), base, y)
            for text, base, y in zip(cards.text, cards.base, cards.y, strict=True)]


def test_every_card_starts_where_the_step_before_drew_it(records):
    kinds = set()
    for n in range(2, len(records) + 1):
        shown, earlier = drawn_cards(records[:n]), {rid: (x, y) for rid, x, y in drawn_cards(records[:n - 1])}
        waiting_before = list(records[n - 2].waiting)
        rules = {int(i): (bool(fade), int(dx), int(dy)) for i, fade, dx, dy in CARD_RULE.findall(
            motion.card_motion(records[:n]))}
        new = 0
        for i, (rid, x, y) in enumerate(shown, start=1):
            if rid in earlier:
                old_x, old_y = earlier[rid]
                want = (False, round((old_x - x) / queues.CARD_WIDTH * 100),
                        round((y - old_y) / queues.CARD_HEIGHT * 100))
                if (old_x, old_y) == (x, y):
                    assert i not in rules, f"step {records[n - 1].step}: {rid} stayed put but moves"
                    continue
                kinds.add("moved" if old_y == y else "changed lane")
            elif rid in waiting_before:  # past the last card drawn: it comes from the lane's "+N"
                continue
            else:  # arrived this step: at the waiting queue's tail
                start = min(len(waiting_before) + new, queues.MAX_CARDS)
                new += 1
                want = (True, round((start - x) / queues.CARD_WIDTH * 100),
                        round((y - queues.LANE_Y["waiting"]) / queues.CARD_HEIGHT * 100))
                kinds.add("arrived")
            assert rules.get(i) == want, f"step {records[n - 1].step}: card {i} ({rid})"
    assert kinds == {"moved", "changed lane", "arrived"}  # the run exercised all three


def test_a_step_where_no_card_moves_has_no_card_motion(records):
    still = [n for n in range(2, len(records) + 1) if drawn_cards(records[:n]) == drawn_cards(records[:n - 1])]
    assert still, "the run has no step where the queues stand still"
    for n in still:
        assert "lab-card" not in motion.card_motion(records[:n])


def test_the_pool_bar_grows_from_the_pages_used_the_step_before(records):
    changes = 0
    for previous, record in zip(records, records[1:], strict=False):
        used, was = (r.budget.gpu_blocks_used - r.budget.gpu_blocks_cached for r in (record, previous))
        shown = budget.figure(record).data[2].x[0] if used else 0  # the KV row's first segment: pages in use
        css = motion.pool_motion(record, previous)
        if used and was != used:
            assert shown == used
            assert f"scaleX({was / shown:.3f})" in css
            changes += 1
        else:
            assert css == ""
    assert changes > 3


def test_all_motion_is_off_for_reduced_motion(records):
    for n in range(1, len(records) + 1):
        css = motion.step_css(records[:n])
        assert css == "" or (css.startswith("@media (prefers-reduced-motion: no-preference) {") and css.endswith("}"))
    assert motion.step_css(records[:1]), "the first step (cards arriving) has motion"
