"""Process-level settings of the host the workbench runs on, applied only when asked for.

Importing or running the workbench changes nothing process-wide. :func:`tune_malloc` (or
``NKI_WORKBENCH_TUNE_MALLOC=1`` in the environment) opts into glibc heap tuning that makes the
simulators faster on large tiles; ``bench/`` and the test suite turn it on.
"""

from __future__ import annotations

import os

__all__ = ["tune_malloc", "malloc_tuning_requested", "malloc_tuning_applied", "TUNE_MALLOC_ENV"]

TUNE_MALLOC_ENV = "NKI_WORKBENCH_TUNE_MALLOC"
_STATE = {"requested": False, "applied": False}


def malloc_tuning_requested() -> bool:
    """Whether :func:`tune_malloc` was called or ``NKI_WORKBENCH_TUNE_MALLOC`` asks for it."""
    return _STATE["requested"] or os.environ.get(TUNE_MALLOC_ENV, "").strip() in ("1", "true",
                                                                                   "yes")


def malloc_tuning_applied() -> bool:
    """Whether this process's glibc allocator was tuned (by :func:`tune_malloc`)."""
    return _STATE["applied"]


def tune_malloc(enable: bool = True) -> bool:
    """Keep freed tile buffers in glibc's heap instead of returning them to the OS.

    Every instruction result is a fresh numpy array of ~100 KiB-1 MiB; glibc serves those with
    mmap/munmap by default, so each one costs page faults that dominated simulation time (an
    element-wise op on a 128x1024 fp32 tile: 360 us with mmap, 60 us from the heap). Raising
    the mmap and trim thresholds (``mallopt``) makes those allocations reuse freed heap memory.
    This changes the whole process's allocator, so it happens only when called (or requested
    through the environment); it is a no-op where glibc is not the C library.

    Args:
        enable: ``True`` applies the tuning now (once per process); ``False`` only withdraws
            the request, so later simulations do not apply it (settings already made stay).

    Returns:
        bool: whether the tuning is in effect in this process.
    """
    _STATE["requested"] = bool(enable)
    if enable and not _STATE["applied"]:
        try:
            import ctypes
            libc = ctypes.CDLL("libc.so.6")
            m_trim_threshold, m_mmap_threshold = -1, -3
            libc.mallopt(m_mmap_threshold, 64 << 20)
            libc.mallopt(m_trim_threshold, 256 << 20)
            _STATE["applied"] = True
        except (OSError, AttributeError):
            pass
    return _STATE["applied"]
