"""The offline page (issue 39) without a browser: the edits that carry a figure from step to step,
every step's figures rebuilt from what the page stores, its budgets, escaping and the CLI.
tests/browser/test_browser_offline_page.py opens the pages in Chromium."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.workload import WorkloadItem
from lab.charts.registry import FIGURES, Frame, figures_at
from lab.charts.style import for_projector
from lab.export import player
from lab.export.__main__ import main
from lab.export.delta import diff, patch
from lab.run import Run, default_config

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(["a", "b", "<i>"]))
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(
    st.sampled_from(["x", "y", "z", "data"]), inner, max_size=4), max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(documents, documents)
def test_the_edits_turn_any_document_into_any_other(old, new):
    assert patch(copy.deepcopy(old), diff(old, new)) == new


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=8), max_size=8), st.integers(0, 4), st.integers(0, 3),
       st.lists(st.integers(0, 3), max_size=3))
def test_a_window_that_moves_on_costs_only_what_is_new(rows, shift, grow, tail):
    """A timeline step: every row drops `shift` cells and gains a few, rows drop off the top and new
    rows arrive; the edits rebuild it and send no more than the new cells and rows."""
    moved = [row[shift:] + tail for row in rows[min(shift, len(rows)):]] + [tail] * grow
    edits = diff(rows, moved)
    assert patch(copy.deepcopy(rows), edits) == moved
    if rows and all(len(row) > shift for row in rows):
        sent = sum(len(json.dumps(edit[2:])) for edit in edits)
        assert sent <= len(json.dumps(moved)) + 8


def _unpack(page: str, element: str) -> str:
    packed = re.search(rf'<script type="application/octet-stream" id="{element}">([^<]*)</script>', page).group(1)
    return gzip.decompress(base64.b64decode(packed)).decode()


def _figures_from(data: dict, key: str) -> list:
    """What the page's script does (player.js figureAt), in Python: whole copies and the edits after them."""
    out, current = [], None
    for stored in data["figures"][key]:
        if stored is None:
            current = None
        elif "full" in stored:
            current = copy.deepcopy(stored["full"])
        else:
            current = patch(copy.deepcopy(current), stored["edits"])
        out.append(current)
    return out


@pytest.fixture(scope="module")
def run(loaded):
    """A run that preempts and swaps, past a keyframe, with a hand-added request
    whose prompt is markup."""
    from lab.lessons import load_lessons

    lesson = next(x for x in load_lessons() if x.id == "10_swap_or_recompute")
    run = Run(lesson.engine_config("swap"), lesson.workload.items(), lambda *_: loaded)
    run.step(3)
    run.add_request(WorkloadItem(prompt='<img src=x onerror="window.pwned=1"> & friends', max_tokens=4))
    run.step(120)
    assert len(run.records) > player.KEYFRAME and run.records[-1].stats.num_preemptions > 0
    return run


def test_every_step_of_every_figure_is_the_registrys_own(run):
    """The page stores each figure whole now and then and as edits between: rebuilt, every step's
    figure is exactly the registry's, and its presenter edits give for_projector's version."""
    data = player.run_data(run)
    assert data["keys"] == [f.key for f in FIGURES if f.exported]
    rebuilt = {key: _figures_from(data, key) for key in data["keys"]}
    for i in range(len(run.records)):
        frame = Frame(run.records[:i + 1], len(run.records))
        expected = figures_at(frame, exported_only=True)
        assert {k for k in data["keys"] if rebuilt[k][i] is not None} == set(expected)
        for key, figure in expected.items():
            built = figure.build(frame)
            assert rebuilt[key][i] == json.loads(built.to_json()), (key, i)
            projector = json.loads(for_projector(built).to_json())
            assert patch(copy.deepcopy(rebuilt[key][i]), data["presenter"][key][i]) == projector, (key, i)
            assert data["steps"][i]["headings"][key] == figure.heading(frame)


def test_the_run_is_in_the_page_only_as_escaped_text(run):
    page = player.run_page(run, "<b>title</b>", "<script>about</script>")
    assert "<b>title</b>" not in page and "&lt;b&gt;title&lt;/b&gt;" in page
    assert "<script>about" not in page
    outside = re.sub(r'<script type="application/octet-stream"[^>]*>[^<]*</script>', "", page)
    assert "onerror" not in outside  # everything from the run travels inside the packed data
    data = json.loads(_unpack(page, "p-data"))
    why = " ".join(line for step in data["steps"] for line in step["why"])
    assert "&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt; &amp; friends" in why and "<img" not in why
    from plotly.offline import get_plotlyjs

    assert _unpack(page, "p-plotly") == get_plotlyjs()  # the installed package's bundle, whole


def test_the_same_run_makes_the_same_file(run):
    assert player.run_page(run) == player.run_page(run)


def test_a_run_past_the_limit_keeps_its_first_steps_and_says_so(run, monkeypatch):
    monkeypatch.setattr(player, "MAX_STEPS", 6)
    run.seek(len(run.records) - 1)
    page = player.run_page(run, "t", "A run.")
    data = json.loads(_unpack(page, "p-data"))
    assert len(data["steps"]) == 6 and data["start"] == 5
    assert f"The page holds the first 6 of its {len(run.records):,} steps." in page
    with pytest.raises(ValueError, match="at most 6"):
        player.run_data(run)


def test_a_500_step_run_fits_in_five_megabytes():
    """Issue 39's size budget, on the benchmark's own run (a real trace, priced, 500 steps)."""
    from bench.offline_page import SIZE_BUDGET_MB, long_run

    run = long_run(500)
    assert len(run.records) == 500 and not run.done
    size_mb = len(player.run_page(run).encode()) / 1e6
    assert size_mb < SIZE_BUDGET_MB, f"{size_mb:.2f} MB"


def test_the_cli_writes_a_lesson_and_names_what_is_wrong(tmp_path, capsys):
    out = tmp_path / "lesson.html"
    assert main(["lesson", "4", str(out)]) == 0
    text = out.read_text()
    assert "When the KV cache is full" in text and "id='p-glossary'" in text
    data = json.loads(_unpack(text, "p-data"))
    assert [q["id"] for q in data["lesson"]["questions"]] == ["victim", "recompute-cost"]
    assert main(["lesson", "99", str(tmp_path / "x.html")]) == 2
    assert "no lesson '99'" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.jsonl"), str(tmp_path / "x.html")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something else"}\n')
    assert main(["run", str(bad), str(tmp_path / "x.html")]) == 2
    assert "line 1" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_the_cli_writes_a_saved_run(tmp_path, lab_model, monkeypatch):
    from lab.export import dump_run, saved_run

    monkeypatch.setenv("LAB_MODEL", lab_model)
    run = Run(default_config(), [WorkloadItem(prompt="KING LEAR:\nBlow, winds", max_tokens=6)])
    run.step(4)
    saved = tmp_path / "run.jsonl"
    saved.write_text(dump_run(saved_run(run)))
    assert main(["run", str(saved), str(tmp_path / "run.html")]) == 0
    data = json.loads(_unpack((tmp_path / "run.html").read_text(), "p-data"))
    assert [s["step"] for s in data["steps"]] == [0, 1, 2, 3] and data["intro"][0]["request"] == "r0"


def test_a_long_runs_page_waits_for_a_heavy_job_turn(run, monkeypatch):
    """Making a long run's page is seconds of CPU: on a shared server it takes a turn, as a sweep does."""
    import contextlib

    import lab.export as export

    turns = []

    @contextlib.contextmanager
    def turn():
        turns.append(len(run.records))
        yield

    monkeypatch.setattr(export, "heavy_job", turn)
    monkeypatch.setattr(export, "HEAVY_STEPS", len(run.records) - 1)
    page = export.offline_player(run)
    assert turns == [len(run.records)] and f"{len(run.records)} steps recorded." in page
    monkeypatch.setattr(export, "HEAVY_STEPS", len(run.records))
    export.offline_player(run)
    assert turns == [len(run.records)]  # a short run's page is made at once
