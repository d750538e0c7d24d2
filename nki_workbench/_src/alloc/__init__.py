"""The memory model: allocation specs, decorators, liveness, allocators and occupancy.

Direct allocation specs, kernel decorators/directives, static liveness, the SBUF/PSUM allocators
and the occupancy data the workbench draws.

Entry points: :func:`occupancy` (``.sbuf`` / ``.psum`` of a traced kernel),
:func:`allocate` (placement records), :func:`allocate_pending_tensors` (run by the tracer at the
end of every trace), :func:`kernel_fields` (decorator flags of a kernel object or function).
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
from .spec import DirectBuffer, DirectSpec, PSUMAllocation, SBUFAllocation, resolve_alloc

__all__ = ["Allocation", "AllocationOverlapWarning", "AllocationResult", "allocate",
           "allocate_pending_tensors", "Directive", "allocation_scope", "copy_kernel",
           "enable_stack_allocator", "force_auto_alloc", "kernel_fields", "multi_buffer",
           "no_reorder", "replace_fields", "skip_middle_end_transformations", "update_allocator",
           "update_compile_opts", "Liveness", "TensorLife", "liveness", "BufferOccupancy",
           "Occupancy", "occupancy", "DirectBuffer", "DirectSpec", "PSUMAllocation",
           "SBUFAllocation", "resolve_alloc", "begin_trace", "kernel_attrs"]


def _register_inspection_slots():
    """``Inspection.memory`` / ``.sbuf`` / ``.psum`` (computed on first access)."""
    try:
        from .. import inspection
    except ImportError:  # why: the inspection layer is optional for the memory model
        return
    inspection.register_slot("memory", _memory_with_times)
    inspection.register_slot("sbuf", lambda insp: insp.memory.sbuf)
    inspection.register_slot("psum", lambda insp: insp.memory.psum)
    inspection.register_summary_line(_summary_line)


def _memory_with_times(insp):
    """Occupancy whose live ranges also carry ns, from the Inspection's timeline."""
    import dataclasses

    from ..ir import walk_insts
    occ = occupancy(insp.kernel)
    try:
        tl = insp.timeline
    except ImportError:  # why: a build without the time model keeps instruction-order ranges
        return occ
    if tl is None:
        return occ
    pos = {id(inst): p for p, inst in enumerate(walk_insts(insp.kernel.body))}
    times: dict = {}
    for ev in tl.events:
        p = pos.get(id(ev.inst))
        if p is not None:
            s, e = times.get(p, (ev.start_ns, ev.end_ns))
            times[p] = (min(s, ev.start_ns), max(e, ev.end_ns))
    return dataclasses.replace(occ, sbuf=occ.sbuf.with_times(times),
                               psum=occ.psum.with_times(times))


def _summary_line(insp) -> str:
    mem = insp.memory
    return (f"memory: SBUF peak {mem.sbuf.peak_bytes_per_partition} / "
            f"{mem.sbuf.capacity_bytes} B per partition ({mem.sbuf.strategy}), PSUM peak "
            f"{mem.psum.peak_bytes_per_partition} / {mem.psum.capacity_bytes} B "
            f"({mem.psum.strategy})")


_register_inspection_slots()
