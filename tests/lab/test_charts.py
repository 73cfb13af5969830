"""The figure builders, on records from real engine runs (the tiny random model).

Each test reads a figure back and checks it against the record it was drawn
from: a cell per block, the owner's colour in every view, the budget bar adding
up to the tokens the step really ran, latencies agreeing with engine/metrics.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from engine import Engine, EngineConfig, StepRecord
from engine.workload import WorkloadItem, submit
from lab.charts import blocks, budget, queues, replay, timeline
from lab.charts.history import states_in
from lab.metrics import run_metrics
from lab.palette import (
    CHUNK_PATTERNS,
    FREE,
    MOVE_MARKS,
    PREEMPTED,
    REJECTED,
    REQUEST_COLORS,
    STATE_COLORS,
    STATE_GLYPHS,
    SWAPPED,
    request_color,
    tint,
)


def _run(model: str, items: list[WorkloadItem], **knobs) -> tuple[Engine, list[StepRecord]]:
    engine = Engine(EngineConfig(model=model, **knobs))
    submit(engine, items)
    return engine, engine.run(300)


def _burst(n: int = 7) -> list[WorkloadItem]:
    return [WorkloadItem(f"Request {i} says hello", max_tokens=16 + 3 * i, arrival_step=i // 3, ignore_eos=True)
            for i in range(n)]


def _sample(records: list[StepRecord]) -> list[StepRecord]:
    """Every step where a request moved between queues, and every fourth one besides: drawing
    a figure costs tens of milliseconds, and these are the steps that differ."""
    return [r for r in records if r.step % 4 == 0 or any(e.kind != "arrived" for e in r.events)]


@pytest.fixture(scope="module")
def swap_run(tiny_llama):
    """A pool too small for the burst: requests are preempted, some swapped to CPU, some recomputed."""
    return _run(tiny_llama, _burst(), block_size=8, num_gpu_blocks=14, num_cpu_blocks=6, preemption_mode="swap",
                max_num_batched_tokens=48)


@pytest.fixture(scope="module")
def prefix_run(tiny_llama):
    """A shared preamble with prefix caching: shared and cached-free pages appear."""
    preamble = "The same long system preamble, shared by everyone. " * 2
    items = [WorkloadItem(preamble + f"Q{i}?", max_tokens=6, arrival_step=3 * i, ignore_eos=True) for i in range(4)]
    return _run(tiny_llama, items, block_size=8, num_gpu_blocks=40, enable_prefix_caching=True)


@pytest.fixture(scope="module")
def contiguous_run(tiny_llama):
    return _run(tiny_llama, _burst(3), block_size=8, num_gpu_blocks=40, kv_allocation="contiguous")


def _cells(trace) -> dict[tuple[int, int], tuple]:
    """(row, col) -> (z, text, hover) for every drawn cell of a heatmap."""
    return {(r, c): (z, trace.text[r][c], trace.hovertext[r][c])
            for r, row in enumerate(trace.z) for c, z in enumerate(row) if z is not None}


def _heatmaps(fig):
    return [t for t in fig.data if t.type == "heatmap"]


def test_runs_exercise_what_the_charts_draw(swap_run, prefix_run, contiguous_run):
    """Guard for the tests below: the fixtures really contain swaps, recomputes, sharing and waste."""
    kinds = {e.kind for r in swap_run[1] for e in r.events}
    assert {"preempted", "swapped_out", "swapped_in"} <= kinds
    assert any(e.data.get("mode") == "recompute" for r in swap_run[1] for e in r.events if e.kind == "preempted")
    assert any(b.ref_count > 1 for r in prefix_run[1] for b in r.blocks)
    assert any(b.state == "cached" for r in prefix_run[1] for b in r.blocks)
    assert any(b.num_tokens == 0 for r in contiguous_run[1] for b in r.blocks)


def test_block_map_has_one_cell_per_block_in_its_owners_colour(swap_run):
    for record in _sample(swap_run[1]):
        fig = blocks.figure(record)
        drawn = {device: _cells(trace) for device, trace in zip(("gpu", "cpu"), _heatmaps(fig), strict=True)}
        assert len(drawn["gpu"]) == record.budget.num_gpu_blocks
        assert len(drawn["cpu"]) == record.budget.num_cpu_blocks
        owned = {(b.device, b.block_id): b for b in record.blocks}
        for device in drawn:
            grid = blocks.grids(record)[device == "cpu"]
            for block_id in range(grid.num_blocks):
                z, _, hover = drawn[device][grid.cell(block_id)]
                color = blocks.CELL_COLORS[z]
                block = owned.get((device, block_id))
                assert f"{device.upper()} block {block_id}" in hover
                if block is None:
                    assert color == FREE and "free" in hover
                else:
                    owner = request_color(block.owners[0])
                    assert color == (tint(owner, 0.72) if block.num_tokens == 0 else owner)
                    assert all(o in hover for o in block.owners)


@pytest.mark.parametrize(("gpu", "cpu"), [(14, 8), (14, 64), (64, 64), (256, 16), (1280, 512)])
def test_both_pools_are_drawn_at_one_cell_size(swap_run, gpu, cpu):
    """A small GPU pool beside a large swap space must not be squeezed into thin slivers."""
    record = swap_run[1][-1]
    record = dataclasses.replace(record, budget=dataclasses.replace(record.budget, num_gpu_blocks=gpu,
                                                                      num_cpu_blocks=cpu))
    layout = blocks.figure(record).layout
    gpu_grid, cpu_grid = blocks.grids(record)
    assert cpu_grid.cols <= gpu_grid.cols
    cell_widths = [(axis.domain[1] - axis.domain[0]) / grid.cols
                   for axis, grid in ((layout.xaxis, gpu_grid), (layout.xaxis2, cpu_grid))]
    assert cell_widths[0] == pytest.approx(cell_widths[1], rel=0.01)
    assert layout.yaxis.range == layout.yaxis2.range == (max(gpu_grid.rows, cpu_grid.rows) - 0.5, -0.5)


def test_block_map_marks_shared_and_cached_pages(prefix_run):
    shared_seen = cached_seen = False
    for record in prefix_run[1]:
        cells = _cells(_heatmaps(blocks.figure(record))[0])
        grid = blocks.grids(record)[0]
        for block in record.blocks:
            z, text, hover = cells[grid.cell(block.block_id)]
            if block.state == "cached":
                cached_seen = True
                assert (z, text) == (blocks.CACHED_Z, "c") and block.prefix_hash in hover
            elif block.ref_count > 1:
                shared_seen = True
                assert text == f"×{block.ref_count}" and f"ref count {block.ref_count}" in hover
    assert shared_seen and cached_seen


def test_block_map_shows_reserved_but_empty_pages_as_waste(contiguous_run):
    record = next(r for r in contiguous_run[1] if any(b.num_tokens == 0 for b in r.blocks))
    cells = _cells(_heatmaps(blocks.figure(record))[0])
    grid = blocks.grids(record)[0]
    for block in record.blocks:
        z, text, hover = cells[grid.cell(block.block_id)]
        assert (z >= blocks.EMPTY_Z) == (block.num_tokens == 0)
        if block.num_tokens == 0:
            assert text == "·" and "reserved" in hover


def test_block_map_outlines_what_changed_since_the_previous_step(swap_run):
    records = swap_run[1]
    for record in _sample(records[1:]):
        prev = records[record.step - 1]
        fig = blocks.figure(record, prev)
        outlines = [t for t in fig.data if t.type == "scatter" and t.name == "changed"]
        grid = blocks.grids(record)[0]
        before = {b.block_id: (b.state, b.owners) for b in prev.blocks if b.device == "gpu"}
        now = {b.block_id: (b.state, b.owners) for b in record.blocks if b.device == "gpu"}
        expected = {grid.cell(i)[::-1] for i in range(grid.num_blocks) if before.get(i) != now.get(i)}
        points = list(zip(outlines[0].x, outlines[0].y, strict=True))
        squares = [points[i:i + 5] for i in range(0, len(points), 6)]  # a closed square, then a break
        assert all(points[i + 5] == (None, None) for i in range(0, len(points), 6))
        # each square sits inside its own cell, in the axes' units: it cannot spill at any width (issue 31)
        assert {(round((min(x for x, _ in q) + max(x for x, _ in q)) / 2), round(
            (min(y for _, y in q) + max(y for _, y in q)) / 2)) for q in squares} == expected
        assert all(max(x for x, _ in q) - min(x for x, _ in q) < 1 for q in squares)


def test_budget_bar_adds_up_to_the_tokens_the_step_ran(swap_run):
    for record in _sample(swap_run[1]):
        tokens, seqs, pages = budget.figure(record).data[:3]
        used = [(x, c) for x, c in zip(tokens.x, tokens.marker.color, strict=True) if c != FREE]
        assert sum(x for x, _ in used) == record.budget.tokens_used
        assert [c for _, c in used] == [request_color(c.request_id) for c in record.batch]
        assert list(tokens.marker.pattern.shape[:len(record.batch)]) == [CHUNK_PATTERNS[c.kind] for c in record.batch]
        assert sum(tokens.x) == max(record.budget.token_budget, record.budget.tokens_used)
        assert sum(seqs.x) == record.budget.seq_cap and sum(pages.x) == record.budget.num_gpu_blocks


@pytest.mark.parametrize("seed", range(6))
def test_every_view_counts_the_pages_in_use_as_the_block_map_does(tiny_llama, seed):
    """Random workloads with prefix caching on: the budget bar's 'used' segment and title, and the
    header's count, are the block map's pages held by requests, never negative, and the bar's
    three segments fill the pool exactly (the bar once subtracted cached pages twice: -23 of 24)."""
    import random
    rng = random.Random(seed)
    preamble = "A preamble many requests share. " * rng.randint(0, 3)
    items = [WorkloadItem(preamble + f"question {i} " * rng.randint(1, 4), max_tokens=rng.randint(2, 20),
                          arrival_step=rng.randint(0, 15), ignore_eos=True) for i in range(rng.randint(3, 9))]
    _, records = _run(tiny_llama, items, block_size=4, num_gpu_blocks=rng.randint(24, 48), enable_prefix_caching=True)
    assert any(r.budget.gpu_blocks_cached for r in records)
    for record in records:
        b = record.budget
        held = sum(blk.device == "gpu" and blk.ref_count > 0 for blk in record.blocks)
        assert b.gpu_blocks_used == held >= 0
        segs = {s["label"].split(" ", 1)[1]: s["length"] for s in budget._segments(record) if s["row"] == 2}
        assert segs.get("used", 0) == held and sum(segs.values()) == b.num_gpu_blocks
        # after the step, said so: a blocked reason counts the pages free before it (issue 31)
        assert f"after the step: {held} used / {b.num_gpu_blocks}" in budget.figure(record).layout.annotations[2].text
        assert blocks.titles(record)[0].startswith(f"GPU: {held} used")


def test_request_colours_agree_across_views(swap_run):
    records = swap_run[1]
    record = next(r for r in records if r.batch and r.waiting and r.blocks)
    upto = records[: record.step + 1]
    cards = queues.figure(upto).data[0]
    card_color = {t.split("</b>")[0].removeprefix("<b>"): c for t, c in zip(cards.text, cards.marker.color,
                                                                          strict=True)}
    assert card_color and all(c == request_color(rid) for rid, c in card_color.items())
    token_bar = budget.figure(record).data[0]
    for chunk, color in zip(record.batch, token_bar.marker.color, strict=False):
        assert color == card_color[chunk.request_id]
    cells = _cells(_heatmaps(blocks.figure(record))[0])
    grid = blocks.grids(record)[0]
    for block in record.blocks:
        if block.device == "gpu" and block.state == "used" and block.num_tokens and block.owners[0] in card_color:
            assert blocks.CELL_COLORS[cells[grid.cell(block.block_id)][0]] == card_color[block.owners[0]]


def cielab(color: str) -> tuple[float, float, float]:
    """sRGB #RRGGBB to CIELAB (D65), the space where a distance is a perceived difference."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
           for c in (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))]
    xyz = [sum(w * c for w, c in zip(row, lin, strict=True)) / white for row, white in
           (((0.4124, 0.3576, 0.1805), 0.95047), ((0.2126, 0.7152, 0.0722), 1.0), ((0.0193, 0.1192, 0.9505), 1.08883))]
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def delta_e(a: str, b: str) -> float:
    """CIE76 colour difference: about 2.3 is just noticeable; past 25 two colours read as different hues."""
    return sum((x - y) ** 2 for x, y in zip(cielab(a), cielab(b), strict=True)) ** 0.5


def chroma(color: str) -> float:
    _, a, b = cielab(color)
    return (a * a + b * b) ** 0.5


def test_no_request_colour_can_be_read_as_a_state():
    """Hue is a request's identity only. States are greys (a request colour has chroma >= 25, a
    state's grey <= 1), and the three trouble hues are at least 30 apart from every request colour
    and from each other: before, decoding was r0's blue (3 apart), stalled r8's sky (6), finished
    r9's teal (8)."""
    trouble = {PREEMPTED, SWAPPED, REJECTED}
    greys = [c for c in STATE_COLORS.values() if c not in trouble] + [c for _, c in MOVE_MARKS.values()
                                                                      if c not in trouble]
    assert set(STATE_COLORS.values()) - set(greys) == trouble
    assert all(chroma(c) <= 1 for c in greys)
    assert min(chroma(c) for c in REQUEST_COLORS) >= 25
    assert min(delta_e(r, t) for r in REQUEST_COLORS for t in trouble) >= 30
    assert min(delta_e(a, b) for a in trouble for b in trouble if a != b) >= 30
    levels = sorted(cielab(c)[0] for c in set(greys))  # the greys apart from each other, too
    assert min(b - a for a, b in zip(levels, levels[1:], strict=False)) >= 10
    assert min(delta_e(a, b) for i, a in enumerate(REQUEST_COLORS) for b in REQUEST_COLORS[i + 1:]) >= 12


def test_queue_lanes_follow_the_record(swap_run):
    records = swap_run[1]
    for record in _sample(records):
        fig = queues.figure(records[: record.step + 1])
        cards = fig.data[0]
        for lane, ids in (("waiting", record.waiting), ("running", record.running), ("swapped", record.swapped)):
            on_lane = [t.split("</b>")[0].removeprefix("<b>") for t, y in zip(cards.text, cards.y, strict=True)
                       if y == queues.LANE_Y[lane]]
            assert on_lane == ids[: queues.MAX_CARDS]
        moved_marks = {t.split(":")[0] for trace in fig.data[2:] for t in trace.hovertext}
        assert moved_marks == {e.request_id for e in record.events if e.kind in queues.MOVE_LABELS}
        # Room for every card drawn, and no more than the longest lane (or MIN_SLOTS) needs: short
        # queues get wide cards.
        longest = max(len(ids) for ids in queues.lanes(records[: record.step + 1]).values())
        right = fig.layout.xaxis.range[1]
        assert max((b + w for b, w in zip(cards.base, cards.x, strict=True)), default=0) < right
        assert right == min(queues.MAX_CARDS, max(queues.MIN_SLOTS, longest)) + 0.8


def test_latencies_from_records_match_engine_metrics(swap_run):
    engine, records = swap_run
    from_records = {m["request_id"]: m for m in run_metrics(records)["requests"]}
    for m in engine.metrics()["requests"]:
        assert from_records[m["request_id"]].get("ttft_steps") == m.get("ttft_steps")
        assert from_records[m["request_id"]].get("itl_steps") == m.get("itl_steps")
    fig = timeline.latency_figure(records)
    assert list(fig.data[0].y) == [from_records[r]["ttft_steps"] for r in fig.data[0].x]


def _phase(record: StepRecord, rid: str) -> str | None:
    """A request's phase read the slow way, one list after another, in the order that decides it."""
    chunk = next((c for c in record.batch if c.request_id == rid), None)
    if chunk is not None:
        return chunk.kind
    if rid in record.finished:
        return "finished"
    if rid in record.swapped:
        return "swapped"
    if rid in record.waiting:
        return "preempted" if record.requests[rid].num_preemptions else "waiting"
    return "stalled" if rid in record.running else None


def test_phases_read_each_request_as_its_lists_say(swap_run, prefix_run):
    """StepRecord.phases (one pass over the record) against each request read one at a time, on runs
    with preemption by swap and by recompute, and with waiting requests."""
    seen = set()
    for record in swap_run[1] + prefix_run[1]:
        shown = {*record.requests, *record.waiting, *record.running, *record.swapped, *record.finished}
        expected = {rid: _phase(record, rid) for rid in shown if _phase(record, rid) is not None}
        assert record.phases() == expected
        seen |= set(expected.values())
    assert {"prefill", "decode", "waiting", "preempted", "swapped"} <= seen


def test_timeline_states_and_preemption_marks(swap_run):
    records = swap_run[1]
    fig = timeline.requests_figure(records, len(records))
    heat = fig.data[0]
    ids = [t.split("</span> ")[1] for t in fig.layout.yaxis.ticktext]
    for col, record in enumerate(records):
        for row, rid in enumerate(ids):
            state = states_in(record).get(rid)
            assert heat.z[row][col] == (None if state is None else timeline.STATES.index(state))
            if rid in record.running:
                assert state in ("prefilling", "decoding", "stalled")
    marks = next(t for t in fig.data if t.name == "preemption")
    expected = {(r.step, ids.index(e.request_id)) for r in records for e in r.events if e.kind == "preempted"}
    assert set(zip(marks.x, marks.y, strict=True)) == expected and expected


def test_metrics_follow_stats_and_keep_the_axis_while_scrubbing(swap_run):
    records = swap_run[1]
    fig = timeline.metrics_figure(records[:5], len(records))
    kv = next(t for t in fig.data if t.name == "KV cache usage %")
    assert list(kv.y) == [100 * r.stats.kv_cache_usage_perc for r in records[:5]]
    assert list(fig.layout.xaxis.range) == [-0.5, len(records) - 0.5]


def test_replay_has_a_frame_per_step_matching_the_live_views(swap_run):
    records = swap_run[1][:12]
    fig = replay.figure(records)
    assert [f.name for f in fig.frames] == [str(r.step) for r in records]
    assert len(fig.layout.sliders[0].steps) == len(records)
    for i in (0, 7):
        frame = fig.frames[i]
        assert len(frame.data) == len(fig.data)
        live = blocks.figure(records[i], records[i - 1] if i else None)
        assert frame.data[0].z == _heatmaps(live)[0].z
        assert frame.data[4].x == queues.figure(records[: i + 1]).data[0].x


def _long_run(tiny_llama, steps: int) -> list[StepRecord]:
    """A run of many short requests, arriving one a step: long enough to pass every window."""
    engine = Engine(EngineConfig(model=tiny_llama, max_num_seqs=8, num_gpu_blocks=64))
    submit(engine, [WorkloadItem(f"r{i}: hello", max_tokens=6, arrival_step=i // 2, ignore_eos=True)
                    for i in range(steps * 2)])
    records = engine.run(steps)
    assert len(records) == steps
    return records


def test_the_history_views_send_a_bounded_amount_on_long_runs(tiny_llama):
    """Past the window, a run twice as long (and its queue, which grows without end here) draws the
    same size of timeline, gauges and latencies: at most MAX_ROWS rows of RECENT_STEPS cells (ids and
    step numbers grow a digit, so a little more text)."""
    from lab.charts import window

    records = _long_run(tiny_llama, 4 * window.RECENT_STEPS + 200)

    def sizes(n: int) -> dict[str, int]:
        part = records[:n]
        return {"timeline": len(timeline.requests_figure(part, n).to_json()),
                "metrics": len(timeline.metrics_figure(part, n).to_json()),
                "latency": len(timeline.latency_figure(part).to_json())}

    short, long = sizes(2 * window.RECENT_STEPS), sizes(len(records))
    for name in ("timeline", "latency"):
        assert long[name] < 1.25 * short[name] + 20_000, (name, short[name], long[name])
    assert all(len(trace.x) <= window.MAX_POINTS for trace in timeline.metrics_figure(records, len(records)).data)
    assert sum(long.values()) < 1_000_000
    fig = timeline.requests_figure(records, len(records))
    heat = _heatmaps(fig)[0]
    assert len(heat.x) == window.RECENT_STEPS and heat.x[-1] == records[-1].step and len(heat.z) <= window.MAX_ROWS
    assert fig.layout.xaxis.range[0] == records[-window.RECENT_STEPS].step - 0.5


def test_downsampled_gauges_keep_every_peak():
    from lab.charts.window import MAX_POINTS, peaks

    xs = list(range(10 * MAX_POINTS))
    ys = [0.0] * len(xs)
    ys[4321] = 99.0  # one spike among ten thousand
    px, py = peaks(xs, ys)
    assert len(px) <= MAX_POINTS and max(py) == 99.0 and px[-1] == xs[-1]
    assert peaks(xs[:10], ys[:10]) == (xs[:10], ys[:10])


def test_step_axes_tick_whole_steps_even_after_one_step(swap_run):
    """One step used to read -0.4 ... 0.4 on the timeline; a step is a whole number."""
    records = swap_run[1]
    for n in (1, 7, len(records)):
        for fig in (timeline.requests_figure(records[:n], n), timeline.metrics_figure(records[:n], n)):
            axis = fig.layout.xaxis
            assert axis.tick0 == 0 and axis.dtick >= 1 and float(axis.dtick).is_integer()
            assert (axis.range[1] - axis.range[0]) / axis.dtick <= 10


def _projected_figures(records: list[StepRecord]) -> dict[str, object]:
    from lab.charts.style import for_projector

    n = len(records)
    return {name: for_projector(fig) for name, fig in {
        "queues": queues.figure(records), "blocks": blocks.figure(records[-1], records[-2]),
        "budget": budget.figure(records[-1]), "timeline": timeline.requests_figure(records, n),
        "metrics": timeline.metrics_figure(records, n), "latency": timeline.latency_figure(records)}.items()}


def test_on_a_projector_every_tick_and_legend_is_at_least_18_px(swap_run):
    """Presenter mode's figures: a tick or legend that sets no size of its own inherits the figure's."""
    for name, fig in _projected_figures(swap_run[1]).items():
        default = fig.layout.font.size
        sizes = [axis.tickfont.size or default for axis in [*fig.select_xaxes(), *fig.select_yaxes()]]
        sizes.append(fig.layout.legend.font.size or default)
        assert min(sizes) >= 18, f"{name}: text of {min(sizes)} px on the projector"


def test_the_oldest_wait_counts_from_when_a_request_last_joined_the_queue(loaded):
    """Issue 31, bug 5: in lesson 4, r2 (preempted at step 5) read as the oldest waiter, "8 steps",
    counted from its arrival at step 0, while r3 had waited since step 2. One step reads "1 step"."""
    from lab.charts.history import oldest_waiting
    from lab.lessons import load_lessons, start_engine
    from lab.markup import badges

    lesson = next(lesson for lesson in load_lessons() if lesson.id == "04_kv_cache_full")
    records = start_engine(lesson, loaded=loaded).run()
    assert "r2" in records[7].waiting and "r3" in records[7].waiting
    assert records[7].requests["r2"].queued_step == 5 and records[7].requests["r3"].queued_step == 2
    assert oldest_waiting(records[7]) == ("r3", 6, None)
    assert oldest_waiting(records[2]) == ("r3", 1, None)
    assert ("orange", "oldest waiting r3: 1 step") in badges(records[2])


def test_a_rejected_request_is_drawn_as_refused_at_the_step_it_arrived(tiny_llama):
    """Issue 31, bug 7: a request that could never fit was drawn as finished (black), and refused in
    step 0's events although it arrived later."""
    from engine import SamplingParams

    engine = Engine(EngineConfig(model=tiny_llama, max_model_len=64))
    engine.add_request("fine", SamplingParams(max_tokens=4))
    rid = engine.add_request("x " * 200, SamplingParams(max_tokens=10), arrival_step=2)
    records = engine.run()
    assert [states_in(r).get(rid) for r in records[:3]] == [None, None, "rejected"]
    assert all(e.kind != "rejected" for r in records[:2] for e in r.events)
    fig = timeline.requests_figure(records, len(records))
    cells = dict(zip(fig.data[0].y, fig.data[0].z, strict=True))
    row = list(dict.fromkeys(r for rec in records for r in rec.requests)).index(rid)
    assert cells[row][2] == timeline.STATES.index("rejected")
    assert STATE_COLORS["rejected"] == REJECTED and any(t.name == "⊘ rejected" for t in fig.data)


def test_the_ridge_label_sits_above_the_roof_where_no_step_dot_can_be(loaded):
    """Issue 31: a step's dot covered the "ridge" label (drawn below the ridge point, where steps
    land). Over lesson 9's run, every dot is on or under the roof, and the label is above it."""
    from lab.charts import roofline
    from lab.lessons import load_lessons, start_engine

    lesson = next(lesson for lesson in load_lessons() if lesson.id == "09_gpu_step_cost")
    records = start_engine(lesson, loaded=loaded).run()
    for n in (4, 8, 12):
        fig = roofline.figure(records[:n + 1])
        roof = next(t for t in fig.data if t.name == "roof")
        ridge = next(t for t in fig.data if t.name == "ridge")
        dot = next(t for t in fig.data if t.name == f"step {n}")
        assert ridge.textposition.startswith("top") and ridge.y[0] == max(roof.y)
        assert dot.y[0] <= max(roof.y) * 1.0001
        top = fig.layout.yaxis.range[1]
        assert 10 ** top >= 2 * ridge.y[0]  # room above the roof for the label


def test_a_label_on_a_hatched_chunk_has_a_contrasting_halo(swap_run):
    """Issue 31: a white request label on a prefill's white hatching was unreadable."""
    record = next(r for r in swap_run[1] if any(c.kind == "prefill" and c.num_tokens > 1 for c in r.batch))
    bar = next(t for t in budget.figure(record).data if t.type == "bar" and any(t.text))
    hatched = [i for i, shape in enumerate(bar.marker.pattern.shape) if shape]
    assert hatched and all(bar.text[i] for i in hatched)
    assert bar.textfont.shadow == "auto" and bar.marker.pattern.fgcolor == "#FFFFFF"


def test_the_chart_toolbar_runs_down_the_side_clear_of_the_titles(swap_run):
    """Issue 31: on a phone the toolbar, drawn across the top, sat on the block map's "CPU swap" title."""
    fig = blocks.figure(swap_run[1][5], swap_run[1][4])
    assert len(fig.layout.annotations) == 2 and fig.layout.modebar.orientation == "v"


def wcag_contrast(a: str, b: str) -> float:
    def luminance(color: str) -> float:
        channels = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_timeline_states_differ_by_glyph_as_well_as_grey(swap_run):
    """Issue 31: the timeline's five greys were hard to tell apart. Neighbouring greys differ by a
    WCAG contrast of at least 1.5, and every state but decoding carries its own glyph in its cells."""
    greys = ["waiting", "stalled", "prefilling", "decoding", "finished"]
    assert all(wcag_contrast(STATE_COLORS[a], STATE_COLORS[b]) >= 1.5 for a, b in zip(greys, greys[1:], strict=False))
    glyphs = [STATE_GLYPHS[s] for s in STATE_COLORS if s != "decoding"]
    assert all(glyphs) and len(set(glyphs)) == len(glyphs) and STATE_GLYPHS["decoding"] == ""
    records = swap_run[1]
    fig = timeline.requests_figure(records, len(records))
    heat = fig.data[0]
    seen = {timeline.STATES[z]: g for zs, gs in zip(heat.z, heat.text, strict=True)
            for z, g in zip(zs, gs, strict=True) if z is not None}
    assert {"waiting", "decoding", "prefilling", "preempted"} <= set(seen)
    assert all(glyph == STATE_GLYPHS[state] for state, glyph in seen.items())
