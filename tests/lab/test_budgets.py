"""A shared classroom server's budgets (lab/budgets.py): refused before the work starts, named,
and nothing the session had is lost."""

from __future__ import annotations

import threading
import time

import pytest

from engine import EngineConfig, load_model
from engine.kv_cache import pool_bytes
from engine.workload import WorkloadItem
from lab import budgets
from lab.budgets import KV_POOL_BYTES, LINK_STEPS, BudgetError, check_pool, heavy_job
from lab.link import decode_scenario, open_scenario
from lab.run import Run

ITEMS = [WorkloadItem("ROMEO: hello", max_tokens=4, ignore_eos=True)]


def _loader(name, device, dtype):
    return load_model(name, device, dtype)


def test_the_kv_pool_budget_is_bytes_from_the_model_shape(tiny_llama):
    loaded = load_model(tiny_llama)
    config = EngineConfig(model=tiny_llama, num_gpu_blocks=1_000_000)
    with pytest.raises(BudgetError, match=r"num_gpu_blocks=1000000.*MiB.*at most [\d,]+ here") as refused:
        check_pool(config, loaded)
    at_most = int(str(refused.value).rsplit("at most ", 1)[1].split()[0].replace(",", ""))
    fits = config.with_changes(num_gpu_blocks=at_most)
    check_pool(fits, loaded)  # the size it names fits
    assert pool_bytes(loaded, fits) <= KV_POOL_BYTES < pool_bytes(loaded, fits.with_changes(num_gpu_blocks=at_most + 1))
    # The real tensors are the size the budget counts.
    run = Run(EngineConfig(model=tiny_llama, num_gpu_blocks=8, num_cpu_blocks=4), ITEMS, load=_loader)
    cache = run.engine.runner.cache
    assert cache.gpu.nbytes + cache.cpu.nbytes == pool_bytes(loaded, run.config)


def test_a_knob_over_budget_leaves_the_run_as_it_was(tiny_llama):
    run = Run(EngineConfig(model=tiny_llama), ITEMS, load=_loader)
    run.step(2)
    before = (run.config, list(run.records))
    with pytest.raises(BudgetError, match="num_gpu_blocks"):
        run.set_knobs(num_gpu_blocks=900_000)
    assert (run.config, run.records) == before and run.engine.runner.cache.gpu.nbytes < KV_POOL_BYTES


def test_a_link_replays_at_most_its_budget_of_steps(tiny_llama):
    scenario, warnings = decode_scenario({"step": "100000"}, EngineConfig(model=tiny_llama))
    assert not warnings
    run, notes = open_scenario(scenario, EngineConfig(model=tiny_llama), ITEMS, load=_loader)
    assert any(f"at most {LINK_STEPS:,} steps" in n and "step=100000" in n for n in notes)
    assert len(run.records) <= LINK_STEPS


def test_heavy_jobs_beyond_the_servers_turns_wait_in_line():
    release, started, places = threading.Event(), [], []

    def job():
        with heavy_job(on_wait=places.append):
            started.append(1)
            release.wait(10)

    workers = [threading.Thread(target=job) for _ in range(budgets.HEAVY_JOBS)]
    for w in workers:
        w.start()
    while len(started) < budgets.HEAVY_JOBS:
        time.sleep(0.01)
    late = threading.Thread(target=job)
    late.start()
    while not places:
        time.sleep(0.01)
    assert places == [1] and budgets.jobs_waiting() == 1 and len(started) == budgets.HEAVY_JOBS
    release.set()
    for w in [*workers, late]:
        w.join(5)
    assert len(started) == budgets.HEAVY_JOBS + 1 and budgets.jobs_waiting() == 0
