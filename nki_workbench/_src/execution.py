"""The one run path: ``run(traced, inputs, params)`` executes a traced kernel on arrays.

Everything that simulates goes through here: ``simulate``/``run_traced`` (the numpy kernel
modes), ``inspect``, the bridges' host callbacks, ``simulate_ranks`` and
:func:`simulate_backend_config`. It picks the executor from :class:`~.options.SimParams`
(``backend="numpy"`` interpreter or ``"jax"`` compiled program), runs it, then calls
:data:`SIM_HOOKS`. Compiled programs are cached per kernel object, a bounded LRU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import warnings

import numpy as np

from . import dtypes as D
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
from .ir import IRParseError, Kernel, parse
from .ir.budget import DEFAULT_BUDGET, estimate_work, over_budget
from .ir.validate import CODE as INVALID_IR
from .options import SimParams, legacy_backend, selected_backend
from .semantics import Unsupported
from .sim.interp import Program
from .trace.kernel import Traced

__all__ = ["run", "run_program", "program_for", "package_outputs", "SIM_HOOKS",
           "simulate_backend_config", "config_round_trip_hook", "PROGRAM_CACHE_SIZE"]

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
    outs = run_program(program_for(traced), inputs, params, backend, observer=observer)
    for hook in SIM_HOOKS if hooks else ():
        hook(traced, inputs, params, outs, backend)
    return outs


def run_program(prog: Program, inputs: dict, params: SimParams | None, backend: str, *,
                observer=None) -> dict:
    """Run a :class:`Program` on the executor ``backend`` names (``"numpy"`` or ``"jax"``)."""
    if backend == "jax":
        from .sim import jax_exec  # why: importing jax costs ~1 s; only the compiled backend pays
        return jax_exec.run_compiled(prog, inputs, params)
    return prog.run(inputs, params, observer=observer)


def package_outputs(kernel, outs: dict, arrays):
    """Simulator outputs in the kernel's calling convention.

    Returns the single array, a tuple/list, or — legacy kernels — writes each output into the
    matching array of ``arrays`` (parameter order) and returns ``None``.
    """
    returns = kernel.attr("returns", "single")
    if returns == "none":
        by_name = {d.name: a for d, a in zip(kernel.params, arrays, strict=True)}
        for name in kernel.outputs:
            dst = by_name[name]
            dst[...] = D.cast(outs[name], dst.dtype) if dst.dtype != outs[name].dtype \
                else outs[name]
        return None
    vals = [np.array(outs[n]).reshape(s)
            for n, s in zip(kernel.outputs, kernel.result_shapes(), strict=True)]
    if returns == "single":
        return vals[0]
    return tuple(vals) if returns == "tuple" else vals


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
