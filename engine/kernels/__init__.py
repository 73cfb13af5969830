"""A compiled kernel the engine may attend with instead of its torch code, which stays the reference.

`paged_attention.cpp` reads keys and values where they lie in the KV pool, through the block table;
the torch path (engine/kv_cache.py) copies every sequence's pages out of the pool first, each layer
of each step. The kernel is used only when asked for, with LAB_ATTENTION=kernel in the environment
(an operator's setting, like LAB_TORCH_THREADS: building it takes a C++ compiler half a minute the
first time, which no visitor should be able to start). It is compiled with torch's extension builder
on first use, cached on disk by torch, and loaded once per process. Where it cannot be built (no
compiler or ninja, a build error) or cannot run (CUDA, a dtype other than float32), the engine
attends through torch and `kernel_status()` says why.
"""

from __future__ import annotations

import hashlib
import os
import platform
import threading
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("paged_attention.cpp")
ENV = "LAB_ATTENTION"  # "kernel" to attend with the kernel; anything else (or unset): torch

_lock = threading.Lock()
_built: tuple[ModuleType | None, str] | None = None  # (the module or None, how its build went), once tried


def _cpu_flags() -> str:
    """What the CPU offers: the build uses -march=native, so a cached build is only reused where it can run."""
    try:
        return next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return platform.processor()


def _build() -> tuple[ModuleType | None, str]:
    try:
        from torch.utils.cpp_extension import load

        key = hashlib.sha1((SOURCE.read_text() + _cpu_flags()).encode()).hexdigest()[:12]
        module = load(f"lab_paged_attention_{key}", [str(SOURCE)], extra_cflags=["-O3", "-march=native", "-fopenmp"],
                      extra_ldflags=["-fopenmp"])
        return module, "built"
    except Exception as exc:  # no compiler, no ninja, a build error: the torch path serves instead
        said = str(exc).strip().splitlines()
        return None, f"could not be built ({said[0] if said else type(exc).__name__})"


def paged_kernel(device: str = "cpu", dtype: str = "float32") -> ModuleType | None:
    """The compiled kernel if LAB_ATTENTION asks for it and it can serve this device and dtype, else None."""
    return _status(device, dtype)[0]


def kernel_status(device: str = "cpu", dtype: str = "float32") -> str:
    """Which attention the engine uses here, and why: for logs and the benchmark's table."""
    return _status(device, dtype)[1]


def _status(device: str, dtype: str) -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV) != "kernel":
        return None, f"torch ({ENV} is not 'kernel')"
    if device != "cpu" or dtype != "float32":
        return None, f"torch (the kernel runs float32 on the CPU; this engine runs {dtype} on {device})"
    global _built
    with _lock:  # engines in several threads build it once
        if _built is None:
            _built = _build()
    module, how = _built
    return (module, "kernel (engine/kernels/paged_attention.cpp)") if module else (None, f"torch (the kernel {how})")
