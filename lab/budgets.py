"""What one session may ask of a shared classroom server, checked before the work starts.

An instructor runs one `streamlit run app.py` for a class, and anyone can open a link or
turn a knob to its limit. So each session is held to a budget (the README lists it), and
every refusal names the limit and the knob that hit it:

    KV_POOL_BYTES   the KV pools' tensors (GPU and CPU pages), from the model's shape
    LINK_STEPS      the steps a link may ask the server to replay before it opens
    MAX_REQUESTS    the requests in one workload (engine.limits)
    UPLOAD_BYTES    a file uploaded as a workload or a saved run
    HEAVY_JOBS      sweeps and A/B runs computing at once on the server; the rest wait their turn

The engine itself has no such limits (the CLI may use the whole machine); the lab's
engines are all built here.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from engine import Engine, EngineConfig
from engine.kv_cache import pool_bytes
from engine.limits import MAX_REQUESTS
from engine.model_runner import LoadedModel

KV_POOL_BYTES = 256 * 2**20
LINK_STEPS = 2_000
UPLOAD_BYTES = 5 * 2**20
HEAVY_JOBS = 2

__all__ = ["HEAVY_JOBS", "KV_POOL_BYTES", "LINK_STEPS", "MAX_REQUESTS", "UPLOAD_BYTES", "BudgetError", "engine_for",
           "heavy_job"]


class BudgetError(ValueError):
    """A request for more than a session's share of the server; the message names the limit."""


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
