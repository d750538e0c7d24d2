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
* cpu, cuda, rocm, tpu — ``jax.pure_callback`` into the simulator (numpy interpreter). The
  callback copies operands to the host and results back; it cannot be serialised by
  ``jax.export`` (export for ``neuron`` only).

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
from .jax_primitive import (
    TRACE_COUNTER,
    JaxTraceResult,
    dumped_in_specs,
    nki_call_p,
    operand_spec,
    run_on_host,
    sim_params_of,
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


def lowering_config(ctx, trace: JaxTraceResult) -> DumpedConfig:
    """The config a lowering emits: the stored trace, or a fresh one under the env variable.

    Raises:
        StaleTraceError: the stored trace describes other operand or result types.
    """
    in_specs = tuple(operand_spec(a.shape, a.dtype) for a in ctx.avals_in)
    if _dont_cache() and trace.kernel is not None:
        TRACE_COUNTER["lowering_retraces"] += 1
        dumped = trace.dump(in_specs, cache=False)
    else:
        # why: an instance JAX found equal to an evaluated one may not have been evaluated
        dumped = trace.dumped if trace.dumped is not None else trace.dump()
    if dumped_in_specs(dumped) != in_specs:
        raise StaleTraceError()
    outs = tuple(operand_spec(s, dt) for s, dt in trace.out_specs(dumped))
    if outs != tuple(operand_spec(a.shape, a.dtype) for a in ctx.avals_out):
        raise StaleTraceError()
    return dumped


def _op_location():
    # why: XLA reads op_type from a NameLoc ending in ':' and op_name from the outer name
    return ir.Location.name(OP_NAME, childLoc=ir.Location.fused(
        [ir.Location.name(OP_NAME + ":"), ir.Location.current]))


def _neuron_rule(ctx, *args, trace: JaxTraceResult):
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


def _host_callback(dumped: DumpedConfig, params, *arrays):
    return run_on_host(dumped, arrays, params)


def _host_rule(ctx, *args, trace: JaxTraceResult):
    dumped = lowering_config(ctx, trace)
    shapes = [jax.ShapeDtypeStruct(s, dt) for s, dt in trace.out_specs(dumped)]
    callback = functools.partial(_host_callback, dumped, sim_params_of(trace))

    def body(*xs):
        return jax.pure_callback(callback, shapes, *xs, vmap_method="sequential")

    return mlir.lower_fun(body, multiple_results=True)(ctx, *args)


mlir.register_lowering(nki_call_p, _neuron_rule)
for _platform in SIMULATOR_PLATFORMS:
    mlir.register_lowering(nki_call_p, _host_rule, platform=_platform)


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
    return lower_for_neuron(lambda *ops: nki_call_p.bind(*ops, trace=trace), *specs)

