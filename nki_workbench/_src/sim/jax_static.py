"""What the compiled backend settles before tracing a kernel.

Outputs proven written whole, inputs adopted without a copy, and whether the kernel compiles.

Both only remove work from the compiled program; neither changes a result or a diagnostic
(see :mod:`.jax_exec`).
"""

from __future__ import annotations

import weakref

import numpy as np

from .. import dtypes as D
from ..errors import NkiError
from ..ir import Alloc, Inst, Kernel, Loop, walk_insts, walk_stmts
from ..options import SimParams
from .analysis import (
    COVERAGE_BUDGET,
    fully_written_outputs,
    overlapping_writes,
    read_and_written,
    shared_overlaps,
)
from .races import view_writes
from .specials import SPECIAL

__all__ = ["fully_written_outputs", "window", "checked_inputs", "param_specs", "COVERAGE_BUDGET",
           "subnormal_input",
           "ZERO_COPY_ALIGN", "ZERO_COPY_MIN", "tracked", "why_interpreted", "emitted",
           "DEFAULT_UNROLL_BUDGET"]

DEFAULT_UNROLL_BUDGET = 64
"""``jax_lower.UNROLL_BUDGET``'s value, here for estimates that must not import jax."""


# ----------------------------------------------------------------------------- run modes
def why_interpreted(kernel: Kernel, params: SimParams) -> str | None:
    """Why this kernel/params pair runs in the interpreter (``None``: it compiles)."""
    from ..semantics import VALUE_RULES
    from ..semantics.registry import COMPILED_SPECIAL, INTERPRETER_ONLY, LOWERED_SPECIAL
    from .jax_dma import dma_copy_dynamic
    decls = kernel.decls()
    if params.shuffle_affine:
        return "SimParams(shuffle_affine=True)"
    if params.detect_races:
        racy = shared_overlaps(kernel)
        if racy:
            return (f"race tracking across SPMD programs (writes to {sorted(racy)} are not "
                    "proven disjoint)")
        viewed = view_writes(kernel)
        if viewed:
            return f"race tracking through views (writes to {viewed} inside nl.affine_range)"
    grid = int(np.prod(kernel.grid)) if kernel.grid else 1
    if any(isinstance(s, Loop) and s.kind == "dynamic" for s in walk_stmts(kernel.body)):
        return "a dynamic loop (its trip count is a register read at run time)"
    for inst in walk_insts(kernel.body):
        if inst.op == "all_reduce":
            if kernel.attr("has_collectives") and grid > 1:
                return "collective 'all_reduce' across programs"
        elif inst.op in INTERPRETER_ONLY:
            return f"opcode '{inst.op}' runs only in the interpreter: {INTERPRETER_ONLY[inst.op]}"
        elif inst.op in LOWERED_SPECIAL:
            why = dma_copy_dynamic(inst, decls) if inst.op == "dma_copy" else None
            if why:
                return why
        elif (inst.op in SPECIAL and inst.op not in COMPILED_SPECIAL) or \
                inst.op not in VALUE_RULES:
            return f"no JAX rule for opcode '{inst.op}'"
    return None


def tracked(kernel: Kernel) -> frozenset:
    """Tensors races stamp.

    An ``affine_range`` loop may carry values through them, or two of its iterations may write
    the same element of them (:func:`.analysis.overlapping_writes`).
    """
    decls = kernel.decls()
    out = set()

    def walk(body, declared):
        declared = set(declared)
        for s in body:
            if isinstance(s, Alloc):
                declared.add(s.decl.name)
            elif isinstance(s, Loop):
                if s.kind == "affine":
                    out.update(declared & read_and_written(s.body, decls))
                walk(s.body, declared)
    walk(kernel.body, {d.name for d in kernel.params})
    for names in overlapping_writes(kernel).values():
        out.update(names)
    return frozenset(out)


# ----------------------------------------------------------------------------- inputs
ZERO_COPY_ALIGN = 64
"""Byte alignment at which XLA's CPU client adopts a host buffer instead of copying it."""
ZERO_COPY_MIN = 1 << 16
"""Inputs smaller than this (bytes) are copied: a copy is cheaper than another program."""


class _Span:
    """A read-only array interface over ``n`` bytes at ``ptr`` (it owns nothing)."""

    def __init__(self, ptr, n):
        self.__array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, True),
                                    "version": 3}


_WINDOWS: dict = {}
"""id(array) -> (weak reference to it, its window, offset): a kernel called again with the
same arrays reuses their windows (measured: a fresh window costs XLA's call ~15 us more)."""


def window(arr: np.ndarray):
    """``(array, offset)``: ``arr`` as a view XLA can adopt without copying it.

    A C-contiguous array whose data starts ``k`` bytes past a :data:`ZERO_COPY_ALIGN` boundary
    is widened to start at that boundary (``offset`` = ``k`` in elements; the program slices
    it off). The widened bytes lie in the same memory page as the array's first byte (the
    alignment divides the page size), so they are mapped; they are never used.

    The widened view does not keep ``arr`` alive (so the cache of windows holds no array):
    use it only while ``arr`` is referenced.
    """
    key = id(arr)
    hit = _WINDOWS.get(key)
    # why: only an in-place resize moves an array's data, and it changes nbytes; reading the
    # pointer (__array_interface__) costs ~10 us of a sub-ms call
    if hit is not None and hit[0]() is arr and hit[3] == arr.nbytes:
        return (arr if hit[1] is None else hit[1]), hit[2]
    if arr.nbytes < ZERO_COPY_MIN or not arr.flags.c_contiguous:
        return arr, None
    ptr = arr.__array_interface__["data"][0]
    lead = ptr % ZERO_COPY_ALIGN
    if lead % arr.itemsize:
        return arr, None
    win, off = (arr, None) if lead == 0 else (
        np.asarray(_Span(ptr - lead, lead + arr.nbytes)).view(arr.dtype), lead // arr.itemsize)

    def forget(ref, key=key):
        if _WINDOWS.get(key, (None,))[0] is ref:
            del _WINDOWS[key]
    # why: an aligned array is its own window; the entry then holds it only weakly too
    _WINDOWS[key] = (weakref.ref(arr, forget), None if off is None else win, off, arr.nbytes)
    return win, off


def checked_inputs(kernel: Kernel, inputs: dict, specs: tuple | None = None) -> list:
    """The inputs in parameter order and storage dtype (the interpreter's checks and errors).

    ``specs``: :func:`param_specs` of ``kernel``, when the caller keeps it.
    """
    arrays = []
    for name, shape, st, dtype in specs or param_specs(kernel):
        if name not in inputs:
            raise NkiError(None, f"missing input for kernel parameter '{name}'")
        arr = np.asarray(inputs[name])
        if arr.shape != shape:
            raise NkiError(None, f"input '{name}' has shape {list(arr.shape)}, the trace "
                           f"expects {list(shape)}")
        # why: the program never writes its inputs, so a matching array needs no copy
        arrays.append(arr if arr.dtype == st and dtype != "tfloat32" else D.cast(arr, dtype))
    return arrays


# storage dtype -> (unsigned view, sign-clearing mask, largest subnormal magnitude pattern)
_MAGNITUDE_BITS = {np.dtype(np.float32): (np.uint32, 0x7FFFFFFF, 0x007FFFFF),
                   np.dtype(D.storage_dtype(D.from_name("bfloat16"))): (np.uint16, 0x7FFF, 0x007F)}
_SIGNED = {np.uint32: np.int32, np.uint16: np.int16}
_CHUNK = 1 << 16  # why: a chunk (and its temporaries) stays in cache for its second pass


def _has_subnormal(arr, kind, magnitude, largest) -> bool:
    """Whether ``arr`` holds a subnormal (integer tests on the bit patterns).

    why integers: no float comparison under a flush-to-zero mode can hide one. Per chunk, two
    reductions and no temporaries: the unsigned minimum is the smallest positive pattern
    (negatives have the sign bit: larger), the signed minimum the smallest negative magnitude
    (``INT_MIN + magnitude``); either within 1..largest is a subnormal. A zero of either sign
    hides the next larger pattern of its sign, so such a chunk takes the exact test: magnitude
    minus 1, wrapping (zero becomes the largest value, 1..largest the subnormals).
    """
    flat = np.ascontiguousarray(arr).reshape(-1).view(kind)
    signed = flat.view(_SIGNED[kind])
    low = int(np.iinfo(signed.dtype).min)
    scratch = None
    for i in range(0, flat.size, _CHUNK):
        c = flat[i:i + _CHUNK]
        pos = int(c.min())
        neg = int(signed[i:i + _CHUNK].min()) - low
        if 0 < pos <= largest or 0 < neg <= largest:
            return True
        if pos == 0 or neg == 0:
            if scratch is None:
                scratch = np.empty(min(_CHUNK, flat.size), kind)
            s = scratch[:c.size]
            np.bitwise_and(c, magnitude, out=s)
            np.subtract(s, 1, out=s)
            if s.min() < largest:
                return True
    return False


def subnormal_input(kernel: Kernel, arrays: list) -> str | None:
    """The first float32/bfloat16 input holding a subnormal value (``None``: none).

    XLA's CPU runtime treats subnormal operands as zero and flushes subnormal results (measured:
    ``1e-39 + 1e-39`` is 0 compiled, 2e-39 in numpy); the interpreter keeps them as numpy and
    NKI's own simulator do, so such inputs run in the interpreter. (float16 subnormals widen
    to normal float32 values: unaffected.) Every compiled call scans (0.1-0.2 ms per 4 MiB
    measured without zeros, about twice that where every chunk holds one): an input refilled
    in place must not reach XLA unseen.
    """
    for p, arr in zip(kernel.params, arrays, strict=True):
        bits = _MAGNITUDE_BITS.get(arr.dtype)
        if bits is not None and arr.size and _has_subnormal(arr, *bits):
            return p.name
    return None


def emitted(body, budget: int) -> int:
    """Instructions a lowered ``body`` emits.

    A loop of up to ``budget`` instructions, unrolled, counts every iteration; a longer one
    counts its body once (plus the loop).
    """
    n = 0
    for s in body:
        if isinstance(s, Inst):
            n += 1
        elif isinstance(s, Loop):
            inner = emitted(s.body, budget)
            unrolled = s.trip_count * inner
            n += unrolled if unrolled <= budget or s.trip_count == 1 else inner + 1
    return n


def param_specs(kernel: Kernel) -> tuple:
    """``(name, shape, storage dtype, NKI dtype)`` of each parameter, in order."""
    return tuple((p.name, tuple(p.shape), np.dtype(D.storage_dtype(D.from_name(p.dtype))),
                  p.dtype) for p in kernel.params)
