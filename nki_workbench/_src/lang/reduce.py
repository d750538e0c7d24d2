"""``nki.language`` reductions.

Along free axes (``sum prod max min mean all var``), and ``loop_reduce`` (accumulation across
loop iterations).
"""

from __future__ import annotations

import linecache
import re

from .. import dtypes as D
from ..errors import NkiError, user_frame, user_location
from ..ir import Alloc, Inst
from ..ir import expr as E
from ..trace import context as C
from ..trace import emit as M
from ..trace.index import IndexExpr
from .alu import REDUCIBLE, alu_name
from .common import NkiTensor, axes_of

__all__ = ["sum", "prod", "max", "min", "mean", "all", "var", "loop_reduce"]


def _reduce(op, x, axis, dtype, mask, keepdims, default=None):
    api = f"nl.{op}"
    M.require_tile(x, op, "x")
    axes = axes_of(api, axis, x.ndim)
    shape = tuple((1 if k in axes else s) for k, s in enumerate(x.shape) if keepdims or
                  k not in axes)
    dt = D.canonical(dtype) if dtype is not None else (default or x.dtype)
    return M.compute(op, [x], shape, dt, mask=mask, api=api,
                     attrs={"axis": axes, "keepdims": bool(keepdims)})


def _doc(op, what):
    return (f"{what} along free axes.\n\n    Args:\n        x: input tile.\n        axis: int or "
            "tuple of free axes (never 0, the partition axis).\n        dtype: output dtype.\n"
            "        mask: compile-time predicate over x's elements.\n        keepdims: keep "
            "reduced axes as size 1.\n\n    Returns:\n        A new SBUF tile.\n    ")


def sum(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    return _reduce("sum", x, axis, dtype, mask, keepdims)


def prod(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("prod", x, axis, dtype, mask, keepdims)


def max(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    return _reduce("max", x, axis, dtype, mask, keepdims)


def min(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    return _reduce("min", x, axis, dtype, mask, keepdims)


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    f32 = D.canonical("float32") if not D.is_float(x.dtype) else None
    return _reduce("mean", x, axis, dtype, mask, keepdims, default=f32)


def all(x, axis, *, dtype=bool, mask=None, keepdims=False, **kwargs):  # noqa: A001
    return _reduce("all", x, axis, dtype, mask, keepdims)


def var(x, axis, *, dtype=None, mask=None, **kwargs):
    f32 = D.canonical("float32") if not D.is_float(x.dtype) else None
    return _reduce("var", x, axis, dtype, mask, False, default=f32)


for _f, _w in [(sum, "Sum"), (prod, "Product"), (max, "Maximum"), (min, "Minimum"),
               (mean, "Mean (fp32 for integer inputs)"), (all, "Logical AND"),
               (var, "Population variance (as np.var)")]:
    _f.__doc__ = _doc(_f.__name__, _w)


# why: `T[...] = nl.loop_reduce(...)` names its destination, which NKI makes the accumulator
_SUBSCRIPT_TARGET = re.compile(r"^\s*[A-Za-z_][\w.]*\s*\[.*\]\s*=(?!=)")
_NAME_TARGET = re.compile(r"^\s*([A-Za-z_]\w*)\s*=(?!=)")
_IDENT = {"add": 0, "subtract": 0, "multiply": 1, "maximum": float("-inf"),
          "minimum": float("inf"), "bitwise_and": -1, "bitwise_or": 0, "bitwise_xor": 0,
          "logical_and": 1, "logical_or": 0, "logical_xor": 0}


def _kernel_line() -> tuple[str, dict]:
    """The kernel line being traced and its frame's locals."""
    frame = user_frame()
    if frame is None:
        return "", {}
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno), frame.f_locals


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """Reduce ``x`` across the iterations of the loops in ``loop_indices``.

    As in NKI, the destination is the accumulator and the right-hand input of ``op``: each
    iteration computes ``dst = op(dst, x)``. The destination is

    * the tile assigned to, for ``t[...] = nl.loop_reduce(...)`` (initialise it before the
      loops, e.g. with ``nl.zeros``); every other loop indexing ``t`` keeps its own
      accumulator;
    * the tile a name already holds, for ``b = nl.loop_reduce(...)`` after ``b = nl.zeros(...)``;
    * otherwise a new tile filled with the op's identity just before the outermost of the
      reduced loops; that tile is shared by every loop nested inside it, so a loop between
      the reduced loops and the call that is not reduced over is an error.

    Args:
        x: tile produced in the loop body.
        op: ALU operator (``np.add``, ``np.maximum``...).
        loop_indices: loop variable(s) (from ``affine_range``/``sequential_range``).
        dtype: accumulator dtype (default: x's).
        mask: compile-time predicate.

    Returns:
        The accumulator tile (usable after the loop).
    """
    ctx = C.require("nl.loop_reduce")
    M.require_tile(x, "loop_reduce", "x")
    name = alu_name(op, "nl.loop_reduce")
    if name not in REDUCIBLE:
        raise NkiError(None, f"nl.loop_reduce: {name} is not a reduction operator",
                       user_location())
    idx = loop_indices if isinstance(loop_indices, (list, tuple)) else [loop_indices]
    names = set()
    for i in idx:
        if isinstance(i, IndexExpr) and not isinstance(i.expr, E.Pred):
            names |= E.free_vars(i.expr)
    dt = D.canonical(dtype) if dtype is not None else x.dtype
    attrs = {"dtype": D.name_of(dt), "acc": name}
    line, local_vars = _kernel_line()
    if _SUBSCRIPT_TARGET.match(line):
        # why: the assignment retargets this instruction onto its destination (emit._retarget),
        # so the instruction reads and writes the destination: dst = op(dst, x)
        return M.compute("loop_reduce", [x], tuple(x.shape), dt, attrs=attrs, mask=mask,
                         api="nl.loop_reduce")
    m = _NAME_TARGET.match(line)
    prior = local_vars.get(m.group(1)) if m else None
    if isinstance(prior, NkiTensor) and prior.buffer in ("sbuf", "psum") and \
            tuple(prior.shape) == tuple(x.shape) and not prior.is_index_tensor:
        M.emit("loop_reduce", [prior], [x], attrs=attrs, mask=mask, api="nl.loop_reduce")
        return prior
    depths = [k for k, info in enumerate(ctx.loops) if info["var"] in names]
    depth = depths[0] if depths else len(ctx.loops)
    shared = [info["var"] for info in ctx.loops[depth:] if info["var"] not in names]
    if shared:
        raise NkiError(None, "nl.loop_reduce: its new accumulator would be shared by every "
                       f"iteration of loop {', '.join(map(repr, shared))}, which it does not "
                       "reduce over", user_location(),
                       "assign the result into a tile indexed by that loop, created (e.g. "
                       "nl.zeros) before the reduced loop: t[i, ...] = nl.loop_reduce(...)")
    split = [info["var"] for info in ctx.loops[depth:]
             if info["var"] in names and (info.get("segment") or info.get("rest") is not None)]
    if split:
        # why: each part of a split loop would start its own accumulator (a partial result)
        raise NkiError(None, "nl.loop_reduce: a Python condition on loop variables split loop "
                       f"{', '.join(map(repr, split))} into parts, and a new accumulator would "
                       "hold only one part's sum", user_location(),
                       "create the accumulator before the loop (e.g. acc = nl.zeros(...)) and "
                       "write acc[...] = nl.loop_reduce(...)")
    decl = ctx.declare(x.shape, D.name_of(dt), "sbuf", name=ctx.assigned_name() or "acc",
                       emit=False)
    acc = NkiTensor(ctx, decl.name, scope=ctx.scope[:depth])
    outer = ctx.blocks[depth]
    loc = user_location()
    outer.append(Alloc(decl))
    outer.append(Inst("memset", (acc.access(),), (M.operand(_IDENT[name], "loop_reduce", "init"),),
                      (("dtype", D.name_of(dt)),), None, loc))
    ctx.note_write(decl.name, loc)
    # why: an associative accumulation (like PSUM +=): acc = op(acc, x) through the acc mode,
    # which the race detector knows is not a loop-carried dependency
    M.emit("loop_reduce", [acc], [x], attrs=attrs, mask=mask, api="nl.loop_reduce")
    return acc
