"""The JAX bridge's primitive: ``nki_call_p``, its trace parameter and its evaluation rules.

:class:`JaxTraceResult` is the primitive's one parameter (kernel identity + specialisation key,
so JAX reuses jaxprs and lowerings of equal calls); :func:`nki_call_eval` is its abstract
evaluation, eager calls and ``vmap`` have rules here, and :func:`run_on_host` is what every
simulator path of the bridge calls. The lowerings (:mod:`.jax_lowering`) and the kernel class
(:mod:`.jax`) build on this module.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching

from .. import dtypes as D
from .. import tree as T
from ..encode import DeclTensor, DumpedConfig
from ..errors import NkiError
from ..execution import run
from ..options import SimParams

__all__ = ["JAX_TO_NKI_DTYPES", "TRACE_COUNTER", "Leaf", "bound_with", "nki_dtype_name",
           "operand_spec", "JaxTraceResult", "dumped_in_specs", "nki_call_p", "nki_call_eval",
           "run_on_host", "run_batched_on_host", "sim_params_of", "element_specs",
           "unbatched_map"]

# jax dtype name -> NKI dtype name; None = rejected (reason in _REJECTED)
JAX_TO_NKI_DTYPES = {
    "bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "uint8": "uint8",
    "uint16": "uint16", "uint32": "uint32", "float16": "float16", "float32": "float32",
    "bfloat16": "bfloat16", "float8_e4m3": "float8_e4m3", "float8_e5m2": "float8_e5m2",
    "float64": None, "int64": None, "uint64": None, "float8_e4m3fn": None,
}
"""How a jax dtype is passed to a kernel (``None``: rejected with a reason)."""

# why: the device has no 64-bit types and e4m3fn bytes decode differently from NKI's e4m3
_REJECTED = {
    "float64": "NKI has no 64-bit types; cast to float32 (or turn off jax_enable_x64)",
    "int64": "NKI has no 64-bit types; cast to int32 (or turn off jax_enable_x64)",
    "uint64": "NKI has no 64-bit types; cast to uint32 (or turn off jax_enable_x64)",
    "float8_e4m3fn": "NKI's float8_e4m3 is the IEEE-style e4m3 (max 240, has inf), not e4m3fn; "
                     "cast to jnp.float8_e4m3",
}

TRACE_COUNTER = {"traces": 0, "lowering_retraces": 0}
"""Kernel traces the bridge ran (tests read it to check one trace per specialisation)."""


# ----------------------------------------------------------------------------- argument templates
@dataclasses.dataclass(frozen=True)
class Leaf:
    """Stands for the ``index``-th tensor operand inside a call's bound arguments."""

    index: int


def bound_with(bound: inspect.BoundArguments, is_leaf, fn) -> inspect.BoundArguments:
    """A copy of bound arguments with every leaf (``is_leaf``) replaced by ``fn(leaf)``."""
    args = {n: T.map_leaves(fn, v, is_leaf) for n, v in bound.arguments.items()}
    return inspect.BoundArguments(bound.signature, args)


def nki_dtype_name(dtype) -> str:
    """The NKI name of a jax/numpy dtype (a clear error for the rejected ones)."""
    name = np.dtype(dtype).name
    if name in JAX_TO_NKI_DTYPES:
        nki = JAX_TO_NKI_DTYPES[name]
        if nki is None:
            raise NkiError(None, f"jax dtype {name} cannot be passed to an NKI kernel: "
                           f"{_REJECTED[name]}")
        return nki
    raise NkiError(None, f"jax dtype {name} has no NKI counterpart; supported: "
                   + ", ".join(k for k, v in JAX_TO_NKI_DTYPES.items() if v))


def operand_spec(shape, dtype) -> tuple:
    """``(shape, NKI dtype name)`` of an operand (the form trace specs compare in)."""
    return tuple(int(s) for s in shape), nki_dtype_name(dtype)


# ----------------------------------------------------------------------------- the trace result
class JaxTraceResult:
    """The ``nki_call`` primitive's parameter: one kernel specialisation, traced lazily.

    Equal (and equally hashed) when the kernel object and the specialisation key are the same,
    so JAX caches jaxprs and lowerings across calls. :func:`nki_call_eval` fills
    :attr:`dumped`; lowering reads it (or re-traces, see ``NKI_DONT_CACHE_TRACE_FOR_JAX_LOWERING``).

    Attributes:
        kernel: the :class:`JAXKernel` (``None`` when built from an existing config).
        template: the call's bound arguments with tensors replaced by operand markers.
        in_specs: ``(shape, NKI dtype name)`` per operand.
        key: the specialisation key (hash and equality).
        dumped: the :class:`~..encode.DumpedConfig`, once traced.
    """

    __slots__ = ("kernel", "template", "in_specs", "key", "dumped", "_hash")

    def __init__(self, kernel, template, in_specs, key, dumped: DumpedConfig | None = None):
        self.kernel = kernel
        self.template = template
        self.in_specs = tuple(in_specs)
        self.key = key
        self.dumped = dumped
        self._hash = hash((id(kernel), key))

    @classmethod
    def from_dumped(cls, dumped: DumpedConfig) -> JaxTraceResult:
        """A trace result for an existing config (it cannot re-trace)."""
        k = dumped.traced.kernel
        specs = tuple((tuple(d.shape), d.dtype) for d in k.params)
        return cls(None, None, specs, ("config", dumped.backend_config), dumped)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (isinstance(other, JaxTraceResult) and self.kernel is other.kernel
                and self.key == other.key)

    def __repr__(self):
        name = self.kernel.func_name if self.kernel is not None else \
            self.dumped.config["func_name"]
        return f"JaxTraceResult({name}, {[list(s) for s, _ in self.in_specs]})"

    @property
    def name(self) -> str:
        """The kernel's name."""
        return self.dump().config["func_name"]

    def dump(self, in_specs=None, *, cache: bool = True) -> DumpedConfig:
        """Trace the kernel (through ``dump_config``) for ``in_specs`` (default: the call's).

        With ``cache=False`` the kernel's specialisation cache is bypassed (a fresh trace).
        """
        if in_specs is None and self.dumped is not None and cache:
            return self.dumped
        if self.kernel is None:
            return self.dumped
        specs = self.in_specs if in_specs is None else tuple(in_specs)
        decls = [DeclTensor(shape, D.canonical(dt)) for shape, dt in specs]
        bound = bound_with(self.template, lambda v: isinstance(v, Leaf),
                            lambda leaf: decls[leaf.index])
        dumped = self.kernel._dump(bound, cache=cache)
        if in_specs is None:
            self.dumped = dumped
        return dumped

    def out_specs(self, dumped: DumpedConfig | None = None) -> list:
        """``(shape, storage numpy dtype)`` per output."""
        dumped = dumped or self.dump()
        return [(tuple(s), D.storage_dtype(dt)) for s, dt in dumped.return_types]


def dumped_in_specs(dumped: DumpedConfig) -> tuple:
    """``(shape, NKI dtype name)`` per tensor parameter of a dumped kernel."""
    return tuple((tuple(d.shape), d.dtype) for d in dumped.traced.kernel.params)


# ----------------------------------------------------------------------------- the primitive
nki_call_p = Primitive("nki_call")
nki_call_p.multiple_results = True


def nki_call_eval(*avals, trace: JaxTraceResult, batch: tuple = ()):
    """Abstract evaluation: trace once (through ``dump_config``) and return the output types.

    Args:
        *avals: one abstract value per tensor operand.
        trace: the call's :class:`JaxTraceResult`.
        batch: the ``vmap`` levels the call carries (:func:`batch_levels`), outermost first.

    Returns:
        One ``ShapedArray`` per kernel output (with the batch dimensions in front).
    """
    dumped = trace.dump()
    got = element_specs(avals, batch)
    if got != dumped_in_specs(dumped):
        raise NkiError(None, f"kernel '{trace.name}' was traced for operands "
                       f"{_fmt_specs(dumped_in_specs(dumped))} but is bound to "
                       f"{_fmt_specs(got)}")
    lead = tuple(size for size, _ in batch)
    return [ShapedArray(lead + tuple(s), dt) for s, dt in trace.out_specs(dumped)]


def element_specs(avals, batch: tuple) -> tuple:
    """``(shape, NKI dtype)`` of one batch element of each operand (batch dimensions removed)."""
    return tuple(operand_spec(a.shape[sum(1 for _, flags in batch if flags[i]):], a.dtype)
                 for i, a in enumerate(avals))


def _fmt_specs(specs) -> str:
    return ", ".join(f"{dt}{list(s)}" for s, dt in specs)


def run_on_host(dumped: DumpedConfig, arrays, params=None) -> list:
    """Simulate a dumped kernel on numpy operands; one array per output (storage dtypes).

    Runs the numpy interpreter (``backend="numpy"``: this is called from inside JAX host
    callbacks, where starting another JAX computation can deadlock), then the simulation hooks.
    """
    traced = dumped.traced
    k = traced.kernel
    inputs = {d.name: np.asarray(a) for d, a in zip(k.params, arrays, strict=True)}
    outs = run(traced, inputs, dataclasses.replace(params or SimParams(), backend="numpy"))
    decls = k.decls()
    return [np.asarray(outs[n], dtype=D.storage_dtype(D.from_name(decls[n].dtype))).reshape(s)
            for n, s in zip(k.outputs, k.result_shapes(), strict=True)]


def sim_params_of(trace: JaxTraceResult):
    """The :class:`SimParams` a kernel object carries (``None``: the defaults)."""
    return getattr(trace.kernel, "sim_params", None)


_HOST_LOCK = threading.Lock()


def run_batched_on_host(dumped: DumpedConfig, arrays, params, batch: tuple) -> list:
    """:func:`run_on_host` over every element of the ``vmap`` levels ``batch``, stacked.

    Host runs are serialised by one lock: concurrent host callbacks from several threads
    calling jitted programs are where JAX's CPU runtime was seen to hang (issue 22), and the
    interpreter gains nothing from running twice at once under the GIL.
    """
    sizes = tuple(size for size, _ in batch)
    arrays = [np.asarray(a) for a in arrays]
    with _HOST_LOCK:
        if not batch:
            return run_on_host(dumped, arrays, params)
        results = []
        for index in np.ndindex(*sizes):
            ops = []
            for i, a in enumerate(arrays):
                pick = tuple(j for j, (_, flags) in zip(index, batch, strict=True) if flags[i])
                ops.append(a[pick] if pick else a)
            results.append(run_on_host(dumped, ops, params))
    return [np.stack([r[k] for r in results]).reshape(sizes + results[0][k].shape)
            for k in range(len(results[0]))]


def _impl(*args, trace: JaxTraceResult, batch: tuple = ()):
    """Eager call (no jit): simulate on the host now."""
    dumped = trace.dump()
    outs = run_batched_on_host(dumped, args, sim_params_of(trace), batch)
    return [jnp.asarray(o) for o in outs]


def _batch(args, dims, *, trace: JaxTraceResult, batch: tuple = ()):
    """vmap: one more batch level on the call (batch axis 0 on its operands and outputs).

    The lowerings decide how a batched call runs: the compiled program batched by ``jax.vmap``
    (cpu/gpu), one host callback over the batch, or a loop of custom calls (neuron).
    """
    # why: JAX marks an unbatched operand with None (batching.not_mapped, not re-exported)
    flags = tuple(d is not None for d in dims)
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    ops = [jnp.moveaxis(a, d, 0) if d is not None else a for a, d in zip(args, dims, strict=True)]
    outs = nki_call_p.bind(*ops, trace=trace, batch=((size, flags),) + tuple(batch))
    return list(outs), [0] * len(outs)


def unbatched_map(fn, ops, batch: tuple):
    """``fn(*element_operands)`` over the ``vmap`` levels ``batch`` as nested ``lax.map`` loops."""
    if not batch:
        return tuple(fn(*ops))
    (_, flags), rest = batch[0], batch[1:]
    mapped = [i for i, f in enumerate(flags) if f]

    def one(xs):
        inner = list(ops)
        for i, x in zip(mapped, xs, strict=True):
            inner[i] = x
        return unbatched_map(fn, inner, rest)

    return lax.map(one, tuple(ops[i] for i in mapped))


def _no_derivative(primals, tangents, *, trace: JaxTraceResult, batch: tuple = ()):
    raise NkiError("wb_jax_no_derivative",
                   f"JAX cannot differentiate through NKI kernel '{trace.name}': a kernel has no "
                   "derivative of its own",
                   hint="attach a backward with nki_workbench.jax.with_vjp(kernel, bwd), or "
                        "stop the gradient with jax.lax.stop_gradient on its inputs")


nki_call_p.def_abstract_eval(nki_call_eval)
nki_call_p.def_impl(_impl)
batching.primitive_batchers[nki_call_p] = _batch
ad.primitive_jvps[nki_call_p] = _no_derivative
