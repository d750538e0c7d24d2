"""Process-level settings of the host the workbench runs on, applied only when asked for.

Importing the workbench changes nothing process-wide. :func:`tune_malloc` (or
``NKI_WORKBENCH_TUNE_MALLOC=1`` in the environment) opts into glibc heap tuning that makes the
simulators faster on large tiles; ``bench/`` and the test suite turn it on.
:func:`blas_single_threaded` limits the BLAS thread pool while the interpreter runs (and
restores it after); :func:`tile_matmul` widens a tile GEMM back to the user's threads only
where that measured faster and the cores are free.
:func:`compilation_cache` (or ``NKI_WORKBENCH_COMPILATION_CACHE=DIR``) opts into JAX's
persistent compilation cache for the compiled simulator, so a later process reuses the
executables of kernels compiled before.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

__all__ = ["tune_malloc", "malloc_tuning_requested", "malloc_tuning_applied", "TUNE_MALLOC_ENV",
           "blas_single_threaded", "blas_threads", "tile_matmul", "GemmGovernor", "CpuSampler",
           "GOVERNOR", "same_bits", "usable_cpus", "compilation_cache", "compilation_cache_dir",
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


_BLAS = {"controllers": None, "depth": 0, "saved": [], "owner": None, "wide": 1, "now": 1}
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


def _set_blas_threads(n: int) -> None:
    for c in _blas_controllers():
        c.set_num_threads(n)
    _BLAS["now"] = n


@contextlib.contextmanager
def blas_single_threaded():
    """Run the block with every BLAS library at one thread, then restore their counts.

    The interpreter's GEMMs are tile-sized (at most 128x512 by 128x128): when another process
    takes a core, OpenBLAS's busy-waiting threads made them 10-20x slower (issue 19). Inside
    the block :func:`tile_matmul` may still widen one GEMM to the threads the user had, when
    it measured that faster and no other process is using the cores (:class:`GemmGovernor`).
    Nested and concurrent uses (``simulate_ranks`` threads) count: each entry limits what its
    thread sees, the last exit restores every saved count. Costs ~3 us per use.
    """
    with _BLAS_LOCK:
        _BLAS["depth"] += 1
        wide = 1
        for c in _blas_controllers():
            n = c.get_num_threads()
            # why: OpenBLAS's count is process-wide in some builds and per thread in others
            if n is not None and n > 1:
                c.set_num_threads(1)
                _BLAS["saved"].append((c, n))
                wide = max(wide, n)
        _BLAS["now"] = 1
        if _BLAS["depth"] == 1:
            _BLAS["owner"] = threading.get_ident()
            _BLAS["wide"] = min(wide, usable_cpus())
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS["depth"] -= 1
            if _BLAS["depth"] == 0:
                for c, n in reversed(_BLAS["saved"]):
                    c.set_num_threads(n)
                _BLAS.update(saved=[], owner=None, wide=1, now=1)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity; ``os.cpu_count()`` where unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CpuSampler:
    """How many of this process's CPUs other processes kept busy lately (Linux ``/proc/stat``).

    Over windows of at least ``window`` seconds: the busy time of the CPUs this process may run
    on less the process's own CPU time, plus the time the calling thread waited for a CPU
    (``/proc/thread-self/schedstat``), in cores; ``None`` where that cannot be read (then no
    GEMM is widened).
    """

    # why 0.1 s: /proc/stat counts 10 ms ticks, so shorter windows read 0.2-0.4 of a core
    # busy on an idle machine; a load that comes meanwhile shows as a collapsing wide GEMM
    def __init__(self, window: float = 0.1, stat_path: str = "/proc/stat"):
        self.window, self.path = window, stat_path
        self.last = None  # (wall, busy seconds of our CPUs, own CPU seconds, waited seconds)
        self.others = None
        try:
            self.cpus = {f"cpu{i}" for i in os.sched_getaffinity(0)}
            self.ncpus = len(self.cpus)
            self.hz = os.sysconf("SC_CLK_TCK")
        except (AttributeError, OSError, ValueError):
            self.cpus = None

    def _read(self):
        busy = 0
        with open(self.path) as f:
            for line in f:
                name, _, rest = line.partition(" ")
                if name in self.cpus:
                    t = [int(v) for v in rest.split()]
                    busy += sum(t) - t[3] - (t[4] if len(t) > 4 else 0)  # (less idle, iowait)
        own = os.times()
        try:
            with open("/proc/thread-self/schedstat") as f:
                waited = int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            waited = 0.0
        return busy / self.hz, own.user + own.system, waited

    def busy_elsewhere(self, now: float) -> float | None:
        """Cores' worth of CPU time other processes used in the last window (or ``None``)."""
        if self.cpus is None:
            return None
        last = self.last
        if last is not None and now - last[0] < self.window:
            return self.others
        try:
            busy, own, waited = self._read()
        except (OSError, ValueError, IndexError, ZeroDivisionError):
            self.cpus = None
            return None
        if last is not None:
            # why: what others get shrinks while we take the cores; the time this thread
            # waited for a core shows the contention that hides. (A window over a pause is
            # the best guess there is; a collapsing wide GEMM corrects it, GemmGovernor.)
            wall = now - last[0]
            self.others = (max(0.0, (busy - last[1]) - (own - last[2])) +
                           (waited - last[3])) / wall
        self.last = (now, busy, own, waited)
        return self.others


class GemmGovernor:
    """Picks one BLAS thread or the user's count for each interpreter GEMM, by measurement.

    Per GEMM shape it keeps the recent time at one thread and at ``wide`` threads (running
    the other count every ``probe`` calls) and runs the faster one, but widens only to the
    cores other processes leave free (``CpuSampler``; on 2 cores: under 0.3 of a core busy
    elsewhere).
    It widens a GEMM shape only where the wider count gives one thread's bits
    (:func:`same_bits`, checked once per shape, layout and count): whether it does depends on
    the BLAS build and the CPU (on an AMD EPYC with numpy 2.4's OpenBLAS 0.3.31, 15% of a
    128x128 by 128x512 product's elements differ in their last bits between 1 and 2 threads;
    on the machines this suite ran on before, they never did), and a result must not depend
    on the load. Measured on 2 cores: a 128x128 by 128x512 GEMM 185 -> 114 us.
    """

    def __init__(self, sampler: CpuSampler | None = None, probe: int = 64,
                 clock=time.perf_counter, bits=None):
        self.sampler = sampler or CpuSampler()
        self.probe, self.clock = probe, clock
        self.bits = bits or same_bits
        self.stats = {}  # key -> [single s, wide s, calls]
        self.same = {}  # (key, threads) -> whether that count gives one thread's bits

    def matmul(self, a, b, out, wide: int):
        """``a @ b`` (into ``out``) at the thread count judged faster; times it."""
        import numpy as np
        key = (a.shape, a.strides, b.shape, b.strides, a.dtype.char)
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = [None, None, 0]
        st[2] += 1
        t0 = self.clock()
        others = self.sampler.busy_elsewhere(t0)
        use = 1
        if others is not None:
            # why: what other processes got shrinks while we run wide, so count any of it
            room = min(wide, int(self.sampler.ncpus - others + 0.3))
            one, many = st[0], st[1]
            if room > 1 and one is not None and \
                    (many is None or (many < one) != (st[2] % self.probe == 0)) and \
                    self._same(key, a, b, room):
                use = room  # why: the faster count, or the slower one every probe calls
        if _BLAS["now"] != use:
            _set_blas_threads(use)
        t0 = self.clock()
        r = np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
        dt = self.clock() - t0
        i = 0 if use == 1 else 1
        if i and dt > 3 * st[0]:
            # why: a BLAS thread lost its core (load came): one thread until the next window
            self.sampler.others = float(self.sampler.ncpus)
        ref = st[i] if st[i] is not None else st[0]
        if ref is not None:
            # why: one stalled call (threads waking, a page fault) must not hide the faster
            # count for many probes; a real change still moves the average 25% per call
            dt = min(dt, 2 * ref)
        st[i] = dt if st[i] is None else 0.75 * st[i] + 0.25 * dt
        return r

    def _same(self, key, a, b, threads: int) -> bool:
        ok = self.same.get((key, threads))
        if ok is None:
            ok = self.same[(key, threads)] = bool(self.bits(a, b, threads))
            _set_blas_threads(1)  # (the caller sets the count it chose)
        return ok


def _alike(x, rng):
    """Random values laid out as ``x`` (its shape, dtype and strides, where they are positive)."""
    import numpy as np
    item = x.itemsize
    if x.ndim == 0 or any(s <= 0 or s % item for s in x.strides):
        return rng.standard_normal(x.shape).astype(x.dtype)
    span = 1 + sum((n - 1) * s // item for n, s in zip(x.shape, x.strides, strict=True))
    base = rng.standard_normal(span).astype(x.dtype)
    return np.lib.stride_tricks.as_strided(base, x.shape, x.strides, writeable=False)


def same_bits(a, b, threads: int) -> bool:
    """Whether BLAS at ``threads`` threads gives one thread's bits for ``a @ b``'s shape.

    Checked on random operands with the layouts of ``a`` and ``b`` (which kernel the BLAS picks
    depends on the shape, the transposes and the thread count; an order that differs shows in
    a good share of a random product's elements). Leaves the count at ``threads``.
    """
    import numpy as np
    rng = np.random.default_rng(0)
    x, y = _alike(a, rng), _alike(b, rng)
    _set_blas_threads(1)
    one = np.matmul(x, y)
    _set_blas_threads(threads)
    many = np.matmul(x, y)
    return one.shape == many.shape and one.tobytes() == many.tobytes()


GOVERNOR = GemmGovernor()
"""The process's :class:`GemmGovernor` (its measurements are the machine's, kept across runs)."""


def tile_matmul(a, b, out=None):
    """``a @ b`` of an interpreter tile GEMM, BLAS threads chosen by :data:`GOVERNOR`.

    Outside :func:`blas_single_threaded`, with other interpreters running concurrently, or
    when the user had one BLAS thread, this is plain ``np.matmul`` at the current count.
    """
    import numpy as np
    if _BLAS["wide"] > 1 and _BLAS["depth"] == 1 and _BLAS["owner"] == threading.get_ident():
        with _BLAS_LOCK:  # why: an entering thread sets the count while no wide GEMM runs
            if _BLAS["depth"] == 1:
                return GOVERNOR.matmul(a, b, out, _BLAS["wide"])
    return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)


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
