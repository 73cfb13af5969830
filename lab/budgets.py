"""What one session may ask of a shared classroom server, checked before the work starts.

An instructor runs one `streamlit run app.py` for a class, and anyone can open a link or
turn a knob to its limit. So each session is held to a budget (the README lists it), and
every refusal names the limit and the knob that hit it:

    KV_POOL_BYTES   the KV pools' tensors (GPU and CPU pages), from the model's shape; a fleet's
                    replicas share it (replicas x pool size)
    LINK_STEPS      the steps a link may ask the server to replay before it opens
    FLEET_EVENTS    the events one fleet run may take (routings, replica steps, KV copies); a
                    link may replay up to it
    MAX_REQUESTS    the requests in one workload (engine.limits), hand-added ones included
    PROMPT_BYTES    the prompts' size in one workload: a synthetic prompt by its token count, a
                    text by its UTF-8 bytes (no tokenizer here spends more than a token a byte)
    UPLOAD_BYTES    a file uploaded as a workload or a saved run
    HEAVY_JOBS      sweeps and A/B runs computing at once in this server process; the rest wait
                    their turn (LAB_HEAVY_JOBS sets it: tools/classroom.py shares a class's
                    turns out among its processes)
    TORCH_THREADS   the threads torch computes a step with in a server process (LAB_TORCH_THREADS,
                    default 1; see use_server_threads)

Which models a session may run is the operator's choice too (``offered_models``): a visitor
picks one of them, and no name typed in a box or read from a file is ever looked up on disk.

The engine itself has no such limits (the CLI may use the whole machine); the lab's
engines are all built here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import contextmanager

import torch

from engine import DEFAULT_MODEL, Engine, EngineConfig
from engine.fleet.config import FleetConfig
from engine.kv_cache import pool_bytes
from engine.limits import MAX_REQUESTS
from engine.model_runner import LoadedModel
from engine.workload import WorkloadItem

KV_POOL_BYTES = 256 * 2**20
LINK_STEPS = 2_000
FLEET_EVENTS = 20_000
UPLOAD_BYTES = 5 * 2**20
PROMPT_BYTES = 2**20


def _count(name: str, default: int, what: str) -> int:
    """The operator's setting of a count from the environment (a whole number, 1 or more), else default."""
    value = os.environ.get(name) or str(default)
    if not value.isdigit() or int(value) < 1:
        raise RuntimeError(f"{name}={value!r}: give a whole number of {what}, 1 or more")
    return int(value)


HEAVY_JOBS = _count("LAB_HEAVY_JOBS", 2, "sweeps and A/B runs at once")

TORCH_THREADS = _count("LAB_TORCH_THREADS", 1, "torch threads per server process")

__all__ = ["FLEET_EVENTS", "HEAVY_JOBS", "KV_POOL_BYTES", "LINK_STEPS", "MAX_REQUESTS", "PROMPT_BYTES",
           "TORCH_THREADS", "UPLOAD_BYTES", "BudgetError", "check_fleet", "check_offered", "check_replay",
           "check_workload", "engine_for", "heavy_job", "lab_model", "model_label", "offered_models",
           "use_server_threads"]


def use_server_threads() -> None:
    """Compute every step of this server process with TORCH_THREADS torch threads. A lab step is
    milliseconds of small matrices, and a class steps many engines at once on few cores: with
    torch's default of one thread per core, each step's threads wait on cores the other
    sessions (and their browsers, on a laptop) hold, and spin while they wait. Measured on 2
    cores (bench/RESULTS.md §8): a Step click's forward pass took 60 to 130 ms in the server
    against 10 ms alone, and one thread halved the server's CPU time per click."""
    if torch.get_num_threads() != TORCH_THREADS:
        torch.set_num_threads(TORCH_THREADS)


class BudgetError(ValueError):
    """A request for more than a session's share of the server; the message names the limit."""


def lab_model() -> str:
    """The model a lab session starts on: LAB_MODEL (an empty value counts as unset), else the embedded one."""
    return os.environ.get("LAB_MODEL") or DEFAULT_MODEL


def offered_models() -> tuple[str, ...]:
    """The models this server lets a visitor run: the lab's own first, then those the operator
    lists in LAB_MODELS (comma-separated folders or hub ids)."""
    extra = (name.strip() for name in os.environ.get("LAB_MODELS", "").split(","))
    return tuple(dict.fromkeys([lab_model(), *(name for name in extra if name)]))


def model_label(name: str) -> str:
    """A model as a visitor sees it: a folder by its last name, so no server path is shown."""
    return os.path.basename(os.path.normpath(name)) if os.path.isabs(name) else name


def check_offered(name: str) -> None:
    """Refuse a model the operator did not offer, before anything looks for it (so the message
    cannot tell a visitor whether some path exists on the server)."""
    offered = offered_models()
    if name not in offered:
        names = ", ".join(repr(model_label(m)) for m in offered)
        raise BudgetError(f"this server does not offer that model; a lab session may run {names} (the operator "
                          "lists them in LAB_MODELS)")


def check_pool(config: EngineConfig, loaded: LoadedModel) -> None:
    """Refuse a KV pool whose tensors would take more than KV_POOL_BYTES, naming the knobs and a size that fits."""
    size = pool_bytes(loaded, config)
    if size <= KV_POOL_BYTES:
        return
    per_block = pool_bytes(loaded, config.with_changes(num_gpu_blocks=1, num_cpu_blocks=0))
    fits = KV_POOL_BYTES // per_block - config.num_cpu_blocks
    raise BudgetError(f"the KV pools (num_gpu_blocks={config.num_gpu_blocks} + num_cpu_blocks="
                      f"{config.num_cpu_blocks} pages of {config.block_size} tokens, {per_block / 2**10:.0f} KiB each "
                      f"for this model) would take {size / 2**20:,.0f} MiB; a lab session may use "
                      f"{KV_POOL_BYTES / 2**20:.0f} MiB, so num_gpu_blocks can be at most {max(fits, 0):,} here")


def check_fleet(config: EngineConfig, fleet: FleetConfig, loaded: LoadedModel) -> None:
    """Refuse a fleet whose replicas' pools together would take more than KV_POOL_BYTES: each replica is a
    whole engine with pools of its own, so the budget is shared, not multiplied."""
    pools = fleet.pool_sizes(config.num_gpu_blocks)
    sizes = [pool_bytes(loaded, config.with_changes(num_gpu_blocks=n)) for n in pools]
    if sum(sizes) <= KV_POOL_BYTES:
        return
    raise BudgetError(f"{len(pools)} replicas' KV pools ({', '.join(map(str, pools))} pages of {config.block_size} "
                      f"tokens, plus {config.num_cpu_blocks} CPU pages each) would take {sum(sizes) / 2**20:,.0f} MiB; "
                      f"a lab session may use {KV_POOL_BYTES / 2**20:.0f} MiB for all of them: fewer replicas or "
                      "smaller pools")


def check_workload(items: list[WorkloadItem], context: int) -> None:
    """Refuse a workload past the session's share before any prompt is built: too many requests,
    a synthetic prompt longer than the model's context (it could never run, and its token ids
    would be built all the same), or prompts past PROMPT_BYTES in all."""
    if len(items) > MAX_REQUESTS:
        raise BudgetError(f"the workload has {len(items)} requests; a lab session may have {MAX_REQUESTS}")
    size = 0
    for number, item in enumerate(items, start=1):
        if item.prompt_tokens is not None and item.prompt_tokens > context:
            raise BudgetError(f"request {number} asks for a prompt of {item.prompt_tokens:,} tokens, longer than "
                              f"the model's context of {context:,}; a lab session caps every length there")
        size += item.prompt_tokens or len(item.prompt.encode("utf-8", "surrogatepass"))
    if size > PROMPT_BYTES:
        raise BudgetError(f"the workload's prompts take {size:,} tokens or bytes; a lab session may hold "
                          f"{PROMPT_BYTES:,}")


def check_replay(config: EngineConfig, load: Callable[[str, str, str], LoadedModel]) -> None:
    """Hold a saved run to a live run's pool budget: a replay needs no model, but its views draw
    every page of its pool. Sized with its own model where the server offers it, else the lab's."""
    model = config.model if config.model in offered_models() else lab_model()
    check_pool(config, load(model, "auto", config.dtype))


def engine_for(config: EngineConfig, loaded: LoadedModel) -> Engine:
    """An engine for the lab, within the session's budget (BudgetError names what is over)."""
    check_pool(config, loaded)
    return Engine(config, loaded=loaded)


_heavy = threading.BoundedSemaphore(HEAVY_JOBS)
_waiting = 0
_waiting_lock = threading.Lock()


def jobs_waiting() -> int:
    """How many sweeps and A/B runs are waiting for a turn on this server."""
    return _waiting


@contextmanager
def heavy_job(on_wait=None):
    """Hold one of the server's HEAVY_JOBS turns for a sweep or an A/B run. If all are taken,
    on_wait(place in line) is called once and the job waits for its turn, rather than all of them
    sharing the CPU at once and every one of them crawling."""
    global _waiting
    if not _heavy.acquire(blocking=False):
        with _waiting_lock:
            _waiting += 1
            place = _waiting
        if on_wait is not None:
            on_wait(place)
        try:
            _heavy.acquire()
        finally:
            with _waiting_lock:
                _waiting -= 1
    try:
        yield
    finally:
        _heavy.release()
