"""The numpy execution family: run a traced kernel on numpy inputs in the simulator.

``simulate(kernel_fn, args, kwargs, grid=..., target=..., params=...)`` traces (through the
per-kernel cache), binds the concrete arrays to the kernel parameters, runs
:class:`~.sim.interp.Program` and returns outputs the way NKI does: the returned tensors as
numpy arrays (a tuple/list when the kernel returns one), or — legacy convention — writes the
results into the numpy arrays passed as output arguments and returns ``None``.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as D
from .errors import NkiError
from .sim.interp import Program, SimParams
from .trace.kernel import Traced, flatten_args, trace_kernel

__all__ = ["simulate", "run_traced", "get_traced"]

_PROGRAMS: dict = {}


def _program(traced: Traced) -> Program:
    prog = _PROGRAMS.get(id(traced))
    if prog is None or prog.kernel is not traced.kernel:
        prog = Program(traced.kernel)
        _PROGRAMS[id(traced)] = prog
    return prog


def get_traced(func, args, kwargs, *, grid=(), target=None, cache=None) -> Traced:
    """Trace ``func`` for these arguments, reusing ``cache[key]`` when given."""
    if cache is None:
        return trace_kernel(func, args, kwargs, grid=grid, target=target)
    from .trace.kernel import _constants, spec_key
    from .hw import get_target
    bound, leaves = flatten_args(func, args, kwargs)
    key = spec_key(func, leaves, _constants(bound, None), tuple(grid), get_target(target).name)
    traced = cache.get(key)
    if traced is None:
        traced = trace_kernel(func, args, kwargs, grid=grid, target=target)
        cache[key] = traced
    return traced


def run_traced(traced: Traced, func, args, kwargs, params: SimParams | None = None):
    """Simulate an already traced kernel on concrete arguments."""
    _, leaves = flatten_args(func, args, kwargs)
    k = traced.kernel
    if len(leaves) != len(k.params):
        raise NkiError(None, f"kernel '{k.name}' was traced with {len(k.params)} tensor "
                       f"arguments, called with {len(leaves)}")
    inputs = {}
    for decl, (path, v) in zip(k.params, leaves):
        if not isinstance(v, np.ndarray):
            raise NkiError(None, f"simulation needs numpy arrays; argument '{path}' is "
                           f"{type(v).__name__}",
                           hint="placeholders (nt.tensor[...]) only trace; pass arrays to run")
        inputs[decl.name] = v
    outs = _program(traced).run(inputs, params)
    if traced.returns == "none":
        by_name = {d.name: v for d, (_, v) in zip(k.params, leaves)}
        for name in k.outputs:
            dst = by_name[name]
            dst[...] = D.cast(outs[name], dst.dtype) if dst.dtype != outs[name].dtype \
                else outs[name]
        return None
    vals = [np.array(outs[n]) for n in k.outputs]
    if traced.returns == "single":
        return vals[0]
    return tuple(vals) if traced.returns == "tuple" else vals


def simulate(func, args=(), kwargs=None, *, grid=(), target=None, params=None, cache=None):
    """Trace (or reuse) and simulate ``func(*args, **kwargs)`` on numpy inputs.

    Returns:
        The kernel's outputs as numpy arrays (``None`` for legacy output-argument kernels).
    """
    kwargs = kwargs or {}
    traced = get_traced(func, args, kwargs, grid=grid, target=target, cache=cache)
    return run_traced(traced, func, args, kwargs, params)
