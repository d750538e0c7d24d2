"""Compiled simulation: a kernel's IR lowered to one jitted JAX program.

``run_compiled(kernel, inputs, params)`` has the contract of
``interp.Program(kernel).run(inputs, params)`` (same inputs, same outputs, same warnings and
errors) and runs the whole kernel as one XLA executable, on the default JAX device (a GPU when
a CUDA jaxlib is installed: ``pip install "jax[cuda12]==0.10.2"``; ``jax.devices()`` decides).

This module is the program layer: the compile cache, the first-call (tracing) lock, the
inputs' zero-copy windows, the repeat path and the fallback decisions. The IR -> JAX
translation (how tensors, loops, accesses and checks become JAX) is :mod:`.jax_lower`.

* The checks stay on: the lowered program computes one flag that is true exactly when the
  interpreter would report something (an out-of-bounds access, a read of unwritten memory, an
  output with unwritten elements). When it is set the kernel is run again in the interpreter,
  which raises or warns with its exact message and returns its results, so a user never
  trades a diagnostic for speed.
* An opcode without a JAX rule (and a few run modes: ``shuffle_affine``, collectives, random
  numbers, race tracking of ``affine_range`` loops) makes the kernel run in the interpreter,
  with a :class:`~nki_workbench.CompiledFallbackWarning` naming the reason (once per kernel
  and reason).

Inputs reach the program without a host copy on CPU (:func:`.jax_static.window`).
Compiled programs are cached per kernel IR (the specialisation the tracer's cache keys on)
and, inside, per input shapes and dtypes; the cache is bounded (:class:`CompiledCache`).

Backend selection: ``SimParams(backend=...)``, else ``NKI_WORKBENCH_SIM_BACKEND`` read in one
place, :func:`~..options.selected_backend`; ``execution.run`` (the one run path) consults it.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from .. import platform as _platform
from ..errors import CompiledFallbackWarning, warn
from ..ir import Kernel
from ..options import BACKENDS, SIM_BACKEND_ENV, SimParams, selected_backend
from ..semantics import Unsupported, numerics_jax
from .interp import Program
from .jax_host import host_results
from .jax_lower import Lower, lowered_size
from .jax_static import (
    checked_inputs,
    param_specs,
    subnormal_input,
    tracked,
    why_interpreted,
    window,
)
from .memory import tune_malloc

__all__ = ["run_compiled", "compile_ahead", "selected_backend", "SIM_BACKEND_ENV", "BACKENDS",
           "compiled", "CPU_OPTIONS", "CompiledCache", "COMPILED_CACHE_SIZE",
           "COMPILED_CACHE_WEIGHT"]

COMPILED_CACHE_SIZE = 64
"""Most kernels whose compiled programs stay cached (the least recently used go first)."""
COMPILED_CACHE_WEIGHT = 40_000
"""Most lowered instructions (``jax_lower.lowered_size``) the cached kernels may hold together.
An executable's memory grows with it: nki-samples' flash-attention backward at 8192 tokens
weighed 19 788 and kept ~2 GB while its causal condition unrolled loops (1 373 with split
loops); without a bound, the 16 cases of its test file in one process held 24 GB and were
killed (measured). The kernel being run is never dropped."""

CPU_OPTIONS = {"xla_cpu_multi_thread_eigen": False} if (os.cpu_count() or 1) <= 4 else {}
"""XLA options of the compiled programs on CPU. On a small CPU (measured on a shared 2-core
machine) Eigen's threaded tile dots lose to single-threaded ones (the tiled bf16 matmul of
``bench/compiled_sim.py``: 37 -> 31 ms); larger machines keep XLA's default. Re-measured on
larger problems (2 cores, load average ~8): matmul 2048^3 698-978 ms single vs 918-1048 ms
threaded, softmax 4096^2 673-692 vs 896-1037 ms, so the small-machine choice stays."""
_NOTICED: set = set()
_ZERO = np.int32(0)
_DEFAULT_PARAMS = SimParams()
_LOCK = threading.Lock()


class CompiledCache:
    """Compiled kernels by IR, dropped least recently used first beyond a count or a weight.

    Args:
        size: the most kernels kept.
        weight: the most lowered instructions kept, all kernels together (a kernel heavier
            than that on its own is kept alone).
    """

    def __init__(self, size: int = COMPILED_CACHE_SIZE, weight: int = COMPILED_CACHE_WEIGHT):
        self.size, self.weight = size, weight
        self._by_ir: dict = {}           # kernel IR -> entry (equal IRs share one)
        self._by_id: dict = {}           # id(kernel object) -> entry: the fast path
        self._order: OrderedDict = OrderedDict()  # id(entry) -> (entry, weight), oldest first
        self._total = 0

    def __len__(self) -> int:
        return len(self._order)

    def get(self, kernel: Kernel):
        """The entry of ``kernel`` (refreshed), or ``None``."""
        entry = self._by_id.get(id(kernel))
        if entry is None or entry.kernel is not kernel:
            entry = self._by_ir.get(kernel)
            if entry is None:
                return None
            self._by_id[id(kernel)] = entry
            entry.ids.add(id(kernel))
        self._order.move_to_end(id(entry))
        return entry

    def put(self, kernel: Kernel, entry, weight: int):
        """Keep ``entry`` for ``kernel``, dropping the least recently used beyond the bounds."""
        self._by_ir[kernel] = entry
        self._by_id[id(kernel)] = entry
        entry.ids = {id(kernel)}
        self._order[id(entry)] = (entry, weight)
        self._total += weight
        while len(self._order) > 1 and (len(self._order) > self.size or
                                        self._total > self.weight):
            self._drop(next(iter(self._order.values()))[0])
        return entry

    def pop(self, kernel: Kernel, default=None):
        """Drop ``kernel``'s entry; returns it (or ``default``)."""
        entry = self._by_ir.get(kernel)
        if entry is None:
            return default
        self._drop(entry)
        return entry

    def clear(self):
        """Drop every entry."""
        self.__init__(self.size, self.weight)

    def _drop(self, entry):
        _, weight = self._order.pop(id(entry))
        self._total -= weight
        self._by_ir.pop(entry.kernel, None)
        for i in entry.ids:
            if self._by_id.get(i) is entry:
                del self._by_id[i]


_CACHE = CompiledCache()


def _jax():
    import jax  # why: importing jax costs ~1 s; only the compiled backend pays it
    _platform.apply_compilation_cache()  # why: opt-in (a no-op unless requested)
    return jax


# ----------------------------------------------------------------------------- entry point
class _Compiled:
    """One kernel's compiled executables (per input signature and check mode)."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.lower = Lower(kernel)
        self.fns = {}
        self.program = None
        self.runs = 0
        self.why = {}
        self.has_races = bool(tracked(kernel))
        self.device = None
        self.cvals = None
        self.zero = None
        self.last = None
        self.warm = set()
        self.specs = param_specs(kernel)
        self.clean = set()  # why: programs whose flag is a constant False need not read it
        self.tracing = threading.Lock()
        self.ahead = {}  # id(jitted fn) -> (fn, its executable, from compile_ahead)

    def call(self, f, *args):
        """Run jitted ``f``; its first call (the trace) holds the lock.

        why: one ``_Lower`` holds the lowering state, so two threads (``simulate_ranks``
        runs one per rank) must not trace through it at once.
        """
        if id(f) in self.warm:
            return f(*args)
        with self.tracing:
            hit = self.ahead.get(id(f))
            if hit is not None:  # why: compiled meanwhile by compile_ahead (a background thread)
                return hit[1](*args)
            out = f(*args)
            self.warm.add(id(f))
            if self.lower.clean:
                self.clean.add(id(f))
        return out

    def remember(self, inputs, arrays, params, run, args):
        """Keep this call's program and windows for a repeat on the very same arrays.

        Only weak references to the arrays are kept (a window owns no memory), so nothing of a
        caller's data stays alive through this.
        """
        names = [p[0] for p in self.specs]
        if self.device.platform != "cpu" or len(inputs) != len(names) or any(
                a is not inputs[n] for a, n in zip(arrays, names, strict=True)):
            # why: converted inputs are new arrays every call, and a device copy of an
            # input would miss its in-place updates
            self.last = None
            return
        wins = tuple(None if w is a else w for w, a in zip(args, arrays, strict=True))
        run = self.ahead.get(id(run), (None, run))[1]  # (never the jitted twin of an executable)
        self.last = (params, run, wins, tuple((n, weakref.ref(a), a.nbytes)
                                              for n, a in zip(names, arrays, strict=True)))

    def repeat(self, inputs, params):
        """``(run, args)`` when ``inputs`` are the very arrays of the last call, else ``None``.

        why: a kernel called again on the same arrays skips the checks and windows they passed
        then (an array's data moves only with an in-place resize, which changes nbytes); on a
        sub-millisecond kernel that Python work is a tenth of the run. Only the subnormal scan
        runs again (:func:`run_compiled`): it depends on the data, which may change in place.
        """
        last = self.last
        if last is None or len(inputs) != len(last[3]) or (last[0] is not params and
                                                            last[0] != params):
            return None
        args = []
        for (name, ref, nbytes), win in zip(last[3], last[2], strict=True):
            a = inputs.get(name)
            if a is None or ref() is not a or a.nbytes != nbytes:
                return None
            args.append(a if win is None else win)
        return last[1], args

    def fn(self, uninit_error: bool, races: bool, offsets: tuple):
        """The jitted program for a check mode and the inputs' offsets (``jax_static.window``)."""
        key = (uninit_error, races and self.has_races, offsets, numerics_jax.CHECK_FLUSHES)
        f = self.fns.get(key)
        if f is None:
            jax = _jax()
            shapes = [tuple(p.shape) for p in self.kernel.params]

            def run(inputs, cvals, zero):
                from jax import lax
                inputs = [x if off is None else
                          lax.slice(x, (off,), (off + int(np.prod(shape)),)).reshape(shape)
                          for x, off, shape in zip(inputs, offsets, shapes, strict=True)]
                return self.lower.build(inputs, cvals, zero, *key[:2])
            cpu = jax.devices()[0].platform == "cpu"
            f = self.fns[key] = jax.jit(run, compiler_options=CPU_OPTIONS if cpu else None)
        return f

    def args(self, arrays: list):
        """Device arguments (zero-copy where possible), their offsets and the constants."""
        jax = _jax()
        if self.cvals is None:  # why: cvals last, so another thread never sees half of it
            device = jax.devices()[0]
            self.device = device
            self.zero = jax.device_put(_ZERO, device)  # why: a host scalar costs each call ~3 us
            self.cvals = [jax.device_put(c, device) for c in self.lower.const_values]
        if self.device.platform != "cpu":
            return jax.device_put(arrays, self.device), (None,) * len(arrays), self.cvals
        # why: the jitted call adopts aligned host arrays itself (faster than device_put)
        wins = [window(a) for a in arrays]
        return [w for w, _ in wins], tuple(off for _, off in wins), self.cvals

    def why_not(self, params: SimParams):
        """Why the kernel runs in the interpreter under ``params`` (``None``: it compiles)."""
        key = (params.shuffle_affine,)
        why = self.why.get(key, False)
        if why is False:
            why = self.why[key] = self.lower.unsupported or why_interpreted(self.kernel, params)
        return why

    def interpreter(self) -> Program:
        if self.program is None:
            self.program = Program(self.kernel)
        return self.program


def compiled(kernel: Kernel) -> _Compiled:
    """The cached compiled form of ``kernel`` (one per IR; equal IRs share it)."""
    with _LOCK:
        entry = _CACHE.get(kernel)
        if entry is None:
            entry = _CACHE.put(kernel, _Compiled(kernel), lowered_size(kernel))
        return entry


def compile_ahead(kernel: Kernel, inputs: dict, params: SimParams | None = None) -> bool:
    """Compile the program :func:`run_compiled` would run for these arguments, without running it.

    ``backend="auto"`` calls this in a background thread. Only the inputs' shapes, dtypes and
    alignment matter (their values are unused): JAX's ahead-of-time path traces and compiles
    from those, and the executable takes the jitted function's place, so the next compiled
    call with inputs laid out alike runs at once.

    Args:
        kernel: the traced kernel IR.
        inputs: parameter name -> array, as for :func:`run_compiled`.
        params: simulation parameters (``SimParams()`` when ``None``).

    Returns:
        bool: ``False`` when the kernel runs in the interpreter (nothing to compile).

    Raises:
        Unsupported: the lowering met an opcode or pattern without a JAX rule (remembered: the
            kernel's calls then interpret, as after a compiled call).
    """
    params = params or _DEFAULT_PARAMS
    comp = compiled(kernel)
    key = (params.shuffle_affine,)
    if comp.why_not(params) is not None:
        return False
    arrays = checked_inputs(kernel, inputs, comp.specs)
    args, offsets, cvals = comp.args(arrays)
    f = comp.fn(params.uninitialized == "error", params.detect_races, offsets)
    jax = _jax()
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    with comp.tracing:
        if id(f) in comp.warm or id(f) in comp.ahead:
            return True
        try:
            exe = f.lower(specs, cvals, comp.zero).compile()
        except Unsupported as exc:
            comp.why[key] = str(exc)
            raise
        comp.ahead[id(f)] = (f, exe)  # (f kept alive: its id stays its own)
        comp.warm.add(id(exe))
        if comp.lower.clean:
            comp.clean.add(id(exe))
        for k, g in list(comp.fns.items()):
            if g is f:
                comp.fns[k] = exe
    return True


def _notice(kernel: Kernel, why: str):
    key = (kernel.name, why)
    if key not in _NOTICED:
        _NOTICED.add(key)
        warn(CompiledFallbackWarning,
             f"kernel '{kernel.name}' runs in the interpreter, not compiled: {why}",
             hint="the results are the interpreter's; see semantics.registry.INTERPRETER_ONLY")


def run_compiled(kernel, inputs: dict, params: SimParams | None = None, *,
                 notice: bool = True) -> dict:
    """Run ``kernel`` (a :class:`Kernel` or :class:`Program`) as one compiled JAX program.

    Same contract as ``Program(kernel).run(inputs, params)``: ``inputs`` maps parameter names
    to arrays; returns output name -> numpy array in storage dtype, with the interpreter's
    warnings and errors (the interpreter re-runs the kernel whenever one is due). On CPU the
    arrays are the program's own result buffers, writable and the caller's
    (:func:`.jax_host.host_results`); elsewhere, and for a buffer that might be shared, they
    are read-only views: copy before writing.

    Args:
        kernel: the traced kernel IR (or an interpreter ``Program`` of it).
        inputs: parameter name -> numpy array.
        params: simulation parameters (``SimParams()`` when ``None``).
        notice: warn (``CompiledFallbackWarning``) when the kernel falls back to the
            interpreter; ``backend="auto"`` turns it off.

    Returns:
        dict: output tensor name -> numpy array.
    """
    params = params or _DEFAULT_PARAMS
    if isinstance(kernel, Program):
        kernel = kernel.kernel
    comp = compiled(kernel)
    again = comp.repeat(inputs, params)
    refilled = False
    if again is not None:
        run, args = again
        outs, flag = run(args, comp.cvals, comp.zero)
        # why: the scan runs while XLA computes (the program never writes its inputs, and its
        # results are fresh buffers); inputs refilled in place with subnormals drop the result,
        # and the full path below notices them and interprets
        if subnormal_input(kernel, [inputs[n] for n, *_ in comp.specs]):
            again, refilled = None, True
    if again is None:
        tune_malloc()  # why: XLA's buffers too: heap reuse instead of page faults per result
        arrays = checked_inputs(kernel, inputs, comp.specs)  # why: looked up once per kernel
        key = (params.shuffle_affine,)
        why = comp.why_not(params)
        if why is not None:
            if notice:
                _notice(kernel, why)
            return comp.interpreter().run(inputs, params, backend="numpy")
        try:
            args, offsets, _ = comp.args(arrays)
            run = comp.fn(params.uninitialized == "error", params.detect_races, offsets)
            # why: a compiled program runs while the scan reads (as on the repeat path); one
            # still to compile is not compiled for inputs it would not run on
            ready = id(run) in comp.warm and not refilled  # (a known hit: no second run)
            sub = None if ready else subnormal_input(kernel, arrays)
            if sub is None:
                outs, flag = comp.call(run, args, comp.cvals, comp.zero)
                sub = subnormal_input(kernel, arrays) if ready else None
        except Unsupported as exc:
            why = comp.why[key] = str(exc)
            if notice:
                _notice(kernel, why)
            return comp.interpreter().run(inputs, params, backend="numpy")
        if sub is not None:
            _notice(kernel, f"input '{sub}' holds subnormal floats, which XLA's CPU runtime "
                    "flushes to zero")
            return comp.interpreter().run(inputs, params, backend="numpy")
        comp.remember(inputs, arrays, params, run, args)
    comp.runs += 1
    # why: outputs first: reading the flag then costs no second wait for the program
    if comp.device.platform == "cpu":
        res = dict(zip(kernel.outputs, host_results(outs, args), strict=True))
    else:
        res = {name: np.asarray(o) for name, o in zip(kernel.outputs, outs, strict=True)}
    if id(run) in comp.clean or not np.asarray(flag):
        return res
    # the interpreter reports what the flag saw, with its exact message
    return comp.interpreter().run(inputs, params, backend="numpy")
