"""The JAX bridge: an NKI kernel as one JAX primitive (``nki_call``).

Calling a :class:`JAXKernel` (``@nki.jit(mode="jax")``, or :func:`nki_call`) with jax arrays,
tracers or numpy arrays binds the primitive ``nki_call_p`` on the tensor arguments; the
non-tensor arguments stay Python constants that specialise the trace. The primitive's one
parameter is a :class:`JaxTraceResult`: hashable (kernel identity + specialisation key), so JAX
reuses jaxprs and lowerings of equal calls.

* Abstract evaluation (:func:`nki_call_eval`) traces the kernel once per specialisation through
  ``FrameworkKernel.dump_config`` (the kernel's own cache) and returns ``ShapedArray``s of the
  output types; the :class:`~..encode.DumpedConfig` stays in the ``JaxTraceResult``.
* Lowering (:mod:`.jax_lowering`): on the neuron platform (and any platform without its own
  rule) a ``stablehlo.custom_call @AwsNeuronCustomNativeKernel`` carrying the backend_config; on
  cpu/cuda/rocm/tpu a host callback that runs the kernel in the simulator.
* Eager calls (no ``jax.jit``) run the simulator directly.
* ``vmap``: a batching rule maps the kernel over the batch (``lax.map``, one call per element).
* ``grad``: a kernel has no derivative of its own; :func:`with_vjp` attaches a backward function
  (``jax.custom_vjp``); differentiating a bare kernel call raises ``wb_jax_no_derivative``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching

from .. import dtypes as D
from ..dispatch import GenericKernel, register_mode
from ..encode import (
    CACHE_SIZE,
    DeclTensor,
    DumpedConfig,
    FrameworkKernel,
    _freeze,
    resolve_platform_target,
)
from ..errors import NkiError
from ..trace.kernel import flatten_args, is_tensor_like

__all__ = ["JAXKernel", "JaxTraceResult", "nki_call_p", "nki_call_eval", "nki_call",
           "with_vjp", "JAX_TO_NKI_DTYPES", "TRACE_COUNTER"]

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
class _Leaf:
    """Stands for the ``index``-th tensor operand inside a call's bound arguments."""

    index: int


def _map_leaves(v, is_leaf, fn):
    """``v`` with every leaf (``is_leaf``) replaced by ``fn(leaf)``, walking like flatten_args."""
    if is_leaf(v):
        return fn(v)
    if isinstance(v, dict):
        return type(v)((k, _map_leaves(x, is_leaf, fn)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        items = [_map_leaves(x, is_leaf, fn) for x in v]
        if isinstance(v, list):
            return items
        return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.replace(v, **{f.name: _map_leaves(getattr(v, f.name), is_leaf, fn)
                                         for f in dataclasses.fields(v) if f.init})
    return v


def _bound_with(bound: inspect.BoundArguments, is_leaf, fn) -> inspect.BoundArguments:
    args = {n: _map_leaves(v, is_leaf, fn) for n, v in bound.arguments.items()}
    return inspect.BoundArguments(bound.signature, args)


def _nki_dtype_name(dtype) -> str:
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


def _spec(shape, dtype) -> tuple:
    return tuple(int(s) for s in shape), _nki_dtype_name(dtype)


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
        bound = _bound_with(self.template, lambda v: isinstance(v, _Leaf),
                            lambda leaf: decls[leaf.index])
        dumped = self.kernel._dump(bound, cache=cache)
        if in_specs is None:
            self.dumped = dumped
        return dumped

    def out_specs(self, dumped: DumpedConfig | None = None) -> list:
        """``(shape, storage numpy dtype)`` per output."""
        dumped = dumped or self.dump()
        return [(tuple(s), D.storage_dtype(dt)) for s, dt in dumped.return_types]


def _dumped_in_specs(dumped: DumpedConfig) -> tuple:
    return tuple((tuple(d.shape), d.dtype) for d in dumped.traced.kernel.params)


# ----------------------------------------------------------------------------- the primitive
nki_call_p = Primitive("nki_call")
nki_call_p.multiple_results = True


def nki_call_eval(*avals, trace: JaxTraceResult):
    """Abstract evaluation: trace once (through ``dump_config``) and return the output types.

    Args:
        *avals: one abstract value per tensor operand.
        trace: the call's :class:`JaxTraceResult`.

    Returns:
        One ``ShapedArray`` per kernel output.
    """
    dumped = trace.dump()
    got = tuple(_spec(a.shape, a.dtype) for a in avals)
    if got != _dumped_in_specs(dumped):
        raise NkiError(None, f"kernel '{trace.name}' was traced for operands "
                       f"{_fmt_specs(_dumped_in_specs(dumped))} but is bound to "
                       f"{_fmt_specs(got)}")
    return [ShapedArray(s, dt) for s, dt in trace.out_specs(dumped)]


def _fmt_specs(specs) -> str:
    return ", ".join(f"{dt}{list(s)}" for s, dt in specs)


def run_on_host(dumped: DumpedConfig, arrays, params=None) -> list:
    """Simulate a dumped kernel on numpy operands; one array per output (storage dtypes).

    Runs the numpy interpreter (``backend="numpy"``: this is called from inside JAX host
    callbacks, where starting another JAX computation can deadlock), then the simulation hooks.
    """
    from ..runtime import SIM_HOOKS, _program
    traced = dumped.traced
    k = traced.kernel
    inputs = {d.name: np.asarray(a) for d, a in zip(k.params, arrays, strict=True)}
    outs = _program(traced).run(inputs, params, backend="numpy")
    for hook in SIM_HOOKS:
        hook(traced, inputs, params, outs, "numpy")
    return [np.asarray(outs[n], dtype=D.storage_dtype(D.from_name(k.decls()[n].dtype)))
            for n in k.outputs]


def _sim_params(trace: JaxTraceResult):
    return getattr(trace.kernel, "sim_params", None)


def _impl(*args, trace: JaxTraceResult):
    """Eager call (no jit): simulate on the host now."""
    dumped = trace.dump()
    outs = run_on_host(dumped, [np.asarray(a) for a in args], _sim_params(trace))
    return [jnp.asarray(o) for o in outs]


def _batch(args, dims, *, trace: JaxTraceResult):
    """vmap: one kernel call per batch element (``lax.map``), batch axis 0 on every output."""
    # why: JAX marks an unbatched operand with None (batching.not_mapped, not re-exported)
    batched = [i for i, d in enumerate(dims) if d is not None]
    moved = tuple(jnp.moveaxis(args[i], dims[i], 0) for i in batched)

    def one(xs):
        ops = list(args)
        for i, x in zip(batched, xs, strict=True):
            ops[i] = x
        return tuple(nki_call_p.bind(*ops, trace=trace))

    outs = lax.map(one, moved)
    return list(outs), [0] * len(outs)


def _no_derivative(primals, tangents, *, trace: JaxTraceResult):
    raise NkiError("wb_jax_no_derivative",
                   f"JAX cannot differentiate through NKI kernel '{trace.name}': a kernel has no "
                   "derivative of its own",
                   hint="attach a backward with nki_workbench.jax.with_vjp(kernel, bwd), or "
                        "stop the gradient with jax.lax.stop_gradient on its inputs")


nki_call_p.def_abstract_eval(nki_call_eval)
nki_call_p.def_impl(_impl)
batching.primitive_batchers[nki_call_p] = _batch
ad.primitive_jvps[nki_call_p] = _no_derivative


# ----------------------------------------------------------------------------- the kernel class
def _is_jax_tensor(t) -> bool:
    return isinstance(t, (jax.Array, jax.core.Tracer))


class JAXKernel(FrameworkKernel):
    """An NKI kernel called from JAX (``nki.jit(mode="jax")``): one ``nki_call`` per call.

    Tensor arguments are jax arrays, tracers (inside ``jax.jit``/``vmap``/``scan``) or numpy
    arrays; everything else is a compile-time constant. Returns jax arrays in the kernel's
    convention (one array, or a tuple/list); a legacy kernel (writes output arguments, returns
    nothing) returns the written outputs, since jax arrays cannot be updated in place.

    Args:
        func: the kernel function.
        func_name: name in the config (default ``func.__name__``).
        grid: SPMD launch grid.
        enable_cache: keep traces per specialisation.
        sim_params: :class:`~nki_workbench.SimParams` of the simulator runs on cpu/gpu (not a
            compile option: it is not part of the config).
        **kwargs: compile options (``platform_target``, ``additional_compile_opt``, ...).
    """

    def __init__(self, func, func_name=None, grid=None, enable_cache=True, sim_params=None,
                 **kwargs):
        super().__init__(func, func_name, grid, enable_cache, **kwargs)
        self.sim_params = sim_params

    def is_framework_tensor(self, t) -> bool:
        """Whether ``t`` is a JAX array (``jax.Array``, ``ArrayImpl``) or tracer."""
        return _is_jax_tensor(t)

    def map_framework_tensor(self, t) -> tuple:
        """``(shape, dtype)`` of a jax array or tracer."""
        return tuple(t.shape), t.dtype

    def translate_to_neuron_dtype(self, dtype):
        """The NKI dtype name of a jax dtype (:data:`JAX_TO_NKI_DTYPES`)."""
        return _nki_dtype_name(dtype)

    def _dump(self, bound: inspect.BoundArguments, *, cache: bool = True) -> DumpedConfig:
        """``dump_config_with_boundargs``, counting real traces; ``cache=False`` forces one."""
        from ..trace.kernel import TRACE_HOOKS
        traced = []
        TRACE_HOOKS.append(traced.append)
        saved = self.enable_cache
        self.enable_cache = saved and cache
        try:
            return self.dump_config_with_boundargs(bound)
        finally:
            self.enable_cache = saved
            TRACE_HOOKS.remove(traced.append)
            TRACE_COUNTER["traces"] += len(traced)

    def trace_result(self, args, kwargs) -> tuple[JaxTraceResult, list]:
        """The :class:`JaxTraceResult` of a call and its tensor operands (not traced yet)."""
        _, leaves = flatten_args(self.func, args, kwargs, hook=self.is_framework_tensor)
        bound = inspect.signature(self.func).bind(*args, **kwargs)
        bound.apply_defaults()
        index = iter(range(len(leaves)))
        template = _bound_with(bound, lambda v: is_tensor_like(v, self.is_framework_tensor),
                               lambda v: _Leaf(next(index)))
        # why: specs from the arguments as given (jnp.asarray would turn float64 into float32)
        specs = tuple(_spec(v.shape, v.dtype) for _, v in leaves)
        operands = [v if _is_jax_tensor(v) else jnp.asarray(v) for _, v in leaves]
        target = resolve_platform_target(self.opts.platform_target, warn=False)
        key = (tuple((n, _freeze(v)) for n, v in template.arguments.items()), specs, target)
        # why: JAX caches abstract evaluation per (equal) params, so an equal but new instance
        # might never be filled; one instance per specialisation keeps the filled one in use
        results = self.__dict__.setdefault("_trace_results", OrderedDict())
        trace = results.get(key)
        if trace is None:
            trace = results[key] = JaxTraceResult(self, template, specs, key)
            while len(results) > CACHE_SIZE:
                results.popitem(last=False)
        else:
            results.move_to_end(key)
        return trace, operands

    def __call__(self, *args, **kwargs):
        try:
            inspect.signature(self.func).bind(*args, **kwargs)
        except TypeError as exc:
            raise NkiError(None, f"cannot call kernel '{self.func_name}': {exc}") from None
        trace, operands = self.trace_result(args, kwargs)
        outs = nki_call_p.bind(*operands, trace=trace)
        dumped = trace.dump()
        if not dumped.kernel_return:
            return outs[0] if len(outs) == 1 else tuple(outs)
        if not dumped.result_is_sequence:
            return outs[0]
        return list(outs) if dumped.traced.returns == "list" else tuple(outs)


# ----------------------------------------------------------------------------- nki_call / vjp
_KERNELS: dict = {}  # (func, grid, opts) -> JAXKernel made by nki_call


def _kernel_of(kernel, grid, kwargs) -> JAXKernel:
    if isinstance(kernel, JAXKernel):
        return kernel
    opts = {}
    if isinstance(kernel, GenericKernel):
        func, grid = kernel.func, (kernel.grid if grid is None else grid)
        opts = dict(kernel.kwargs)
    elif callable(kernel):
        func = kernel
    else:
        raise TypeError(f"nki_call needs an NKI kernel (a function or @nki.jit kernel), got "
                        f"{kernel!r}")
    opts.update(kwargs)
    grid = tuple(grid or ())
    key = (func, grid, tuple(sorted(opts.items())))
    k = _KERNELS.get(key)
    if k is None:
        k = _KERNELS[key] = JAXKernel(func, grid=grid, **opts)
    return k


def _poison_like(sds):
    """An output buffer for a legacy kernel: NaN (floats) / the interpreter's int poison."""
    dt = np.dtype(sds.dtype)
    if dt.kind == "b":
        fill = False
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        fill = info.min if info.min < 0 else info.max
    else:
        fill = np.nan
    return jnp.full(sds.shape, fill, dtype=dt)


def nki_call(kernel, *args, grid=None, out_shape=None, compile_opts=None, **kwargs):
    """Call an NKI kernel from JAX (``jax_neuronx.nki_call``'s signature).

    Args:
        kernel: a kernel function or ``@nki.jit`` kernel.
        *args: jax/numpy arrays for tensors, Python values for constants.
        grid: SPMD launch grid (default: the kernel's).
        out_shape: legacy kernels (outputs passed as trailing arguments): a
            ``jax.ShapeDtypeStruct`` or a tuple of them; each becomes an output buffer appended
            to ``args`` (filled with NaN / integer poison, so unwritten elements show).
        compile_opts: dict of compile options (``platform_target``...).
        **kwargs: keyword arguments of the kernel.

    Returns:
        The kernel's outputs as jax arrays (one, or a tuple).
    """
    k = _kernel_of(kernel, grid, dict(compile_opts or {}))
    if out_shape is not None:
        shapes = out_shape if isinstance(out_shape, (tuple, list)) else (out_shape,)
        args = args + tuple(_poison_like(s) for s in shapes)
    return k(*args, **kwargs)


def with_vjp(kernel, bwd):
    """Make a kernel differentiable by attaching a backward function (``jax.custom_vjp``).

    Example:
        >>> def mul_bwd(args, out, g):     # args: the call's arguments, out: its result
        ...     a, b = args
        ...     return (g * b, g * a)      # one cotangent per argument (None for constants)
        >>> mul = with_vjp(nki.jit(mul_kernel, mode="jax"), mul_bwd)
        >>> jax.grad(lambda a, b: mul(a, b).sum())(a, b)

    ``bwd`` may call other NKI kernels (the backward kernels) as well as jnp. Arguments that are
    not arrays are compile-time constants and get no cotangent. Keyword arguments are not
    supported (pass everything positionally). Forward-mode (``jvp``) is not available, as with
    any ``jax.custom_vjp`` function.

    Args:
        kernel: a :class:`JAXKernel`, an ``@nki.jit`` kernel or a plain kernel function (the
            latter two are called through :func:`nki_call` unless their mode is ``"jax"``).
        bwd: ``bwd(args: tuple, out, g) -> tuple`` of one cotangent per argument.

    Returns:
        A function with the kernel's calling convention, differentiable with ``jax.grad``.
    """
    direct = isinstance(kernel, JAXKernel) or (isinstance(kernel, GenericKernel)
                                                and kernel.mode == "jax")
    call = kernel if direct else functools.partial(nki_call, kernel)

    @functools.cache
    def build(static: tuple, n: int):
        def fwd_only(*args):
            return call(*args)

        f = jax.custom_vjp(fwd_only, nondiff_argnums=static)

        def fwd(*args):
            out = call(*args)
            return out, (tuple(None if i in static else a for i, a in enumerate(args)), out)

        def back(*rest):
            consts, (res_args, out), g = rest[:len(static)], rest[-2], rest[-1]
            full = list(res_args)
            for i, c in zip(static, consts, strict=True):
                full[i] = c
            cts = tuple(bwd(tuple(full), out, g))
            if len(cts) != n:
                raise NkiError(None, f"the backward function returned {len(cts)} cotangents "
                               f"for a call with {n} arguments")
            return tuple(ct for i, ct in enumerate(cts) if i not in static)

        f.defvjp(fwd, back)
        return f

    @functools.wraps(getattr(kernel, "func", kernel))
    def wrapped(*args):
        static = tuple(i for i, a in enumerate(args)
                       if not (_is_jax_tensor(a) or isinstance(a, np.ndarray)))
        return build(static, len(args))(*args)

    return wrapped


register_mode("jax", JAXKernel)
from . import jax_lowering  # noqa: E402,F401  (registers the lowerings and Inspection hook)
