"""The lab's visual vocabulary: one colour per request, one per request state, one mark per move.

Every view takes its colours from here, so request r3 is the same colour in the
queues, the block map, the budget bar and the timeline. The request colours are
Okabe-Ito followed by Paul Tol's "muted" set: both are chosen to stay distinct
under the common forms of colour blindness.
"""

from __future__ import annotations

import re
import zlib

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
TOL_MUTED = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499")
REQUEST_COLORS = OKABE_ITO + TOL_MUTED

# Block map cells that belong to no request.
FREE = "#F1F1F1"
CACHED_FREE = "#B9C3CC"  # freed, but still holding a hashed prefix another request could reuse
GRID_GAP = "#FFFFFF"

# A request's state in one step, as the timeline draws it (Tol's "vibrant" set plus greys).
STATE_COLORS = {
    "waiting": "#C8C8C8",
    "prefilling": "#EE7733",
    "decoding": "#0077BB",
    "stalled": "#99DDFF",  # running, but given no tokens this step
    "preempted": "#CC3311",
    "swapped": "#EE3377",
    "finished": "#009988",
}

# How the queue view marks what happened to a request this step (Plotly marker symbols).
MOVE_MARKS = {
    "admitted": ("triangle-right", "#009E73"),
    "swapped_in": ("triangle-up", "#0072B2"),
    "preempted": ("x-thin-open", "#CC3311"),
    "swapped_out": ("triangle-down", "#EE3377"),
    "finished": ("star", "#332288"),
    "rejected": ("circle-x-open", "#882255"),
}

# Pattern of a chunk's segment in the forward-pass bar: the colour says whose, the hatch says what kind.
CHUNK_PATTERNS = {"decode": "", "prefill": "/", "prefill_chunk": "/", "recompute_prefill": "x"}


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
