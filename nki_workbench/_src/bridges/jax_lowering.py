"""Lowerings of the ``nki_call`` primitive, the stale-trace check, and lowering helpers.

Platform choice happens at lowering time (so AOT lowering and ``jax.export`` can target a
platform other than the host):

* default rule — every platform without a rule of its own, ``neuron`` included (an unknown
  platform name on a machine without the Neuron plugin): ``stablehlo.custom_call
  @AwsNeuronCustomNativeKernel`` with ``backend_config`` = the base64 config,
  ``output_operand_aliases`` from ``dump_config``, ``mhlo.frontend_attributes = {kernel_name}``
  and the location ``xla___op_NkiKernelCallImpl`` (HLO metadata ``op_type`` and the tail of
  ``op_name``). Compiling such a module on CPU fails with XLA's ``NOT_FOUND`` (no
  implementation for the target): it is meant for Neuron.
* cpu, cuda, rocm, tpu — the compiled simulator inline (:mod:`..sim.jax_inline`): the
  kernel's IR lowered to JAX operations inside the caller's program, the way Pallas lowers
  ``interpret=True`` kernels; under ``vmap`` one batched computation. A kernel whose program
  may need a diagnostic carries a ``lax.cond`` that runs the host interpreter when its check
  flag is set. Kernels the compiled program cannot run (an opcode without a JAX rule,
  ``shuffle_affine``, ...) or whose ``sim_params`` say ``backend="numpy"`` get a
  ``jax.pure_callback`` into the numpy interpreter instead (host runs serialised by a lock);
  a callback cannot be serialised by ``jax.export`` (export for ``neuron`` only).

A lowering uses the trace that abstract evaluation stored in the :class:`JaxTraceResult`; with
``NKI_DONT_CACHE_TRACE_FOR_JAX_LOWERING=TRUE`` it re-traces the kernel from the lowering's
operand types instead (bypassing the kernel's cache). A stored trace that does not describe
the equation being lowered (other operand or result types) raises
:class:`StaleTraceError` with NKI's message.
"""

from __future__ import annotations

import functools
import os

import jax
from jax.extend.mlir import ir
from jax.interpreters import mlir

from ..encode import DumpedConfig
from ..errors import NkiError
from ..semantics import Unsupported
from ..sim.jax_inline import inline_function
from .jax_primitive import (
    TRACE_COUNTER,
    JaxTraceResult,
    dumped_in_specs,
    element_specs,
    nki_call_p,
    operand_spec,
    run_batched_on_host,
    sim_params_of,
    unbatched_map,
)

__all__ = ["TARGET", "OP_NAME", "DONT_CACHE_ENV", "STALE_TRACE_MESSAGE", "StaleTraceError",
           "SIMULATOR_PLATFORMS", "lowering_config", "lower_for_neuron", "export_for_neuron",
           "custom_call_text"]

TARGET = "AwsNeuronCustomNativeKernel"
OP_NAME = "xla___op_NkiKernelCallImpl"
DONT_CACHE_ENV = "NKI_DONT_CACHE_TRACE_FOR_JAX_LOWERING"
STALE_TRACE_MESSAGE = ("NKI trace is not properly cached, use export "
                       "NKI_DONT_CACHE_TRACE_FOR_JAX_LOWERING=TRUE to workaround the issue.")
SIMULATOR_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
"""Platforms whose lowering runs the kernel in the simulator (all others get the custom call)."""


class StaleTraceError(NkiError):
    """The trace stored for a kernel call does not match the call being lowered."""

    def __init__(self):
        super().__init__(None, STALE_TRACE_MESSAGE)


def _dont_cache() -> bool:
    return os.environ.get(DONT_CACHE_ENV, "").strip().upper() in ("TRUE", "1")


def lowering_config(ctx, trace: JaxTraceResult, batch: tuple = ()) -> DumpedConfig:
    """The config a lowering emits: the stored trace, or a fresh one under the env variable.

    Raises:
        StaleTraceError: the stored trace describes other operand or result types.
    """
    in_specs = element_specs(ctx.avals_in, batch)
    if _dont_cache() and trace.kernel is not None:
        TRACE_COUNTER["lowering_retraces"] += 1
        dumped = trace.dump(in_specs, cache=False)
    else:
        # why: an instance JAX found equal to an evaluated one may not have been evaluated
        dumped = trace.dumped if trace.dumped is not None else trace.dump()
    if dumped_in_specs(dumped) != in_specs:
        raise StaleTraceError()
    outs = tuple(operand_spec(s, dt) for s, dt in trace.out_specs(dumped))
    if outs != tuple(operand_spec(a.shape[len(batch):], a.dtype) for a in ctx.avals_out):
        raise StaleTraceError()
    return dumped


def _op_location():
    # why: XLA reads op_type from a NameLoc ending in ':' and op_name from the outer name
    return ir.Location.name(OP_NAME, childLoc=ir.Location.fused(
        [ir.Location.name(OP_NAME + ":"), ir.Location.current]))


def _neuron_rule(ctx, *args, trace: JaxTraceResult, batch: tuple = ()):
    if batch:  # why: the device runs one kernel call at a time: a loop of custom calls
        def body(*xs):
            return unbatched_map(lambda *ops: nki_call_p.bind(*ops, trace=trace, batch=()),
                                 xs, batch)
        return mlir.lower_fun(body, multiple_results=True)(ctx, *args)
    dumped = lowering_config(ctx, trace)
    rule = jax.ffi.ffi_lowering(
        TARGET, backend_config=dumped.backend_config, api_version=2,
        operand_output_aliases=dict(dumped.operand_output_aliases) or None,
        has_side_effect=bool(dumped.has_collectives), skip_ffi_layout_processing=True)
    with _op_location():
        results = rule(ctx, *args)
    op = results[0].owner
    attrs = {"kernel_name": ir.StringAttr.get(dumped.config["func_name"])}
    if "mhlo.frontend_attributes" in op.attributes:  # keep attributes set by jax.attributes
        old = ir.DictAttr(op.attributes["mhlo.frontend_attributes"])
        attrs = {**{old[i].name: old[i].attr for i in range(len(old))}, **attrs}
    op.attributes["mhlo.frontend_attributes"] = ir.DictAttr.get(attrs)
    return results


def _host_call(dumped: DumpedConfig, trace: JaxTraceResult, batch: tuple, xs):
    """The interpreter on the host for the whole batch: one ``pure_callback``."""
    lead = tuple(size for size, _ in batch)
    shapes = [jax.ShapeDtypeStruct(lead + tuple(s), dt) for s, dt in trace.out_specs(dumped)]
    callback = functools.partial(run_batched_on_host, dumped, params=sim_params_of(trace),
                                 batch=batch)
    return jax.pure_callback(lambda *a: callback(a), shapes, *xs, vmap_method="sequential")


def _host_rule(ctx, *args, trace: JaxTraceResult, batch: tuple = ()):
    dumped = lowering_config(ctx, trace, batch)

    def body(*xs):
        return _host_call(dumped, trace, batch, xs)

    return mlir.lower_fun(body, multiple_results=True)(ctx, *args)


def inline_body(dumped: DumpedConfig, trace: JaxTraceResult, batch: tuple):
    """The compiled simulator as a function of the call's operands, or ``None``.

    ``None`` when the kernel runs only in the interpreter (an opcode without a JAX rule, a run
    mode the compiled program does not have, or ``SimParams(backend="numpy")`` on the kernel).
    A kernel whose program may need a diagnostic gets a ``lax.cond``: when its check flag is
    set, the host interpreter runs the call instead and reports exactly what it finds.
    """
    params = sim_params_of(trace)
    if params is not None and params.backend == "numpy":
        return None
    fn = inline_function(dumped.traced.kernel, params)
    if isinstance(fn, str):
        return None

    shapes = dumped.traced.kernel.result_shapes()

    def body(*xs):
        import jax.numpy as jnp
        from jax import lax
        state = {}

        def element(*ops):
            prog = fn(*ops)
            state["clean"] = prog.clean
            # why: a returned reshape view of an output reaches the caller in its own shape
            return tuple(o.reshape(s) for o, s in zip(prog.outs, shapes, strict=True)), prog.flag

        run = element
        for _, flags in reversed(batch):
            run = jax.vmap(run, in_axes=tuple(0 if f else None for f in flags))
        outs, flag = run(*xs)
        if state["clean"]:
            return list(outs)
        return list(lax.cond(jnp.any(flag), lambda: tuple(_host_call(dumped, trace, batch, xs)),
                             lambda: tuple(outs)))

    return body


def _sim_rule(ctx, *args, trace: JaxTraceResult, batch: tuple = ()):
    dumped = lowering_config(ctx, trace, batch)
    body = inline_body(dumped, trace, batch)
    if body is not None:
        try:
            return mlir.lower_fun(body, multiple_results=True)(ctx, *args)
        except Unsupported:
            pass  # why: met while tracing, before anything was emitted: the host fallback
    return _host_rule(ctx, *args, trace=trace, batch=batch)


mlir.register_lowering(nki_call_p, _neuron_rule)
for _platform in SIMULATOR_PLATFORMS:
    mlir.register_lowering(nki_call_p, _sim_rule, platform=_platform)


# ----------------------------------------------------------------------------- helpers
def lower_for_neuron(fn, *args, **kwargs) -> str:
    """StableHLO text of ``jax.jit(fn)`` lowered for the neuron platform (works without one).

    Args:
        fn: a function of jax arrays that calls NKI kernels.
        *args: arrays or ``jax.ShapeDtypeStruct``s.
        **kwargs: keyword arguments of ``fn``.

    Returns:
        The module text (``custom_call @AwsNeuronCustomNativeKernel`` per kernel call).
    """
    traced = jax.jit(fn).trace(*args, **kwargs)
    return traced.lower(lowering_platforms=("neuron",)).as_text()


def export_for_neuron(fn, *args, **kwargs):
    """``jax.export`` of ``jax.jit(fn)`` for the neuron platform.

    The custom-call target has no JAX compatibility guarantee, so its safety check is disabled
    for this target only. ``.mlir_module()`` gives the text; ``.serialize()`` needs the
    ``flatbuffers`` package.

    Returns:
        jax.export.Exported
    """
    from jax import export
    checks = [export.DisabledSafetyCheck.custom_call(TARGET)]
    return export.export(jax.jit(fn), platforms=["neuron"], disabled_checks=checks)(
        *args, **kwargs)


def custom_call_text(inspection) -> str:
    """``Inspection.custom_call("jax")``: the neuron lowering of a one-kernel program."""
    from .. import dtypes as D
    trace = JaxTraceResult.from_dumped(inspection.dumped)
    specs = [jax.ShapeDtypeStruct(s, D.storage_dtype(dt)) for s, dt in trace.in_specs]
    return lower_for_neuron(lambda *ops: nki_call_p.bind(*ops, trace=trace, batch=()), *specs)

