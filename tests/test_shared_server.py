"""One server, many students at once: links give identical runs whoever opens them, and sessions
never see each other's state (the browser half is in test_browser_classroom.py)."""

from __future__ import annotations

import threading

from engine import EngineConfig, load_model
from engine.workload import PRESETS
from lab.scenario import decode_scenario, open_scenario

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
