"""The KV block map: one cell per page of the GPU pool, and the CPU swap space beside it.

A cell takes its owner's colour. Three things a student must learn to see get
their own look: a prefix page shared by several requests (marked with its
reference count), a freed page that still holds a cached prefix (grey-blue,
"c": it can be reused or evicted), and a page reserved but still empty (a pale
tint with a dot: the waste of a contiguous, sized-for-the-worst reservation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go

from engine.records import BlockState, StepRecord
from lab.charts import fast
from lab.charts.style import Subplots, discrete_colorscale, hover_text, legend_key
from lab.palette import CACHED_FREE, FREE, REQUEST_COLORS, request_color_index, tint

# z index -> colour: free, cached-free, each request's colour, then each request's pale tint.
CELL_COLORS = [FREE, CACHED_FREE, *REQUEST_COLORS, *(tint(c, 0.72) for c in REQUEST_COLORS)]
FREE_Z, CACHED_Z, OWNED_Z, EMPTY_Z = 0, 1, 2, 2 + len(REQUEST_COLORS)
CHANGED_MARK = "#111111"
CELL_PX = 26


@dataclass(frozen=True)
class Grid:
    """Where block i sits: row-major, `cols` to a row."""

    num_blocks: int
    cols: int

    @property
    def rows(self) -> int:
        return max(1, math.ceil(self.num_blocks / self.cols))

    def cell(self, block_id: int) -> tuple[int, int]:
        return divmod(block_id, self.cols)


def gpu_grid(num_blocks: int) -> Grid:
    return Grid(num_blocks, 16 if num_blocks <= 128 else 32 if num_blocks <= 1024 else 64)


def cpu_grid(num_blocks: int, gpu: Grid) -> Grid:
    """As many rows as the GPU grid where that is no wider than it; a larger swap space takes
    more rows instead, so a small GPU pool is not squeezed beside a long CPU one."""
    return Grid(num_blocks, min(gpu.cols, max(4, math.ceil(num_blocks / gpu.rows))))


def grids(record: StepRecord) -> tuple[Grid, Grid | None]:
    gpu = gpu_grid(record.budget.num_gpu_blocks)
    cpu = cpu_grid(record.budget.num_cpu_blocks, gpu) if record.budget.num_cpu_blocks else None
    return gpu, cpu


def num_rows(record: StepRecord) -> int:
    """Rows of the taller grid: both pools span this many, so their cells are the same size."""
    return max(g.rows for g in grids(record) if g is not None)


def _z(block: BlockState) -> int:
    if block.state == "cached":
        return CACHED_Z
    base = EMPTY_Z if block.num_tokens == 0 else OWNED_Z
    return base + request_color_index(block.owners[0])


def _mark(block: BlockState) -> str:
    if block.state == "cached":
        return "c"
    if block.ref_count > 1:
        return f"×{block.ref_count}"
    return "·" if block.num_tokens == 0 else ""


def _hover(block: BlockState | None, device: str, block_id: int) -> str:
    where = f"{device.upper()} block {block_id}"
    if block is None:
        return f"{where}<br>free"
    positions = (f"tokens {block.first_position}–{block.first_position + block.num_tokens - 1}"
                 if block.num_tokens else "no tokens yet (reserved)")
    if block.state == "cached":
        head = f"{where}<br>cached-free: no owner, keeps prefix {block.prefix_hash} until evicted"
    else:
        head = f"{where}<br>owner{'s' if len(block.owners) > 1 else ''}: {', '.join(block.owners)}"
    lines = [head, f"ref count {block.ref_count} · {positions}"]
    if block.prefix_hash and block.state != "cached":
        lines.append(f"prefix hash {block.prefix_hash}")
    if block.text:
        lines.append(f"“{hover_text(block.text, 48)}”")
    return "<br>".join(lines)


def _signature(record: StepRecord | None) -> dict[tuple[str, int], tuple]:
    if record is None:
        return {}
    return {(b.device, b.block_id): (b.state, tuple(b.owners)) for b in record.blocks}


def pool_traces(record: StepRecord, previous: StepRecord | None = None) -> list[go.BaseTraceType]:
    """Heatmap + "changed this step" outlines for the GPU pool, then the same for the CPU pool (if any)."""
    by_cell = {(b.device, b.block_id): b for b in record.blocks}
    before, now = _signature(previous), _signature(record)
    traces = []
    for device, grid in zip(("gpu", "cpu"), grids(record), strict=True):
        if grid is None:
            continue
        z = [[None] * grid.cols for _ in range(grid.rows)]
        text = [[""] * grid.cols for _ in range(grid.rows)]
        hover = [[""] * grid.cols for _ in range(grid.rows)]
        changed_x, changed_y = [], []
        for block_id in range(grid.num_blocks):
            row, col = grid.cell(block_id)
            block = by_cell.get((device, block_id))
            z[row][col] = FREE_Z if block is None else _z(block)
            text[row][col] = "" if block is None else _mark(block)
            hover[row][col] = _hover(block, device, block_id)
            key = (device, block_id)
            if previous is not None and before.get(key) != now.get(key):
                changed_x.append(col)
                changed_y.append(row)
        traces.append(fast.Heatmap(
            z=z, text=text, hovertext=hover, hoverinfo="text", texttemplate="%{text}", textfont=dict(size=11),
            colorscale=discrete_colorscale(CELL_COLORS), zmin=-0.5, zmax=len(CELL_COLORS) - 0.5, showscale=False,
            xgap=2, ygap=2, hoverongaps=False, name=f"{device.upper()} pool"))
        traces.append(fast.Scatter(  # outlines in the axes' units, so they fit their cells at any width (A/B)
            x=_outlines(changed_x), y=_outlines(changed_y, across=False), mode="lines", hoverinfo="skip",
            showlegend=False, name="changed", line=dict(color=CHANGED_MARK, width=2)))
    return traces


def _outlines(centres: list[int], across: bool = True) -> list[float | None]:
    """One coordinate of a closed square path around each cell centre, None between squares."""
    corners = (-0.4, 0.4, 0.4, -0.4, -0.4) if across else (-0.4, -0.4, 0.4, 0.4, -0.4)
    return [v for c in centres for v in (*(c + d for d in corners), None)]


def legend_traces() -> list[go.Scatter]:
    return [legend_key("free", FREE, line="#BBBBBB"), legend_key("cached-free (c)", CACHED_FREE),
            legend_key("reserved, empty (·)", tint(REQUEST_COLORS[0], 0.72)),
            legend_key("changed this step", CHANGED_MARK, "square-open")]


def style_axes(fig: Subplots, record: StepRecord, row: int = 1) -> None:
    """Hide the grid's x axes; label each row with its first block id; fix ranges so steps do not jump."""
    rows = num_rows(record)
    for col, grid in enumerate(g for g in grids(record) if g is not None):
        fig.axes(x=dict(visible=False, range=[-0.5, grid.cols - 0.5], fixedrange=True),
                 y=dict(range=[rows - 0.5, -0.5], tickvals=list(range(grid.rows)),
                        ticktext=[str(r * grid.cols) for r in range(grid.rows)], showgrid=False, zeroline=False,
                        ticks="", fixedrange=True, tickfont=dict(size=10)), row=row, col=col + 1)


def titles(record: StepRecord) -> list[str]:
    b = record.budget
    # Short: a title wider than its grid runs into the next one's beside a lesson, on a projector
    # and on a phone. The cached-free pages are in the map ("c") and in the forward pass's page bar.
    gpu = f"GPU: {b.gpu_blocks_used} used · {b.gpu_blocks_free} free"
    return [gpu, f"CPU swap: {b.cpu_blocks_used}/{b.num_cpu_blocks}"][:1 + bool(b.num_cpu_blocks)]


def column_widths(record: StepRecord) -> list[float]:
    return [g.cols for g in grids(record) if g is not None]


def figure(record: StepRecord, previous: StepRecord | None = None) -> go.Figure:
    cpu = grids(record)[1]
    fig = Subplots(rows=1, cols=1 + (cpu is not None), column_widths=column_widths(record),
                   titles=titles(record), horizontal_spacing=0.06)  # room for the CPU pool's page numbers
    traces = pool_traces(record, previous)
    for i in range(0, len(traces), 2):  # a heatmap and its "changed" marks per pool
        fig.add(traces[i:i + 2], col=1 + i // 2)
    fig.add(legend_traces())
    style_axes(fig, record)
    return fig.figure("blocks", height=90 + num_rows(record) * CELL_PX, showlegend=True)
