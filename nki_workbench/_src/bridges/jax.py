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
  cpu/cuda/rocm/tpu the compiled simulator inline (the kernel's IR as JAX operations in the
  caller's program), or a host callback into the interpreter for kernels it cannot compile.
* Eager calls (no ``jax.jit``) run the simulator (interpreter) directly.
* ``vmap``: a batching rule adds a batch level to the call (its ``batch`` parameter); the cpu
  lowering runs the compiled program under ``jax.vmap`` (one batched computation), the neuron
  lowering loops over the batch (one custom call per element).
* ``grad``: a kernel has no derivative of its own; :func:`with_vjp` attaches a backward function
  (``jax.custom_vjp``); differentiating a bare kernel call raises ``wb_jax_no_derivative``.
"""

from __future__ import annotations

import functools
import inspect
from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np

from ..caching import LRU
from ..dispatch import GenericKernel, kernel_parts, register_mode
from ..encode import (
    CACHE_SIZE,
    DumpedConfig,
    FrameworkKernel,
    freeze_argument,
    resolve_platform_target,
)
from ..errors import NkiError
from ..trace.kernel import flatten_args, is_tensor_like
from .jax_lowering import custom_call_text
from .jax_primitive import (
    JAX_TO_NKI_DTYPES,
    TRACE_COUNTER,
    JaxTraceResult,
    Leaf,
    bound_with,
    nki_call_eval,
    nki_call_p,
    nki_dtype_name,
    operand_spec,
    run_on_host,
)

__all__ = ["JAXKernel", "JaxTraceResult", "nki_call_p", "nki_call_eval", "nki_call",
           "with_vjp", "JAX_TO_NKI_DTYPES", "TRACE_COUNTER", "custom_call_text", "run_on_host"]


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
        return nki_dtype_name(dtype)

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
        template = bound_with(bound, lambda v: is_tensor_like(v, self.is_framework_tensor),
                               lambda v: Leaf(next(index)))
        # why: specs from the arguments as given (jnp.asarray would turn float64 into float32)
        specs = tuple(operand_spec(v.shape, v.dtype) for _, v in leaves)
        operands = [v if _is_jax_tensor(v) else jnp.asarray(v) for _, v in leaves]
        target = resolve_platform_target(self.opts.platform_target, warn=False)
        key = (tuple((n, freeze_argument(v)) for n, v in template.arguments.items()), specs, target)
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
        outs = nki_call_p.bind(*operands, trace=trace, batch=())
        dumped = trace.dump()
        if not dumped.kernel_return:
            return outs[0] if len(outs) == 1 else tuple(outs)
        if not dumped.result_is_sequence:
            return outs[0]
        return list(outs) if dumped.traced.returns == "list" else tuple(outs)


# ----------------------------------------------------------------------------- nki_call / vjp
_KERNELS = LRU()  # (func, grid, opts) -> JAXKernel made by nki_call (bounded)


def _kernel_of(kernel, grid, kwargs) -> JAXKernel:
    if isinstance(kernel, JAXKernel):
        return kernel
    try:
        parts = kernel_parts(kernel)
    except TypeError:
        raise TypeError(f"nki_call needs an NKI kernel (a function or @nki.jit kernel), got "
                        f"{kernel!r}") from None
    func, opts = parts.func, dict(parts.options)
    opts.update(kwargs)
    grid = tuple((parts.grid if grid is None else grid) or ())
    key = (func, grid, tuple(sorted(opts.items())))
    k = _KERNELS.lookup(key)
    if k is None:
        k = _KERNELS.store(key, JAXKernel(func, grid=grid, **opts))
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
