"""A shared classroom server's budgets (lab/budgets.py): refused before the work starts, named,
and nothing the session had is lost."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from engine import DEFAULT_MODEL, EngineConfig, load_model
from engine.fleet.config import FleetConfig
from engine.kv_cache import pool_bytes
from engine.limits import MAX_REQUESTS
from engine.workload import WorkloadItem
from lab import budgets
from lab.budgets import KV_POOL_BYTES, LINK_STEPS, BudgetError, check_fleet, check_pool, heavy_job
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


def test_a_fleets_replicas_share_one_pool_budget(tiny_llama):
    """Each replica is a whole engine with its own pools: 16 replicas of a pool that fits alone do not
    fit together, and the message names the replicas and the total."""
    loaded = load_model(tiny_llama)
    config = EngineConfig(model=tiny_llama, num_gpu_blocks=64, num_cpu_blocks=0)
    one = pool_bytes(loaded, config)
    fits = KV_POOL_BYTES // one  # replicas of this pool the budget holds
    check_fleet(config, FleetConfig(num_replicas=min(fits, 64)), loaded)
    big = config.with_changes(num_gpu_blocks=KV_POOL_BYTES // pool_bytes(loaded, config.with_changes(num_gpu_blocks=1)))
    check_pool(big, loaded)  # alone it fits
    with pytest.raises(BudgetError, match=r"2 replicas' KV pools .* MiB; a lab session may use 256 MiB for all"):
        check_fleet(big, FleetConfig(num_replicas=2), loaded)
    small = FleetConfig(num_replicas=2, replica_gpu_blocks=f"{big.num_gpu_blocks - 8},8")
    check_fleet(big, small, loaded)  # a small second replica: the two fit


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


# ---- issue 32: what a visitor may ask for ------------------------------------------------------


def test_a_visitor_runs_only_the_operators_models_and_learns_nothing_of_the_disk(monkeypatch, tiny_llama):
    monkeypatch.setenv("LAB_MODEL", tiny_llama)
    monkeypatch.setenv("LAB_MODELS", " org/other-model , ")
    assert budgets.offered_models() == (tiny_llama, "org/other-model")
    assert budgets.model_label(tiny_llama) == Path(tiny_llama).name  # no server path on screen
    messages = set()
    for name in ("/etc", "/no/such/folder", "../../", "gpt2"):
        with pytest.raises(BudgetError) as refused:
            budgets.check_offered(name)
        messages.add(str(refused.value))
    assert len(messages) == 1 and "does not offer" in messages.pop()  # one answer, whatever exists
    budgets.check_offered(tiny_llama)
    monkeypatch.setenv("LAB_MODEL", "")  # an empty value is unset, not a model called ""
    assert budgets.lab_model() == DEFAULT_MODEL


def test_a_workload_past_the_sessions_share_is_refused_before_a_prompt_is_built(tiny_llama):
    long = [WorkloadItem("synthetic", max_tokens=4, prompt_tokens=100_000)] * 2
    with pytest.raises(BudgetError, match="request 1 asks for a prompt of 100,000 tokens, longer than the model's "
                                          "context of 512"):
        Run(EngineConfig(model=tiny_llama), long, load=_loader)
    with pytest.raises(BudgetError, match=f"has 501 requests; a lab session may have {MAX_REQUESTS}"):
        Run(EngineConfig(model=tiny_llama), ITEMS * 501, load=_loader)
    text = [WorkloadItem("ROMEO: " + "x" * 200_000, max_tokens=4)] * 6
    with pytest.raises(BudgetError, match="prompts take 1,200,042 tokens or bytes; a lab session may hold 1,048,576"):
        Run(EngineConfig(model=tiny_llama), text, load=_loader)
    run = Run(EngineConfig(model=tiny_llama), ITEMS, load=_loader)
    run.step()
    with pytest.raises(BudgetError, match="longer than the model's context"):
        run.add_request(long[0])
    assert run.items() == ITEMS  # the hand-added request was refused, the run kept


@pytest.mark.parametrize("params, named", [
    ({f"req.{i}": "ROMEO:" for i in range(501)}, "501 requests"),
    ({"req.0": "synthetic", "req.0.prompt_tokens": "100000"}, "longer than the model's context"),
])
def test_a_link_past_the_budget_is_refused_by_name(tiny_llama, params, named):
    scenario, _ = decode_scenario(params, EngineConfig(model=tiny_llama))
    with pytest.raises(BudgetError, match=named):
        open_scenario(scenario, EngineConfig(model=tiny_llama), [], load=_loader)


@pytest.mark.parametrize("params, named", [
    ({"gen.prompt": "100000-100000", "gen.requests": "500"}, "may total 1,000,000"),
    ({"gen.prompt": "1-999999999999999999"}, "high <= 100000"),
    ({"load.prompt": "lognormal:1.7e308:3"}, "length a must be a number of tokens in [1, 100000]"),
])
def test_a_generator_past_the_engines_limits_is_named_before_anything_is_drawn(tiny_llama, params, named):
    started = time.perf_counter()
    _, warnings = decode_scenario(params, EngineConfig(model=tiny_llama))
    assert any(named in w for w in warnings), warnings
    assert time.perf_counter() - started < 5  # refused from the numbers, not after building 50M tokens


def test_a_saved_run_is_held_to_a_live_runs_pool_budget(monkeypatch, tiny_llama):
    monkeypatch.setenv("LAB_MODEL", tiny_llama)
    budgets.check_replay(EngineConfig(model=tiny_llama, num_gpu_blocks=64), _loader)
    for model in (tiny_llama, "/a/model/this/server/does/not/offer"):  # then sized with the lab's own model
        with pytest.raises(BudgetError, match="num_gpu_blocks=1000000"):
            budgets.check_replay(EngineConfig(model=model, num_gpu_blocks=1_000_000), _loader)


def test_a_step_that_fails_part_way_leaves_the_run_as_it_was(tiny_llama, monkeypatch):
    """Issue 32, case 9: a step that raised mid-way left requests running and pages taken, with
    no step recorded. The run now drops that engine and replays its records into a fresh one."""
    clean = Run(EngineConfig(model=tiny_llama), ITEMS * 3, load=_loader)
    run = Run(EngineConfig(model=tiny_llama), ITEMS * 3, load=_loader)
    clean.step(2)
    run.step(2)
    broken = run.engine
    monkeypatch.setattr(type(broken.runner), "execute", lambda *a, **k: (_ for _ in ()).throw(OverflowError("boom")))
    with pytest.raises(OverflowError):
        run.step(1)
    assert broken.scheduler.running  # the half-stepped engine holds scheduled work and no record of it...
    monkeypatch.undo()
    assert len(run.records) == 2 and run.engine is not broken  # ...and is gone: the run replays into a new one
    run.step(20)
    clean.step(20)
    assert [r.without_timings() for r in run.records] == [r.without_timings() for r in clean.records]


def test_a_server_process_steps_with_its_own_torch_threads(monkeypatch):
    """use_server_threads (app.py calls it) sets torch to the operator's count, one by default."""
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        budgets.use_server_threads()
        assert torch.get_num_threads() == budgets.TORCH_THREADS == 1
        monkeypatch.setattr(budgets, "TORCH_THREADS", 3)
        budgets.use_server_threads()
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
