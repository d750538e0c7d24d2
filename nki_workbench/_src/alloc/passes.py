"""Tracing followed by its passes: the one way the workbench turns a kernel call into IR.

:func:`trace_kernel` runs the tracer (``trace.kernel.trace_function``) with the allocation
surface's decorator fields, then the allocation pass (kernel-level rules and SBUF/PSUM
placement; errors raise), then (with ``NKI_WORKBENCH_VALIDATE_IR=1``) the IR validator,
then the trace hooks. The tracer itself knows nothing of allocation.
"""

from __future__ import annotations

from ..ir.validate import validate, validate_traces_enabled
from ..trace.kernel import TRACE_HOOKS, Traced, definition_location, trace_function
from .allocator import allocate_pending_tensors
from .kernel_opts import begin_trace, kernel_attrs
from .rules import end_of_trace_rules

__all__ = ["trace_kernel"]


def _end_trace(ctx) -> dict:
    # why: the allocated-kernel rules need to know which tensors are instruction results,
    # which only the trace context records
    end_of_trace_rules(ctx)
    return kernel_attrs(ctx)


def trace_kernel(func, args=(), kwargs=None, *, grid=(), target=None, hook=None,
                 mapper=None) -> Traced:
    """Trace ``func(*args, **kwargs)`` into IR and run the allocation pass on it.

    Args:
        func: the kernel's Python function.
        args: positional arguments (arrays/placeholders for tensors, constants otherwise).
        kwargs: keyword arguments.
        grid: SPMD launch grid.
        target: ``"trn1"`` (default), ``"trn2"``...
        hook: optional predicate recognising framework tensors.
        mapper: optional function mapping a framework tensor to ``(shape, dtype)``.

    Returns:
        Traced
    """
    traced = trace_function(func, args, kwargs, grid=grid, target=target, hook=hook,
                            mapper=mapper, begin=begin_trace, end=_end_trace)
    allocate_pending_tensors(traced.kernel, definition_location(func))
    if validate_traces_enabled():  # debug switch: NKI_WORKBENCH_VALIDATE_IR=1
        validate(traced.kernel)
    for hook_fn in TRACE_HOOKS:
        hook_fn(traced)
    return traced
