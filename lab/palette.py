"""The lab's visual vocabulary: hue says which request, grey says what state, red and magenta say trouble.

Every view takes its colours from here, so request r3 is the same colour in the
queues, the block map, the budget bar and the timeline. Each colour has one job: a
hue is a request's identity and nothing else, so a state is drawn in greys (light for
waiting, dark for decoding) and only trouble, preemption (red), swap (magenta) and a refusal
(dark red), has hues of its own, which no request uses. A newcomer read r2's green as
"finished" and r4's sky blue as "stalled" when states had hues too (tests/lab/test_charts.py
measures the distances). The request colours are Okabe-Ito and Paul Tol's "muted" set,
chosen to stay distinct under the common forms of colour blindness, less the three that
sit near red or magenta.
"""

from __future__ import annotations

import re
import zlib

PREEMPTED = "#CC3311"  # trouble: a request lost its KV pages
SWAPPED = "#EE3377"  # trouble: a request's KV pages went to CPU memory
REJECTED = "#661100"  # trouble: a request refused as it arrived, since it could never fit
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442")  # less vermillion, near PREEMPTED
TOL_MUTED = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#882255", "#AA4499")  # less rose
REQUEST_COLORS = OKABE_ITO + TOL_MUTED

# Block map cells that belong to no request.
FREE = "#F1F1F1"
CACHED_FREE = "#B9C3CC"  # freed, but still holding a hashed prefix another request could reuse
GRID_GAP = "#FFFFFF"

# A request's state in one step, as the timeline draws it: greys by how much the step did for it.
STATE_COLORS = {
    "waiting": "#E4E4E4",
    "stalled": "#B4B4B4",  # running, but given no tokens this step
    "prefilling": "#7E7E7E",
    "decoding": "#3C3C3C",
    "finished": "#000000",
    "rejected": REJECTED,
    "preempted": PREEMPTED,
    "swapped": SWAPPED,
}

# A glyph in each timeline cell besides its grey, for states told apart by more than lightness
# (issue 31: five greys side by side were hard to tell apart); decoding, the common state, is plain.
STATE_GLYPHS = {"waiting": "·", "stalled": "‖", "prefilling": "▸", "decoding": "", "finished": "✓",
                "rejected": "⊘", "preempted": "✕", "swapped": "⇣"}

# How the queue view marks what happened to a request this step (Plotly marker symbols).
MOVE_MARKS = {
    "admitted": ("triangle-right", "#3C3C3C"),
    "swapped_in": ("triangle-up", SWAPPED),
    "preempted": ("x-thin-open", PREEMPTED),
    "swapped_out": ("triangle-down", SWAPPED),
    "finished": ("star", "#000000"),
    "rejected": ("circle-x-open", REJECTED),
}

# Pattern of a chunk's segment in the forward-pass bar: the colour says whose, the hatch says what kind.
CHUNK_PATTERNS = {"decode": "", "prefill": "/", "prefill_chunk": "/", "recompute_prefill": "x", "draft": ".",
                  "discarded": "-"}


def request_color_index(request_id: str) -> int:
    """A fixed slot per request: engine ids end in their number (r0, r1, ...), others are hashed."""
    match = re.search(r"(\d+)$", request_id)
    index = int(match.group(1)) if match else zlib.crc32(request_id.encode())
    return index % len(REQUEST_COLORS)


def request_color(request_id: str) -> str:
    return REQUEST_COLORS[request_color_index(request_id)]


def tint(color: str, amount: float) -> str:
    """Mix a #RRGGBB colour with white; amount 0 keeps it, 1 gives white."""
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02X}" for c in rgb)


def text_color(background: str) -> str:
    """Black or white, whichever reads better on the background (WCAG relative luminance)."""
    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(int(background[i:i + 2], 16)) for i in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#000000" if luminance > 0.179 else "#FFFFFF"
