"""A step as motion: CSS keyframes that play each chart's change from the previous step.

Plotly's own transitions cannot run between two steps here: Streamlit gives a chart whose
figure changed a new element (its id includes the figure), so Plotly draws it afresh rather
than easing from the old one. So each chart is drawn as it is after the step, and these rules
start the parts that changed where the step before had them: a card slides in from its old
lane and place (a new one from the waiting queue's tail), the KV pool's used bar grows or
shrinks from its old length, and the pages that changed pop. Both ends come from the engine's
records; nothing in between is simulated. The browser plays the rules once, when it draws
the new chart, and not at all for a visitor who asks for reduced motion.
"""

from __future__ import annotations

from engine.records import StepRecord
from lab.charts import budget, queues

# Shorter than a step at the speed Play delivers (about 400 ms a step here, see the header); a
# faster next step just replaces the chart mid-motion.
MOTION_MS = 350


def _rule(selector: str, name: str, frame: str, origin: str = "center", delay_ms: int = 0) -> str:
    """The elements `selector` names start at `frame` (CSS declarations) and ease to where they
    are; `backwards` holds them at the start through the delay and lets go at the end."""
    return (f"@keyframes {name} {{from {{{frame}}}}}\n"
            f"{selector} {{transform-box: fill-box; transform-origin: {origin}; "
            f"animation: {name} {MOTION_MS}ms cubic-bezier(0.3, 0, 0.2, 1) {delay_ms}ms backwards}}\n")


def card_motion(records: list[StepRecord]) -> str:
    """Each card that moved, from its place after the step before (in its own box's percent,
    so no pixel size is needed: a place along a lane is 1/CARD_WIDTH of a card's width). A
    request new this step arrived at the waiting queue's tail: it fades in there, and slides on
    if the scheduler admitted it in the same step."""
    earlier = queues.lanes(records[:-1]) if len(records) > 1 else {lane: [] for lane in queues.LANES}
    # Places past the last card drawn are where the lane's "+N" note is.
    before = {rid: (lane, min(j, queues.MAX_CARDS)) for lane, ids in earlier.items() for j, rid in enumerate(ids)}
    tail = len(earlier["waiting"])
    css = []
    for i, (lane, j, rid) in enumerate(queues.cards(queues.lanes(records)), start=1):
        if rid in before:
            (old_lane, old_j), fade = before[rid], ""
        else:
            (old_lane, old_j), fade, tail = ("waiting", min(tail, queues.MAX_CARDS)), "opacity: 0; ", tail + 1
        dx = (old_j - j) / queues.CARD_WIDTH * 100
        dy = (queues.LANE_Y[lane] - queues.LANE_Y[old_lane]) / queues.CARD_HEIGHT * 100  # screen y points down
        if dx or dy or fade:
            css.append(_rule(f".st-key-queues .barlayer .point:nth-child({i})", f"lab-card-{i}",
                             f"{fade}transform: translate({dx:.0f}%, {dy:.0f}%)"))
    if css:  # the marks of what happened (admitted, preempted, ...) come once the cards are in place
        css.append(_rule(".st-key-queues .scatterlayer .point", "lab-mark", "opacity: 0", delay_ms=MOTION_MS))
    return "".join(css)


def pool_motion(record: StepRecord, previous: StepRecord | None) -> str:
    """The forward pass's KV-pages bar (its first segment: the pages in use) from its old length."""
    used = record.budget.gpu_blocks_used  # held by requests; cached-free pages are counted apart
    was = used if previous is None else previous.budget.gpu_blocks_used
    if not used or was == used:
        return ""
    row = budget.ROWS.index("KV pages") + 1  # Plotly names the row's subplot x{row}y{row}
    return _rule(f".st-key-budget .subplot.x{row}y{row} .barlayer .point:nth-child(1)", "lab-pool",
                 f"transform: scaleX({was / used:.3f})", origin="left")


def page_motion(previous: StepRecord | None) -> str:
    """The pages this step changed (the block map's outlined cells) pop in, drawing the eye."""
    return "" if previous is None else _rule(".st-key-blocks .scatterlayer .point", "lab-pop",
                                                "opacity: 0; transform: scale(1.8)")


def step_css(records: list[StepRecord]) -> str:
    """All the motion of the last of `records`, as one style sheet."""
    previous = records[-2] if len(records) > 1 else None
    rules = card_motion(records) + pool_motion(records[-1], previous) + page_motion(previous)
    return f"@media (prefers-reduced-motion: no-preference) {{\n{rules}}}" if rules else ""
