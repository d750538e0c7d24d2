"""``nki.isa`` ALU instructions, written once over the numerics protocol ``P``.

tensor_tensor, tensor_scalar, scalar_tensor_tensor, tensor_tensor_scan, tensor_reduce,
tensor_partition_reduce, tensor_scalar_reduce. Every operator is :meth:`.Numerics.alu` (the
one ALU table nl's binary ops use too) plus the two ISA-only variants of :func:`alu`: GpSimd's
exact 32-bit integer arithmetic and the one-operand ``invert`` / ``logical_not``. Reductions go
through :meth:`.Numerics.reduce`, the one documented order (docs/semantics.md).
"""

from __future__ import annotations

import numpy as np

from .numerics import BITVEC_OPS, REDUCE_IDENTITY, value_rule

__all__ = ["alu", "alu_reduce", "align", "like", "out", "sel_like", "out_sel", "free_reduce",
           "scan", "fits"]

_EXACT = ("add", "subtract", "multiply")
_LOGIC = frozenset({"logical_and", "logical_or", "logical_xor"})
# why: masked-out elements of a reduction take the operator's identity (bit patterns for bitvec)
_IDENT = {**REDUCE_IDENTITY, "subtract": 0.0, "bitwise_and": 0xFFFFFFFF, "bitwise_or": 0,
          "bitwise_xor": 0, "logical_and": True, "logical_or": False, "logical_xor": False}


# ----------------------------------------------------------------------------- shapes
def fits(a, b) -> bool:
    """Whether shape ``a`` broadcasts to shape ``b``."""
    try:
        return np.broadcast_shapes(tuple(a), tuple(b)) == tuple(b)
    except ValueError:
        return False


def _mutual(a, b) -> bool:
    try:
        np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        return False
    return True


def align(x, ndim):
    """``[P, 1]`` operands get unit dims on the right to broadcast over all free dims."""
    nd = np.ndim(x)
    if 0 < nd < ndim:
        return x.reshape(tuple(np.shape(x)) + (1,) * (ndim - nd))
    return x


def like(P, x, shape):
    """``x`` with ``shape`` when only the free-dim layout differs (same elements/partition)."""
    x = P.xp.asarray(x)
    shape = tuple(shape)
    if x.ndim and x.shape != shape and x.size == int(np.prod(shape)) and \
            not _mutual(x.shape, shape):
        return x.reshape(shape)
    return align(x, len(shape))


def out(P, x, shape):
    """``x`` broadcast to the output's shape."""
    x = P.xp.asarray(x)
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if not fits(x.shape, shape):
        P.unsupported(f"result of shape {list(x.shape)} for an output of {list(shape)}")
    return P.xp.broadcast_to(x, shape)


def sel_like(P, sel, shape):
    """A mask broadcast to data of ``shape``."""
    sel = align(P.xp.asarray(sel), len(shape))
    if not fits(sel.shape, shape):
        P.unsupported(f"a mask of shape {list(sel.shape)} over data of {list(shape)}")
    return P.xp.broadcast_to(sel, tuple(shape))


def out_sel(P, sel, shape):
    """The mask of an output whose grid may be narrower than the mask ([P, 1], [P, 8])."""
    if sel is None:
        return None
    xp = P.xp
    sel = xp.asarray(sel)
    if fits(sel.shape, shape):
        return xp.broadcast_to(sel, tuple(shape))
    rows = xp.any(sel.reshape(sel.shape[0], -1), axis=1) if sel.ndim > 1 else sel
    rows = rows.reshape((-1,) + (1,) * (len(shape) - 1))
    if not fits(rows.shape, shape):
        P.unsupported("a mask that does not fit the output rows")
    return xp.broadcast_to(rows, tuple(shape))


# ----------------------------------------------------------------------------- the ALU
def alu(P, op, a, b=None, exact_int=False):
    """One ISA ALU operation: :meth:`.Numerics.alu` plus the ISA-only variants.

    Args:
        P: the numerics protocol.
        op: canonical ALU operator name (``invert`` / ``logical_not`` take one operand).
        a: first operand.
        b: second operand.
        exact_int: GpSimd's exact 32-bit integer add/subtract/multiply of integer operands
            (wrapping mod 2**32, read as int32).

    Returns:
        float32 for arithmetic, comparisons and logical operators (0.0 / 1.0); int32 or uint32
        patterns for bitvec operators.
    """
    xp = P.xp
    if op == "invert":
        return P.read32(~P.bits(a), xp.asarray(a))
    if op == "logical_not":
        return (P.f32(a) == 0).astype(np.float32)
    if exact_int and op in _EXACT and xp.asarray(a).dtype.kind in "iu" and \
            xp.asarray(b).dtype.kind in "iu":
        ia, ib = P.read32(P.bits(a)), P.read32(P.bits(b))  # why: int32 wraps like the ALU
        return ia + ib if op == "add" else ia - ib if op == "subtract" else ia * ib
    r = P.alu(op, a, b)
    return r.astype(np.float32) if r.dtype == bool else r


def _apply(P, op, x, operand, reverse, exact=False):
    return alu(P, op, operand, x, exact) if reverse else alu(P, op, x, operand, exact)


def alu_reduce(P, op, x, axes, sel=None):
    """Reduce ``x`` over ``axes`` with an ALU operator; masked-out elements are skipped.

    ``subtract`` is the first element minus the (tree) sum of the others.

    Args:
        P: the numerics protocol.
        op: reducible ALU operator.
        x: the values.
        axes: reduced axes.
        sel: boolean mask broadcast to ``x``'s shape, or ``None``.

    Returns:
        float32 (int32/uint32 for bitvec operators) of the kept axes' shape.
    """
    xp = P.xp
    x = xp.asarray(x)
    src = x
    if op in BITVEC_OPS:
        x = P.bits(x)
    elif op in _LOGIC:
        x = P.f32(x) != 0
    else:
        x = P.f32(x)
    if sel is not None:
        x = xp.where(sel, x, xp.asarray(_IDENT[op]).astype(x.dtype))
    axes = tuple(axes)
    if op == "subtract":
        keep = [d for d in range(x.ndim) if d not in axes]
        moved = xp.transpose(x, keep + list(axes)).reshape([x.shape[d] for d in keep] + [-1])
        r = P.alu("subtract", moved[..., 0], P.sum(moved[..., 1:], -1))
    else:
        r = P.reduce(op, x, axes)
    if op in BITVEC_OPS:
        return P.read32(r, src)
    return r.astype(np.float32) if r.dtype == bool else r


def free_reduce(P, op, y, sel):
    """``[P]`` float32 reduction of ``y`` over all its free axes (``sel``: the mask or None)."""
    s = None if sel is None else sel_like(P, sel, y.shape)
    r = alu_reduce(P, op, y, tuple(range(1, y.ndim)), s)
    return P.f32(r).reshape(-1)


def scan(P, step, init, xs):
    """``step``-accumulate over the leading axis of each of ``xs``; returns every carry.

    Args:
        P: the numerics protocol.
        step: ``fn(carry, *columns) -> carry``.
        init: the initial carry.
        xs: arrays of one leading extent n.

    Returns:
        The n carries stacked on a leading axis.
    """
    n = xs[0].shape[0]
    if P.name == "jax":
        import jax.numpy as jnp
        from jax import lax

        from .numerics_jax import note_flush, watching_flags

        def body(c, cols):
            with watching_flags() as flushed:  # why: a flag may not leak out of the scan
                c = step(c, *cols)
            return c, (c, jnp.any(jnp.stack(flushed)) if flushed else jnp.bool_(False))
        rows, flags = lax.scan(body, init, tuple(xs), unroll=max(1, min(8, n)))[1]
        note_flush(jnp.any(flags))
        return rows
    rows, c = [], init
    for i in range(n):
        c = step(c, *(x[i] for x in xs))
        rows.append(c)
    return np.stack(rows) if rows else np.zeros((0,) + np.shape(init), np.float32)


# ----------------------------------------------------------------------------- instructions
@value_rule("tensor_tensor")
def _tensor_tensor(P, ex):
    a, b = ex.ins
    a = P.xp.asarray(a)
    r = alu(P, ex.attrs["op"], a, like(P, b, a.shape),
            exact_int=ex.attrs["engine"] == "gpsimd")
    return out(P, r, ex.out_shape)


@value_rule("tensor_scalar")
def _tensor_scalar(P, ex):
    x, o0, o1 = ex.ins
    nd, a = len(ex.out_shape), ex.attrs
    t = _apply(P, a["op0"], x, align(o0, nd), a["reverse0"])
    if a["op1"] is not None:
        t = _apply(P, a["op1"], t, align(o1, nd), a["reverse1"])
    return out(P, t, ex.out_shape)


@value_rule("scalar_tensor_tensor")
def _scalar_tensor_tensor(P, ex):
    x, o0, o1 = ex.ins
    a = ex.attrs
    t = _apply(P, a["op0"], x, align(o0, len(ex.out_shape)), a["reverse0"])
    t = _apply(P, a["op1"], t, like(P, o1, np.shape(x)), a["reverse1"])
    return out(P, t, ex.out_shape)


@value_rule("tensor_tensor_scan")
def _tensor_tensor_scan(P, ex):
    d0, d1, init = ex.ins
    a = ex.attrs
    p = ex.out_shape[0]
    x0, x1 = P.f32(d0).reshape(p, -1), P.f32(d1).reshape(p, -1)
    prev = P.xp.broadcast_to(P.f32(init).reshape(-1), (p,))

    def step(prev, c0, c1):
        t = _apply(P, a["op0"], c0, prev, a["reverse0"])
        return P.f32(_apply(P, a["op1"], t, c1, a["reverse1"]))
    ys = scan(P, step, prev, (x0.T, x1.T))
    return out(P, ys.T.reshape(ex.out_shape), ex.out_shape)


@value_rule("tensor_reduce")
def _tensor_reduce(P, ex):
    a = ex.attrs
    axes, keep = tuple(a["axis"]), a["keepdims"]
    x = P.xp.asarray(ex.ins[0])
    sel = None if ex.mask is None else sel_like(P, ex.mask, x.shape)
    r = alu_reduce(P, a["op"], x, axes, sel)
    if sel is not None:
        ex.out_sel = P.xp.any(sel, axis=axes, keepdims=keep)
    if a["negate"]:
        r = -r
    return r.reshape(ex.out_shape)


@value_rule("tensor_partition_reduce")
def _tensor_partition_reduce(P, ex):
    x = P.xp.asarray(ex.ins[0])
    sel = None if ex.mask is None else sel_like(P, ex.mask, x.shape)
    if sel is not None:
        ex.out_sel = P.xp.any(sel, axis=0, keepdims=True)
    return alu_reduce(P, ex.attrs["op"], x, (0,), sel).reshape(ex.out_shape)


@value_rule("tensor_scalar_reduce")
def _tensor_scalar_reduce(P, ex):
    x, o0 = ex.ins
    y = P.f32(alu(P, ex.attrs["op0"], x, align(o0, np.ndim(x))))
    red = free_reduce(P, ex.attrs["reduce_op"], y, ex.mask)
    return y, red.reshape(-1, 1)
