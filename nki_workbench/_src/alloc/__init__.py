"""The memory model: allocation specs, decorators, liveness, allocators and occupancy.

Direct allocation specs, kernel decorators/directives, static liveness, the SBUF/PSUM allocators
and the occupancy data the workbench draws.

Entry points: :func:`occupancy` (``.sbuf`` / ``.psum`` of a traced kernel),
:func:`allocate` (placement records), :func:`allocate_pending_tensors` (the allocation
pass, run after every trace by :func:`trace_kernel`), :func:`kernel_fields` (decorator flags
of a kernel object or function).
"""

from .allocator import (
    Allocation,
    AllocationOverlapWarning,
    AllocationResult,
    allocate,
    allocate_pending_tensors,
)
from .kernel_opts import (
    Directive,
    allocation_scope,
    begin_trace,
    copy_kernel,
    enable_stack_allocator,
    force_auto_alloc,
    kernel_attrs,
    kernel_fields,
    multi_buffer,
    no_reorder,
    replace_fields,
    skip_middle_end_transformations,
    update_allocator,
    update_compile_opts,
)
from .liveness import Liveness, TensorLife, liveness
from .occupancy import BufferOccupancy, Occupancy, occupancy
from .passes import trace_kernel
from .spec import DirectBuffer, DirectSpec, PSUMAllocation, SBUFAllocation, resolve_alloc

__all__ = ["Allocation", "AllocationOverlapWarning", "AllocationResult", "allocate",
           "allocate_pending_tensors", "Directive", "allocation_scope", "copy_kernel",
           "enable_stack_allocator", "force_auto_alloc", "kernel_fields", "multi_buffer",
           "no_reorder", "replace_fields", "skip_middle_end_transformations", "update_allocator",
           "update_compile_opts", "Liveness", "TensorLife", "liveness", "BufferOccupancy",
           "Occupancy", "occupancy", "DirectBuffer", "DirectSpec", "PSUMAllocation",
           "SBUFAllocation", "resolve_alloc", "begin_trace", "kernel_attrs", "trace_kernel"]
