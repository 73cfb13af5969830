"""One server, many students at once: links give identical runs whoever opens them, and sessions
never see each other's state (the browser half is in test_browser_classroom.py)."""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref

from engine import EngineConfig, load_model
from engine.workload import PRESETS
from lab.compare import ABRun
from lab.link import decode_scenario, open_scenario
from ui import reaper

LINK = {"preset": "burst", "k.num_gpu_blocks": "30", "k.block_size": "8", "k.preemption_mode": "swap",
        "at4.max_num_seqs": "3", "req.0": "PAGE: My lord?", "req.0.at": "6", "step": "30"}


def test_the_same_link_opened_by_two_sessions_at_once_gives_identical_records(tiny_llama):
    defaults = EngineConfig(model=tiny_llama)
    scenario, warnings = decode_scenario(LINK, defaults)
    assert not warnings
    runs, errors = [None, None], []

    def open_it(i: int) -> None:
        try:
            runs[i] = open_scenario(scenario, defaults, PRESETS["burst"](), load=load_model)[0]
        except Exception as exc:  # noqa: BLE001 - reported below, with the thread it came from
            errors.append((i, exc))

    threads = [threading.Thread(target=open_it, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    a, b = runs
    assert len(a.records) == 31 and any(e.kind == "swapped_out" for r in a.records for e in r.events)
    assert [r.without_timings() for r in a.records] == [r.without_timings() for r in b.records]
    assert a.changes == b.changes and a.engine is not b.engine
    assert a.engine.runner.cache.gpu.data_ptr() != b.engine.runner.cache.gpu.data_ptr()  # pools never shared


def test_a_released_run_looks_the_same_and_steps_on_as_if_never_released(tiny_llama):
    """A closed tab's run lets go of its engine (ui/reaper.py); coming back costs a replay, nothing else."""
    defaults = EngineConfig(model=tiny_llama)
    scenario, _ = decode_scenario(LINK, defaults)
    kept = open_scenario(scenario, defaults, PRESETS["burst"](), load=load_model)[0]
    released = open_scenario(scenario, defaults, PRESETS["burst"](), load=load_model)[0]
    pool = weakref.ref(released.engine.runner.cache)
    released.release()
    gc.collect()
    assert pool() is None, "the KV pool outlived its released run"
    assert len(released.records) == len(kept.records) == 31
    kept.step(20)
    released.step(20)
    assert [r.without_timings() for r in released.records] == [r.without_timings() for r in kept.records]
    released.release()
    released.seek(10)  # a step taken in the past branches from a replay, released or not
    kept.seek(10)
    assert [r.without_timings() for r in released.step(3)] == [r.without_timings() for r in kept.step(3)]


def test_a_released_comparison_steps_on_as_if_never_released(tiny_llama):
    config = EngineConfig(model=tiny_llama, num_gpu_blocks=30, block_size=8)
    small = dataclasses.replace(config, num_gpu_blocks=20)
    kept, released = (ABRun(config, small, PRESETS["burst"]()) for _ in range(2))
    for ab in (kept, released):
        for _ in range(15):
            ab.step()
    pool = weakref.ref(released.engines[1].runner.cache)
    released.release()
    assert [m["aggregate"]["num_steps"] for m in released.metrics()] == [15, 15]  # what the page shows needs no engine
    gc.collect()
    assert pool() is None, "the KV pool outlived its released comparison"
    for ab in (kept, released):
        ab.run()
    assert [[r.without_timings() for r in side] for side in released.records] == \
        [[r.without_timings() for r in side] for side in kept.records]


class _Tab:
    def __init__(self):
        self.lock = threading.RLock()
        self.released = 0

    def release(self):
        self.released += 1


def test_the_reaper_releases_a_tab_gone_past_its_grace_and_spares_a_busy_or_connected_one(monkeypatch):
    monkeypatch.setattr(reaper, "_watched", {})
    monkeypatch.setattr(reaper, "_gone_since", {})
    tabs = {name: _Tab() for name in ("open", "gone", "busy")}
    for name, tab in tabs.items():
        reaper._watched[name] = weakref.ref(tab)
    active = {"open"}.__contains__
    assert reaper.reap(active, now=0.0) == 0  # gone, but only just: a network drop is not a closed tab
    tabs["busy"].lock.acquire()
    try:
        busy_round = threading.Thread(target=lambda: reaper.reap(active, now=reaper.GRACE_S))
        busy_round.start()  # another thread, as the reaper is: the script run holding the lock wins
        busy_round.join()
    finally:
        tabs["busy"].lock.release()
    assert (tabs["open"].released, tabs["gone"].released, tabs["busy"].released) == (0, 1, 0)
    assert reaper.reap(active, now=reaper.GRACE_S + 1) == 1  # the busy one, once its script run is done
    assert tabs["busy"].released == 1 and set(reaper._watched) == {"open"}
    del tabs["open"]
    gc.collect()
    assert reaper.reap(active, now=100.0) == 0 and not reaper._watched  # Streamlit dropped it first


def test_streamlit_refuses_an_upload_just_above_the_labs_own_budget():
    """Issue 32, case 7: with maxUploadSize unset Streamlit accepted 200 MB before the lab refused at 5 MiB."""
    from pathlib import Path

    import tomllib

    from lab.budgets import UPLOAD_BYTES

    config = tomllib.loads((Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml").read_text())
    cap_bytes = config["server"]["maxUploadSize"] * 10**6
    assert UPLOAD_BYTES < cap_bytes <= UPLOAD_BYTES + 10**6


def test_every_server_the_project_starts_listens_on_127_0_0_1_only():
    """Issue 32, case 15: bench/page_payload.py started Streamlit on every interface."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    starters = [p for folder in ("bench", "tests", "tools") for p in (root / folder).rglob("*.py")
                if '"streamlit", "run"' in p.read_text(encoding="utf-8")]
    assert len(starters) >= 2  # the benchmarks' server and the browser tests'
    for path in starters:
        assert '"--server.address", "127.0.0.1"' in path.read_text(encoding="utf-8"), path
