"""Process-level settings of the host the workbench runs on, applied only when asked for.

Importing the workbench changes nothing process-wide. :func:`tune_malloc` (or
``NKI_WORKBENCH_TUNE_MALLOC=1`` in the environment) opts into glibc heap tuning that makes the
simulators faster on large tiles; ``bench/`` and the test suite turn it on.
:func:`blas_single_threaded` limits the BLAS thread pool while the interpreter runs (and
restores it after): its GEMMs are tile-sized, where threads only cost.
:func:`compilation_cache` (or ``NKI_WORKBENCH_COMPILATION_CACHE=DIR``) opts into JAX's
persistent compilation cache for the compiled simulator, so a later process reuses the
executables of kernels compiled before.
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["tune_malloc", "malloc_tuning_requested", "malloc_tuning_applied", "TUNE_MALLOC_ENV",
           "blas_single_threaded", "blas_threads", "compilation_cache", "compilation_cache_dir",
           "COMPILATION_CACHE_ENV"]

COMPILATION_CACHE_ENV = "NKI_WORKBENCH_COMPILATION_CACHE"

TUNE_MALLOC_ENV = "NKI_WORKBENCH_TUNE_MALLOC"
_STATE = {"requested": False, "applied": False, "cache": None}


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
    It also keeps every thread on the one main arena: XLA runs the compiled programs on its own
    threads, whose arenas hold at most 64 MiB, so each 4096x4096 float32 buffer (64 MiB) was a
    fresh mmap there, ~17 000 page faults per buffer and call. That was the compiled backend's
    4096^2 cliff (softmax 4096^2: 911 -> 151-182 ms, add 4096^2: 267 -> 46-66 ms, 34 403 -> 0
    minor faults per call, measured on 2 loaded cores). Without the tuning,
    ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` in the environment roughly halves that cost.
    This changes the whole process's allocator, so it happens only when called (or requested
    through the environment), best before ``import jax`` (threads that already have an arena
    keep it); it is a no-op where glibc is not the C library.

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
            m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8
            libc.mallopt(m_arena_max, 1)
            libc.mallopt(m_mmap_threshold, 256 << 20)
            libc.mallopt(m_trim_threshold, 1 << 30)
            _STATE["applied"] = True
        except (OSError, AttributeError):
            pass
    return _STATE["applied"]


_BLAS = {"controllers": None, "depth": 0, "saved": []}
_BLAS_LOCK = threading.Lock()


def _blas_controllers() -> list:
    """The controllers (threadpoolctl) of the loaded BLAS libraries, found once (~2 ms)."""
    if _BLAS["controllers"] is None:
        try:
            from threadpoolctl import ThreadpoolController
            found = ThreadpoolController().select(user_api="blas").lib_controllers
        except Exception:  # noqa: BLE001 - no threadpoolctl / no introspectable BLAS: no limit
            found = []
        _BLAS["controllers"] = found
    return _BLAS["controllers"]


def blas_threads() -> dict:
    """Threads of each loaded BLAS library as this thread sees them (file name -> count)."""
    return {os.path.basename(c.filepath): c.get_num_threads() for c in _blas_controllers()}


@contextlib.contextmanager
def blas_single_threaded():
    """Run the block with every BLAS library at one thread, then restore their counts.

    The interpreter's GEMMs are tile-sized (at most 128x512 by 128x128): BLAS threads gain
    nothing there, and when another process takes a core OpenBLAS's busy-waiting threads made
    them 10-20x slower (issue 19). Nested and concurrent uses (``simulate_ranks`` threads)
    count: each entry limits what its thread sees, the last exit restores every saved count.
    Costs ~3 us per use.
    """
    with _BLAS_LOCK:
        _BLAS["depth"] += 1
        for c in _blas_controllers():
            n = c.get_num_threads()
            # why: OpenBLAS's count is process-wide in some builds and per thread in others
            if n is not None and n > 1:
                c.set_num_threads(1)
                _BLAS["saved"].append((c, n))
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS["depth"] -= 1
            if _BLAS["depth"] == 0:
                for c, n in reversed(_BLAS["saved"]):
                    c.set_num_threads(n)
                _BLAS["saved"] = []


def compilation_cache(path: str | None = None) -> str:
    """Keep the compiled simulator's XLA executables on disk, for later processes too.

    A compiled program's first call spends 0.1-2 s in XLA; with the cache a later process
    calling the same kernel specialisation loads the executable instead. This sets JAX's
    process-wide ``jax_compilation_cache_dir`` (every executable is cached, however quick its
    compile), so it happens only when called or requested through the environment.

    Args:
        path: the cache folder (default ``~/.cache/nki_workbench/xla``).

    Returns:
        str: the folder in use.
    """
    path = os.path.abspath(os.path.expanduser(path or os.path.join("~", ".cache",
                                                                    "nki_workbench", "xla")))
    _STATE["cache"] = path
    import sys
    if "jax" in sys.modules:  # why: already imported, so the compiled backend applied none yet
        apply_compilation_cache()
    return path


def compilation_cache_dir() -> str | None:
    """The requested cache folder (:func:`compilation_cache` or the environment), or ``None``."""
    return _STATE["cache"] or (os.path.abspath(os.path.expanduser(
        os.environ[COMPILATION_CACHE_ENV])) if os.environ.get(COMPILATION_CACHE_ENV, "").strip()
        else None)


def apply_compilation_cache() -> None:
    """Point JAX at the requested cache folder (the compiled backend calls this).

    Without a request nothing changes.
    """
    path = compilation_cache_dir()
    if path is None or _STATE.get("cache_applied") == path:
        return
    import jax
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _STATE["cache_applied"] = path
