"""The one run path: ``run(traced, inputs, params)`` executes a traced kernel on arrays.

Everything that simulates goes through here: ``simulate``/``run_traced`` (the numpy kernel
modes), ``inspect``, the bridges' host callbacks, ``simulate_ranks`` and
:func:`simulate_backend_config`. It picks the executor from :class:`~.options.SimParams`
(``backend="numpy"`` interpreter, ``"jax"`` compiled program, ``"auto"``: :func:`auto_backend`
chooses per call), runs it, then calls :data:`SIM_HOOKS`. Compiled programs are cached per
kernel object, a bounded LRU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
import warnings
import weakref

import numpy as np

from . import dtypes as D
from .alloc import allocate
from .caching import LRU
from .encode import (
    CACHE_SIZE,
    build_backend_config,
    decode_backend_config,
    encode_backend_config,
    matmul_mac_count,
    serialize_dims,
)
from .errors import NkiError
from .ir import Alloc, IRParseError, Kernel, parse, walk_stmts
from .ir.budget import DEFAULT_BUDGET, estimate_work, over_budget
from .ir.validate import CODE as INVALID_IR
from .options import SimParams, legacy_backend, selected_backend, selected_numerics
from .platform import usable_cpus
from .semantics import Unsupported
from .sim.interp import Program
from .sim.jax_host import handed
from .sim.liveness import peak_bytes
from .sim.nki_numerics import nki_simulator_kernel
from .trace.kernel import Traced

__all__ = ["run", "run_program", "program_for", "package_outputs", "SIM_HOOKS",
           "simulate_backend_config", "config_round_trip_hook", "PROGRAM_CACHE_SIZE",
           "auto_backend", "compile_scale", "AUTO_COMPILE_FIRST_S", "AUTO_MAX_COMPILE_S",
           "AUTO_BACKGROUND_COMPILE",
           "estimated_interpreter_seconds", "estimated_compile_seconds"]

SIM_HOOKS: list = []
"""Callables ``fn(traced, inputs, params, outputs, backend)`` run after every simulation
(``backend``: ``"numpy"``, ``"jax"`` or ``None`` for the environment's choice); tests use it to
check the backend_config round trip of every kernel the suite simulates."""

PROGRAM_CACHE_SIZE = 256
"""Kernels whose compiled :class:`Program` is kept (least recently used are dropped)."""

_PROGRAMS = LRU(PROGRAM_CACHE_SIZE)  # id(kernel) -> (kernel, Program)
_PARSED = LRU(CACHE_SIZE)  # serialize_ir_string -> (Program, work estimate)


def program_for(kernel: Kernel | Traced) -> Program:
    """The compiled :class:`Program` of a kernel (or a trace's kernel), cached on the kernel.

    The cache holds the kernel object itself next to its program, so an id is never reused for
    another kernel while its entry lives.
    """
    k = kernel.kernel if isinstance(kernel, Traced) else kernel
    hit = _PROGRAMS.lookup(id(k))
    if hit is not None and hit[0] is k:
        return hit[1]
    return _PROGRAMS.store(id(k), (k, Program(k)))[1]


AUTO_COMPILE_FIRST_S = 2.0
"""``backend="auto"`` compiles already on a kernel's first call when its estimated interpreter
time is above this many seconds and above its estimated compile time (a small kernel compiles in
0.1-1 s; below this the first call interprets)."""
AUTO_MAX_COMPILE_S = 30.0
"""``backend="auto"`` never compiles a kernel whose estimated compile time is above this many
seconds: it interprets every call. Such programs take minutes and gigabytes to compile
(nki-samples' flash-attention backward at 8192 tokens, while its causal condition still
unrolled loops: 20 k lowered instructions, a 17 GB peak; with split loops it lowers to 1 373
and compiles in 38 s at 1.2 GB), more than a user waits for a result the interpreter gives in
a minute."""
AUTO_BACKGROUND_COMPILE = usable_cpus() > 2
"""``backend="auto"`` compiles in a background thread (one compile at a time) and keeps
interpreting until the program is ready, so no call waits for a compile; ``False``: the call
that reaches the compile estimate compiles and runs the program itself.

On by default where the process has more than 2 CPUs. On 2 it does not pay (measured, fresh
processes, 40 calls of the 4096-token flash attention / 150 of the 1024^3 matmul): XLA's
compile takes both cores, so the calls interpreted meanwhile slow down as much as the compile
would have cost: 2.2-2.9 s in all against 2.7 s (flash), 1.95 s against 1.91 s (matmul), the
slowest call 324-437 ms against 387-407 ms (flash) and 77-85 ms against 123-126 ms (matmul).
Where cores are spare only the lowering (Python, 0.08 of flash's 0.39 s) competes."""
# why: measured (2 cores, load ~3): nki-samples' flash bwd lowers and compiles 1 571 / 6 760
# lowered instructions in 22 / 140 s; an estimate to rank kernels, not a timing
_COMPILE_S_PER_INST = 0.015

# why: measured on the bench kernels (2 cores): ~25 us per executed instruction plus ~2 ns per
# element it touches; an estimate to rank kernels, not a timing
_PER_STEP_S, _PER_ELEMENT_S = 25e-6, 2e-9
_AUTO = LRU(PROGRAM_CACHE_SIZE)  # id(kernel) -> _AutoEntry
_COMPILE_RATIOS: list = []  # measured / estimated seconds of auto's last compiles (at most 8)
_clock = time.perf_counter  # why: a seam for the tests of the policy (a fake clock)


@dataclasses.dataclass
class _AutoEntry:
    kernel: Kernel
    compile_s: float  # the static compile estimate
    compiles: bool  # False: the compiled program cannot, or should not, run it
    first: str  # the executor of the first call
    calls: int = 0
    interpreted_s: float = 0.0  # wall time the interpreter spent on this specialisation
    compiled: bool = False
    recent: dict = dataclasses.field(default_factory=lambda: {"numpy": [], "jax": []})
    warming: int = 0  # compiled calls after the compile that are no samples yet
    pending: object = None  # the background compile's Future (AUTO_BACKGROUND_COMPILE)
    blocking: bool = False  # the background compile failed: compile on the calling thread
    settled: str | None = None  # the executor measured faster, fixed after 5 timed compiled calls


# why: the fastest of each executor's last 5 calls: other processes and stalls (a page fault,
# a busy core) only ever add time, so the minimum is the steadiest estimate of the executor's
# own speed (medians of 3 picked the interpreter for the 1024^3 fp32 matmul at 13.2 against
# a compiled median of 13.2 ms, compiled running at 7 ms once warm)
_SAMPLES = 5
# why: a new executable's first calls fault in its buffers and wake XLA's threads: the fp32
# matmul's first two after its compile took 17.3 and 10.3 ms, its steady calls 7 ms
_WARMUP = 2


def estimated_interpreter_seconds(kernel: Kernel) -> float:
    """A static estimate of one interpreter run of ``kernel`` (seconds, machine-independent)."""
    work = estimate_work(kernel)
    return work["steps"] * _PER_STEP_S + work["elements"] * _PER_ELEMENT_S


def estimated_compile_seconds(kernel: Kernel) -> float:
    """A static estimate of the first compile of ``kernel``'s program (seconds)."""
    from .sim.jax_static import DEFAULT_UNROLL_BUDGET, emitted  # why: imports no jax
    return emitted(kernel.body, DEFAULT_UNROLL_BUDGET) * _COMPILE_S_PER_INST


def compile_scale() -> float:
    """How much longer than estimated ``backend="auto"``'s compiles took in this process.

    The median of measured over estimated seconds of its last 8 compiles (first compiled call:
    trace, compile and run), clamped to [0.1, 10]; 1 before any. The static estimate is fitted
    to large programs, and small ones compile in a fraction of it (the 1024-sized bench
    kernels: 0.08-0.2 s measured against 0.4-0.8 s estimated).
    """
    if not _COMPILE_RATIOS:
        return 1.0
    return float(min(10.0, max(0.1, np.median(_COMPILE_RATIOS))))


def _compilable(kernel: Kernel) -> bool:
    import importlib.util
    if importlib.util.find_spec("jax") is None:
        return False
    from .sim.jax_static import why_interpreted  # why: imports no jax
    return why_interpreted(kernel, SimParams()) is None  # (shuffle_affine: per call)


def auto_backend(prog: Program, params: SimParams | None) -> str:
    """The executor ``backend="auto"`` picks for this call of ``prog`` (``"numpy"``/``"jax"``).

    A ski-rental rule per kernel specialisation (the kernel IR: shapes, dtypes and constants
    are part of it): the interpreter until the wall time it has spent on the specialisation
    reaches its compile estimate (:func:`estimated_compile_seconds` times
    :func:`compile_scale`), the compiled program from then on. So a kernel called a few times
    never waits for a compile, and one called often loses at most its compile time against
    having compiled at once. The first call compiles at once when its
    :func:`estimated_interpreter_seconds` exceed both :data:`AUTO_COMPILE_FIRST_S` and the
    compile estimate. Kernels the compiled program cannot run, or whose estimated compile time
    exceeds :data:`AUTO_MAX_COMPILE_S`, always interpret.

    With :data:`AUTO_BACKGROUND_COMPILE` (on where the process has more than 2 CPUs) the
    compile that the estimate calls for runs in a background thread, from the arguments of
    the call that reached it; calls interpret until the executable is ready (their times are
    no samples: the compile shares the cores). A compile that fails for want of a JAX rule
    leaves the kernel interpreted; one that fails otherwise is retried on the calling thread,
    which reports the error as before.

    Once compiled, the program runs for 7 more calls (2 to warm up, 5 timed); then the
    executor whose fastest of its last 5 calls is faster runs every later call (a small kernel
    whose compiled call has the larger fixed cost, e.g. a 1024x1024 add: 0.4 ms compiled
    against 0.3 ms interpreted, goes back to the interpreter). A kernel that compiled on its
    first call has no interpreter samples and stays compiled.
    """
    k = prog.kernel
    e = _AUTO.lookup(id(k))
    if e is None or e.kernel is not k:
        compile_s = estimated_compile_seconds(k)
        compiles = compile_s <= AUTO_MAX_COMPILE_S and _compilable(k)
        first = "jax" if compiles and estimated_interpreter_seconds(k) > max(
            AUTO_COMPILE_FIRST_S, compile_s) else "numpy"
        e = _AUTO.store(id(k), _AutoEntry(k, compile_s, compiles, first))
    e.calls += 1
    if params is not None and params.shuffle_affine:
        return "numpy"  # why: the compiled program has no shuffled order; it would fall back
    if e.calls == 1:
        return e.first
    if e.settled is not None:
        return e.settled
    if e.pending not in (None, _WANTED) and e.pending.done():
        _compiled_ahead(e)
    if e.compiled:
        return "jax"
    if e.compiles and e.interpreted_s >= e.compile_s * compile_scale():
        if not AUTO_BACKGROUND_COMPILE or e.blocking:
            return "jax"
        if e.pending is None:
            e.pending = _WANTED  # (_run_auto starts it with this call's arguments)
    return "numpy"


_WANTED = "wanted"


def _compiled_ahead(e: _AutoEntry) -> None:
    """Take the finished background compile's outcome into ``e``."""
    exc = e.pending.exception()
    if exc is None:
        seconds, done = e.pending.result()
        e.compiled = done
        e.compiles = done
        if done:
            _calibrate(e, seconds)
    elif isinstance(exc, Unsupported):
        e.compiles = False  # why: the compiled call would fall back to the interpreter anyway
    else:
        e.blocking = True
    e.pending = None


def _calibrate(e: _AutoEntry, seconds: float) -> None:
    """Keep a compile's measured over estimated seconds (the last 8: :func:`compile_scale`)."""
    if e.compile_s > 0:
        _COMPILE_RATIOS.append(seconds / e.compile_s)
        del _COMPILE_RATIOS[:-8]


_COMPILER: list = []  # the one-thread executor of the background compiles (made on first use)


def _compiler():
    if not _COMPILER:
        from concurrent.futures import ThreadPoolExecutor
        _COMPILER.append(ThreadPoolExecutor(1, thread_name_prefix="nki-workbench-compile"))
    return _COMPILER[0]


def _compile_in_background(e: _AutoEntry, prog: Program, inputs: dict, params) -> None:
    kernel, inputs = prog.kernel, dict(inputs)

    def job():
        t0 = time.perf_counter()
        from .sim import jax_exec  # why: importing jax (~1 s) is the background's too
        done = jax_exec.compile_ahead(kernel, inputs, params)
        return time.perf_counter() - t0, done
    try:
        e.pending = _compiler().submit(job)
    except RuntimeError:  # why: the interpreter is shutting down (no new threads): compile here
        e.pending, e.blocking = None, True


def _auto_ran(prog: Program, backend: str, seconds: float) -> None:
    """Account one call ``auto_backend`` chose: interpreter time, or the compile it cost."""
    e = _AUTO.lookup(id(prog.kernel))
    if e is None or e.kernel is not prog.kernel:
        return
    if backend == "jax" and not e.compiled:
        e.compiled = True
        _calibrate(e, seconds)
        return
    if backend != "jax":
        e.interpreted_s += seconds
        if e.pending is not None:
            return  # why: a compile shares the cores meanwhile: no sample of the interpreter
    elif e.warming < _WARMUP:
        e.warming += 1
        return
    recent = e.recent[backend]
    recent.append(seconds)
    del recent[:-_SAMPLES]
    if e.settled is None and e.compiled and len(recent) == _SAMPLES and backend == "jax":
        interp = e.recent["numpy"]
        e.settled = "numpy" if interp and min(interp) < min(recent) else "jax"


def _run_auto(prog: Program, inputs: dict, params, observer) -> tuple:
    backend = auto_backend(prog, params)
    if backend == "jax":
        from .sim import jax_exec  # noqa: F401  why: importing jax is not the compile's time
    else:
        e = _AUTO.lookup(id(prog.kernel))
        if e is not None and e.kernel is prog.kernel and e.pending is _WANTED:
            _compile_in_background(e, prog, inputs, params)
    t0 = _clock()
    outs = run_program(prog, inputs, params, backend, observer=observer, quiet=True)
    _auto_ran(prog, backend, _clock() - t0)
    return backend, outs


def run(traced: Traced, inputs: dict, params: SimParams | None = None, *,
        observer=None, hooks: bool = True) -> dict:
    """Execute ``traced`` on ``inputs`` and return every output by name.

    Args:
        traced: the trace (IR plus calling convention).
        inputs: parameter name -> array (numpy or array-like).
        params: :class:`SimParams`; its ``backend`` picks the executor.
        observer: optional ``observer(inst, state)`` called before each executed instruction
            (forces the interpreter).
        hooks: run :data:`SIM_HOOKS` afterwards (``simulate_ranks`` does not: one rank's
            kernel cannot be re-run alone, its collectives need the other ranks).

    Returns:
        dict: output tensor name -> numpy array (storage dtype).
    """
    backend = "numpy" if observer is not None else selected_backend(params)
    kernel = traced.kernel
    if selected_numerics(params) == "nki-simulator":
        kernel = nki_simulator_kernel(kernel)
    prog = program_for(kernel)
    if backend == "auto":
        backend, outs = _run_auto(prog, inputs, params, observer)
    else:
        outs = run_program(prog, inputs, params, backend, observer=observer)
    for hook in SIM_HOOKS if hooks else ():
        hook(traced, inputs, params, outs, backend)
    return outs


def run_program(prog: Program, inputs: dict, params: SimParams | None, backend: str, *,
                observer=None, quiet: bool = False) -> dict:
    """Run a :class:`Program` on the executor ``backend`` names (numpy, jax or auto).

    ``quiet``: no ``CompiledFallbackWarning`` when the compiled program falls back (the
    choice was ``"auto"``'s, not the caller's).
    """
    if backend == "auto":
        return _run_auto(prog, inputs, params, observer)[1]
    check_memory(prog, params)
    if backend == "jax":
        from .sim import jax_exec  # why: importing jax costs ~1 s; only the compiled backend pays
        return jax_exec.run_compiled(prog, inputs, params, notice=not quiet)
    return prog.run(inputs, params, observer=observer)


_FOOTPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def footprint(prog: Program) -> tuple:
    """``(bytes, largest decl)``: what one simulation of the kernel allocates, about.

    The most that is alive at once of the tensors the kernel declares (not its inputs, which
    the caller holds; views share their root), each with its written-element mask (a byte per
    element): a tensor declared in a loop counts once (each iteration's replaces the last), and
    a tile is freed after its last use (:mod:`.sim.liveness`; unrolled loops declare a copy per
    iteration).
    """
    hit = _FOOTPRINTS.get(prog)
    if hit is None:
        def size(d):
            return int(np.prod(d.shape, dtype=object)) * (D.itemsize(D.from_name(d.dtype)) + 1)

        allocated = {s.decl.name for s in walk_stmts(prog.kernel.body) if isinstance(s, Alloc)}
        total, big, big_n = peak_bytes(prog.kernel.body, prog.decls, size), None, -1
        for d in prog.decls.values():
            if d.kind == "input" or d.base is not None:
                continue
            n = size(d)
            total += 0 if d.name in allocated else n
            if n > big_n:
                big, big_n = d, n
        hit = _FOOTPRINTS[prog] = (total, big)
    return hit


def check_memory(prog: Program, params: SimParams | None) -> None:
    """Refuse a simulation whose tensors exceed ``SimParams.max_bytes`` (before allocating)."""
    limit = (params or _DEFAULT).max_bytes
    if limit is None:
        return
    total, big = footprint(prog)
    if total <= limit:
        return
    size = int(np.prod(big.shape, dtype=object)) * D.itemsize(D.from_name(big.dtype))
    raise NkiError("wb_memory_budget",
                   f"simulating kernel '{prog.kernel.name}' would allocate about "
                   f"{_gib(total)} of tensors, more than SimParams(max_bytes={limit}) "
                   f"({_gib(limit)}); the largest is '{big.name}' {list(big.shape)} {big.dtype} "
                   f"({_gib(size)})", big.loc,
                   "pass params=SimParams(max_bytes=...) with a larger budget (None lifts it), "
                   "or simulate a smaller problem")


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**26 else f"{n / 2**20:.3g} MiB"


_DEFAULT = SimParams()


def package_outputs(kernel, outs: dict, arrays, *, owned: bool = False):
    """Simulator outputs in the kernel's calling convention.

    Returns the single array, a tuple/list, or — legacy kernels — writes each output into the
    matching array of ``arrays`` (parameter order) and returns ``None``. ``owned``: ``outs``
    come straight from :func:`run` and nothing else holds them, so arrays the simulation owns
    alone are handed over without a copy.
    """
    returns = kernel.attr("returns", "single")
    if returns == "none":
        by_name = {d.name: a for d, a in zip(kernel.params, arrays, strict=True)}
        for name in kernel.outputs:
            dst = by_name[name]
            dst[...] = D.cast(outs[name], dst.dtype) if dst.dtype != outs[name].dtype \
                else outs[name]
        return None
    seen: set = set()
    vals = [(_handed_out(outs[n], seen) if owned else np.array(outs[n])).reshape(s)
            for n, s in zip(kernel.outputs, _result_shapes(kernel), strict=True)]
    if returns == "single":
        return vals[0]
    return tuple(vals) if returns == "tuple" else vals


_SHAPES = LRU(PROGRAM_CACHE_SIZE)  # id(kernel) -> (kernel, result shapes)


def _result_shapes(kernel: Kernel) -> tuple:
    # why: Kernel.result_shapes walks the whole IR (decls()); a steady call needs it each time
    hit = _SHAPES.lookup(id(kernel))
    if hit is None or hit[0] is not kernel:
        hit = _SHAPES.store(id(kernel), (kernel, kernel.result_shapes()))
    return hit[1]


def _handed_out(x, seen: set):
    """``x`` as the caller's own writable array: copied unless the simulation owns it alone.

    why: the interpreter's output buffers are fresh arrays nothing else holds, so copying them
    only cost time (a 4 MiB copy per 1024^2 output), and so are the compiled program's result
    buffers :func:`.sim.jax_host.host_results` handed over; other views (read-only device
    results, an input returned as is) and repeats of one buffer are copied.
    """
    if isinstance(x, np.ndarray) and x.flags.writeable and id(x) not in seen and (
            x.flags.owndata or handed(x)):
        seen.add(id(x))
        return x
    return np.array(x)


# why: whatever a malformed IR still trips over inside an executor must reach the caller as an
# NkiError naming the kernel, never as a bare built-in exception from deep inside the simulator
# (Unsupported: a value rule met an operand it has no meaning for, e.g. an unknown ALU op)
_EXECUTOR_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError,
                    ZeroDivisionError, OverflowError, RecursionError, MemoryError, Unsupported)


def _program_of(cfg: dict, budget):
    """The config's Program, built only once its IR passed validation, consistency and budget.

    Building a Program compiles index grids, so an over-size IR must be stopped before it.
    """
    text = cfg["serialize_ir_string"]
    entry = _PARSED.lookup(text)
    if entry is not None:
        prog, estimate = entry
        _check_consistent(cfg, prog.kernel)
        if budget is not None:
            over_budget(prog.kernel, estimate, budget)
        return prog
    kernel = parse(text)  # parses and validates (wb_invalid_ir)
    _check_consistent(cfg, kernel)
    # why: the SBUF/PSUM totals, as the trace checked them: a tile-by-tile valid IR can still
    # hold more at once than the chip has (wb_alloc_oversubscribed, naming the tensors)
    _guarded(kernel.name, allocate, kernel)
    estimate = estimate_work(kernel)
    if budget is not None:
        over_budget(kernel, estimate, budget)
    prog = _guarded(kernel.name, Program, kernel)
    _PARSED.store(text, (prog, estimate))
    return prog


def _check_consistent(cfg: dict, k: Kernel) -> None:
    """The config's own facts about the kernel (tensor dims, MAC count) must match its IR."""
    facts = {"serialize_dims": _guarded(k.name, serialize_dims, k),
             "matmul_mac_count": _guarded(k.name, matmul_mac_count, k)}
    for key, want in facts.items():
        if cfg[key] != want:
            raise NkiError(INVALID_IR, f"kernel '{k.name}': the backend_config's {key} does not "
                           "match its serialize_ir_string (edited or corrupt config)",
                           hint="re-create the config with dump_config")


def _guarded(name: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (NkiError, IRParseError):
        raise
    except _EXECUTOR_ERRORS as exc:
        raise NkiError(INVALID_IR, f"kernel '{name}' from a backend_config could not be "
                       f"simulated: {type(exc).__name__}: {exc}",
                       hint="the IR was edited or comes from another tool; re-trace the "
                       "kernel") from exc


def simulate_backend_config(s, *arrays, params=None, backend=None, budget=DEFAULT_BUDGET):
    """Rebuild a kernel from its backend_config alone and simulate it on numpy arrays.

    The Python kernel function is never called: the IR is parsed from ``serialize_ir_string``,
    validated (:func:`nki_workbench.ir.validate`) and checked against ``budget`` before anything
    runs.

    Args:
        s: the base64 backend_config.
        *arrays: one numpy array per kernel tensor parameter, in parameter order (the
            config's ``serialize_dims["inputs"]``).
        params: optional :class:`~nki_workbench.SimParams` (``backend=`` picks the simulator).
        backend: deprecated spelling of ``params=SimParams(backend=...)``.
        budget: a :class:`~nki_workbench.ir.Budget` limiting the estimated work (instruction
            executions, elements, bytes); ``None`` for no limit.

    Returns:
        What simulating the traced kernel returns: the output array, a tuple/list of them, or
        ``None`` for a legacy kernel (whose output arrays are then written in place).

    Raises:
        ValueError: the config itself is malformed (see :func:`decode_backend_config`).
        IRParseError: ``serialize_ir_string`` is not IR text.
        NkiError: the IR breaks a rule or the budget (``wb_invalid_ir``), or the simulation
            reports a kernel error.
    """
    params = legacy_backend(params, backend, "simulate_backend_config")
    cfg = decode_backend_config(s)
    prog = _program_of(cfg, budget)
    k = prog.kernel
    if len(arrays) != len(k.params):
        names = ", ".join(d.name for d in k.params)
        raise NkiError(None, f"kernel '{cfg['func_name']}' takes {len(k.params)} tensors "
                       f"({names}); simulate_backend_config got {len(arrays)} arrays")
    bad = [d.name for d, a in zip(k.params, arrays, strict=True) if not isinstance(a, np.ndarray)]
    if bad:
        raise NkiError(None, f"simulate_backend_config needs numpy arrays; got other values "
                       f"for {', '.join(bad)}")
    if selected_numerics(params) == "nki-simulator":
        prog = program_for(nki_simulator_kernel(k))
    outs = _guarded(k.name, run_program, prog,
                    {d.name: a for d, a in zip(k.params, arrays, strict=True)}, params,
                    selected_backend(params))
    return _guarded(k.name, package_outputs, k, outs, arrays)


_ROUND_TRIPPED: set = set()


def config_round_trip_hook(traced: Traced, inputs: dict, params, outputs: dict,
                           backend: str | None = None) -> None:
    """Check that the backend_config alone reproduces a simulation (a :data:`SIM_HOOKS` entry).

    For each distinct kernel (first simulation only) the config is built, decoded, parsed and
    simulated on copies of the same inputs, by the same simulator backend; every output must be
    byte-identical. Warnings and ``device_print`` output of the second run are suppressed.
    Raises ``AssertionError``.
    """
    k = traced.kernel
    if k in _ROUND_TRIPPED:
        return
    _ROUND_TRIPPED.add(k)
    s = encode_backend_config(build_backend_config(traced, platform_target=k.target))
    arrays = [np.array(inputs[d.name], copy=True) for d in k.params]
    again = dataclasses.replace(params or SimParams(), backend=backend)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        back = simulate_backend_config(s, *arrays, params=again)
    if traced.returns == "none":
        index = {d.name: i for i, d in enumerate(k.params)}
        back = [arrays[index[n]] for n in k.outputs]
    elif traced.returns == "single":
        back = [back]
    for name, shape, got in zip(k.outputs, k.result_shapes(), back, strict=True):
        want = np.asarray(outputs[name])
        want = want.reshape(shape) if traced.returns != "none" else want
        want = D.cast(want, got.dtype) if want.dtype != got.dtype else want
        if got.shape != want.shape or got.tobytes() != want.tobytes():
            raise AssertionError(f"backend_config round trip of kernel '{k.name}' changed "
                                 f"output '{name}'")
