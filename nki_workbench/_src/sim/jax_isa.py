"""The compiled simulator's rules for ``nki.isa`` instructions (registered into ``JAX_RULES``).

Every rule mirrors the numpy rule of the same opcode in :mod:`.isa_rules`: same widening to
float32, same formula and rounding points, same masks and output shapes, with the integer
semantics of its int64 arithmetic reproduced in 32 bits where that is exact (bitvec operands are
int32, or zero-extended uint32; a combination whose int64 result would not fit raises
:class:`~.jax_rules.Unsupported`). Every float32 intermediate goes through
:func:`~.jax_rules.opaque` (no FMA contraction) and every divisor behind an optimization
barrier (:func:`~.jax_rules.div`: never a multiplication by a reciprocal).

Sums reproduce numpy's order: ``np.add.reduce`` adds ``0.0`` to a pairwise sum (blocks of at most
128 elements with 8 accumulators) when the reduced elements are the innermost in memory, and
accumulates sequentially otherwise (:func:`np_sum`, decided by :func:`sum_order` for C-ordered
tiles); subtract/multiply reductions are sequential. Equality with the interpreter, per opcode:

* bit-identical: tensor_copy, tensor_copy_dynamic_src/dst, tensor_copy_predicated, iota,
  affine_select, dma_transpose, nc_transpose, nc_stream_shuffle, sequence_bounds, max8;
  tensor_tensor / tensor_scalar / scalar_tensor_tensor / tensor_tensor_scan for every ALU
  operator (``mod`` follows numpy's npy_divmod, signed zeros included; ``power`` is XLA's pow,
  which matched numpy's powf bit for bit on XLA:CPU except for subnormal results; other XLA
  backends may differ by ulps); tensor_reduce / tensor_partition_reduce, bn_stats, bn_aggr
  (numpy's summation order, see above); activation with ``copy``, ``square``, ``relu``,
  ``abs``, ``sign``.
* within a few ulps of the output's largest magnitude: activation with a transcendental
  function (XLA's kernels: measured on N(0, 3) inputs exp 1, sigmoid / tanh / erf / gelu /
  silu / softplus / mish <= 4; relative errors are larger where results underflow, e.g. the
  gelu and erf_dx tails), nc_matmul (XLA's dot sums in another order than BLAS).
* where the interpreter's value lies transposed in memory (a permuting read, a tile written
  from a transpose) numpy sums in another order: a few ulps in reductions and bn_stats/bn_aggr.
* signed zeros: max/min of ``-0.0`` and ``0.0`` and their sort order in max8 may differ in sign;
  XLA's CPU runtime flushes float32 subnormals to zero (as everywhere in the compiled backend).

The rules hold under ``jax.vmap`` (vectorised affine loops, :mod:`.jax_vector`): divisions go
through :func:`~.jax_rules.div`, whose batching rule keeps an unbatched divisor hidden.

Left to the interpreter (``Unsupported`` at lowering, or no rule): anything whose numpy rule
warns or raises depending on data (activation's valid-range check for log/sin/arctan/sqrt/
rsqrt/reciprocal, nc_matmul's ``is_*`` hints, nc_find_index8's missing values, local_gather's
bounds, nc_stream_shuffle with run-time mask entries), bitvec ``negate`` and mixed
signed/uint32 bitvec operands, activation with ``reduce_cmd``/``reduce_res`` (engine
registers), and the multi-output and register instructions (activation_reduce,
tensor_scalar_reduce, range_select, select_reduce, nc_match_replace8, dma_copy,
builtin_custom_op). Bitvec results are the ALU's 32-bit patterns, as :func:`.rules.bits32`
keeps them in the interpreter (shifts included; counts outside [0, 32) give 0).
"""

from __future__ import annotations

import numpy as np
from jax import lax
from jax import numpy as jnp

from .. import dtypes as D
from ..ir import Scalar
from ..ir import expr as E
from ..isa.activation import VALID_RANGE
from .jax_rules import (
    _UNARY,
    Unsupported,
    align,
    cast,
    div,
    fits,
    jrule,
    np_mod,
    opaque,
    storage,
    to_f32,
)

__all__ = ["COMPILED_SPECIAL", "alu", "alu_reduce", "np_sum", "sum_order"]

COMPILED_SPECIAL = frozenset({"activation"})
"""Opcodes the interpreter runs as :data:`.interp.SPECIAL` that have a JAX rule here (their
register-using variants raise ``Unsupported``)."""

_F32, _I32, _U32 = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32)
_PW_BLOCK = 128  # numpy's PW_BLOCKSIZE


# ----------------------------------------------------------------------------- shapes, statics
def _static(ex, k):
    """The compile-time value of operand ``k`` when it is a Scalar (as the interpreter sees it)."""
    o = ex.inst.ins[k]
    if not isinstance(o, Scalar):
        return None
    return D.cast(np.asarray(o.value), o.dtype)[()] if o.dtype is not None else o.value


def _mutual(a, b) -> bool:
    try:
        np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        return False
    return True


def _like(x, shape):
    """``isa_rules._like``: a reshape when only the free-dim layout differs, else aligned."""
    shape = tuple(shape)
    if x.ndim and x.shape != shape and x.size == int(np.prod(shape)) and \
            not _mutual(x.shape, shape):
        return x.reshape(shape)
    return align(x, len(shape))


def _out(x, shape):
    """``np.broadcast_to(x, shape)``; a shape numpy would refuse leaves it to the interpreter."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if not fits(x.shape, shape):
        raise Unsupported(f"result of shape {list(x.shape)} for an output of {list(shape)}")
    return jnp.broadcast_to(x, shape)


def _sel_like(sel, shape):
    sel = align(sel, len(shape))
    if not fits(sel.shape, shape):
        raise Unsupported(f"a mask of shape {list(sel.shape)} over data of {list(shape)}")
    return jnp.broadcast_to(sel, tuple(shape))


def _out_sel(sel, shape):
    """``isa_rules._out_sel``: the mask of a narrower output ([P, 1], [P, 8])."""
    if sel is None:
        return None
    if fits(sel.shape, shape):
        return jnp.broadcast_to(sel, tuple(shape))
    rows = jnp.any(sel.reshape(sel.shape[0], -1), axis=1) if sel.ndim > 1 else sel
    rows = rows.reshape((-1,) + (1,) * (len(shape) - 1))
    if not fits(rows.shape, shape):
        raise Unsupported("a mask that does not fit the output rows")
    return jnp.broadcast_to(rows, tuple(shape))


def _fzero(zero):
    # why: a float32 +0.0 only known at run time, so XLA cannot drop numpy's `0.0 + sum`
    return lax.bitcast_convert_type(zero, jnp.float32)


# ----------------------------------------------------------------------------- ALU
def _bits(x, s=None):
    """``(value, known >= 0)``: numpy's ``_bits`` of ``x`` as int32, or zero-extended uint32."""
    if x.dtype == _U32:
        return x, True
    if x.dtype.kind in "biu":
        nonneg = x.dtype.kind in "bu" or (s is not None and int(s) >= 0)
        return x.astype(jnp.int32), nonneg
    nonneg = s is not None and int(D.cast(np.asarray(s, np.float32), "int32")) >= 0
    return cast(x, "int32"), nonneg


def _int_pair(op, a, b, sa, sb):
    (ra, na), (rb, nb) = _bits(a, sa), _bits(b, sb)
    if ra.dtype == rb.dtype:
        return ra, rb
    # why: numpy mixes a zero-extended uint32 with a sign-extended int32 in int64; the result
    # fits 32 bits (as uint32) only when the int32 side is known to be non-negative
    if (ra.dtype == _U32 and nb) or (rb.dtype == _U32 and na):
        return ra.astype(jnp.uint32), rb.astype(jnp.uint32)
    raise Unsupported(f"'{op}' of a uint32 and a possibly negative signed operand")


def _shift(fn):
    # why: the 32-bit ALU shifts the pattern (right: logically); numpy gives 0 for counts
    # outside [0, 32); the result reads as int32 unless an operand is uint32 (rules.bits32)
    def run(a, b, sa, sb):
        ra, _ = _bits(a, sa)
        rb, _ = _bits(b, sb)
        ua = lax.bitcast_convert_type(ra, jnp.uint32) if ra.dtype == _I32 else ra
        ok = (rb >= 0) & (rb < 32)
        out = jnp.where(ok, fn(ua, jnp.where(ok, rb, 0).astype(jnp.uint32)), jnp.uint32(0))
        return out if _U32 in (ra.dtype, rb.dtype) else lax.bitcast_convert_type(out, jnp.int32)
    return run


def _bitwise(fn):
    def run(a, b, sa, sb):
        return fn(*_int_pair(fn.__name__, a, b, sa, sb))
    return run


_BITS = {"bitwise_and": _bitwise(jnp.bitwise_and), "bitwise_or": _bitwise(jnp.bitwise_or),
         "bitwise_xor": _bitwise(jnp.bitwise_xor), "right_shift": _shift(jnp.right_shift),
         "left_shift": _shift(jnp.left_shift)}


def _invert(a, sa):
    r, _ = _bits(a, sa)
    return ~r  # why: the complement of the 32-bit pattern, as rules.bits32 keeps it


_ONE_OPERAND = {"invert": _invert,
                "logical_not": lambda a, sa: (to_f32(a) == 0).astype(jnp.float32)}


_FLOAT = {
    "add": lambda a, b, z: a + b, "subtract": lambda a, b, z: a - b,
    "multiply": lambda a, b, z: a * b, "divide": div,
    "power": lambda a, b, z: jnp.power(a, b), "maximum": lambda a, b, z: jnp.maximum(a, b),
    "minimum": lambda a, b, z: jnp.minimum(a, b), "mod": np_mod,
    "fmod": lambda a, b, z: jnp.fmod(a, b),
    "equal": lambda a, b, z: a == b, "not_equal": lambda a, b, z: a != b,
    "greater": lambda a, b, z: a > b, "greater_equal": lambda a, b, z: a >= b,
    "less": lambda a, b, z: a < b, "less_equal": lambda a, b, z: a <= b,
    "logical_and": lambda a, b, z: (a != 0) & (b != 0),
    "logical_or": lambda a, b, z: (a != 0) | (b != 0),
    "logical_xor": lambda a, b, z: (a != 0) ^ (b != 0),
    "abs": lambda a, b, z: jnp.abs(a),
    "rsqrt": lambda a, b, z: div(np.float32(1), jnp.sqrt(a), z),
    "reciprocal": lambda a, b, z: div(np.float32(1), a, z),
}
_EXACT = {"add": jnp.add, "subtract": jnp.subtract, "multiply": jnp.multiply}


def _wrap(x):
    # why: numpy's _wrap32 of the int64 result is arithmetic mod 2**32 on the 32-bit patterns
    return lax.bitcast_convert_type(x, jnp.int32) if x.dtype == _U32 else x.astype(jnp.int32)


def alu(op, a, b, zero, sa=None, sb=None, exact_int=False):
    """One ALU operation with :func:`.isa_rules.alu`'s numerics, on JAX values.

    Args:
        op: canonical ALU operator name.
        a: first operand (JAX array of any NKI storage dtype).
        b: second operand (ignored by ``invert`` / ``logical_not``).
        zero: the program's run-time int32 zero (see :func:`.jax_rules.opaque`).
        sa: compile-time value of ``a`` when it is a constant (sharpens integer ranges).
        sb: compile-time value of ``b`` when it is a constant.
        exact_int: GpSimd's exact 32-bit integer add/subtract/multiply.

    Returns:
        float32 for arithmetic, comparisons and logical operators; int32 or uint32 (the value
        numpy holds in int64) for bitvec operators.

    Raises:
        Unsupported: the operator or operand types need numpy's 64-bit integers.
    """
    if op in _ONE_OPERAND:
        return _ONE_OPERAND[op](a, sa)
    if exact_int and op in _EXACT and a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return _EXACT[op](_wrap(a), _wrap(b))
    if op in _BITS:
        return _BITS[op](a, b, sa, sb)
    if op not in _FLOAT:
        raise Unsupported(f"ALU op '{op}'")
    r = _FLOAT[op](to_f32(a), to_f32(b), zero)
    return r.astype(jnp.float32) if r.dtype == bool else opaque(r, zero)


def _apply(op, x, operand, reverse, zero, sx=None, so=None, exact=False):
    if reverse:
        return alu(op, operand, x, zero, so, sx, exact)
    return alu(op, x, operand, zero, sx, so, exact)


# ----------------------------------------------------------------------------- numpy's sums
def sum_order(shape, axes) -> str:
    """How ``alu_reduce``'s ``np.add.reduce`` orders its sum for a C-ordered array.

    numpy moves the reduced axes last and reshapes; when that reshape must copy, or the reduced
    elements are then the innermost in memory, each output is a pairwise sum, otherwise the
    kept axes are the inner loop and each output accumulates sequentially.

    Args:
        shape: the shape of the reduced value.
        axes: the reduced axes, in the order the rule lists them.

    Returns:
        ``"pairwise"`` or ``"sequential"``.
    """
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    strides = strides[::-1]
    keep = [d for d in range(len(shape)) if d not in axes]
    moved = [(shape[d], strides[d]) for d in keep + list(axes)]
    red = [t for t in moved[len(keep):] if t[0] != 1]
    if not red or any(a[1] != b[0] * b[1] for a, b in zip(red, red[1:], strict=False)):
        return "pairwise"
    kept = [st for s, st in moved[:len(keep)] if s != 1]
    return "pairwise" if all(red[-1][1] < st for st in kept) else "sequential"


def _pw_leaves(lo, n, leaves):
    """The recursion of numpy's pairwise_sum: appends the leaf blocks, returns the tree."""
    if n <= _PW_BLOCK:
        leaves.append((lo, n))
        return len(leaves) - 1
    n2 = n // 2
    n2 -= n2 % 8
    return _pw_leaves(lo, n2, leaves), _pw_leaves(lo + n2, n - n2, leaves)


def _pw_block(b):
    """One leaf (8 to 128 elements) of numpy's pairwise_sum over the last axis: 8 accumulators."""
    n = b.shape[-1]
    r = b[..., 0:8]
    full = n - n % 8
    for i in range(8, full, 8):
        r = r + b[..., i:i + 8]
    q = [r[..., j] for j in range(8)]
    res = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]))
    for i in range(full, n):
        res = res + b[..., i]
    return res


def _fold(x, fn):
    """``fn``-accumulate over the last axis from its first element, in index order."""
    xs = jnp.moveaxis(x, -1, 0)
    if xs.shape[0] <= 16:
        r = xs[0]
        for v in xs[1:]:
            r = fn(r, v)
        return r
    return lax.scan(lambda c, v: (fn(c, v), None), xs[0], xs[1:], unroll=8)[0]


def np_sum(x, zero, order="pairwise"):
    """``np.add.reduce`` of float32 ``x`` over its last axis, in numpy's order, bit for bit.

    Args:
        x: float32 JAX array.
        zero: the program's run-time int32 zero.
        order: ``"pairwise"`` (the reduced elements innermost in memory) or ``"sequential"``.

    Returns:
        float32 array of ``x.shape[:-1]``.
    """
    n = x.shape[-1]
    if n == 0:
        return jnp.zeros(x.shape[:-1], jnp.float32)
    if order == "sequential" or n < 8:
        r = _fold(x, jnp.add)
    else:
        leaves = []
        tree = _pw_leaves(0, n, leaves)
        vals = [None] * len(leaves)
        by_len = {}
        for k, (_, ln) in enumerate(leaves):
            by_len.setdefault(ln, []).append(k)
        for ln, ks in by_len.items():
            starts = [leaves[k][0] for k in ks]
            if starts == list(range(starts[0], starts[0] + ln * len(ks), ln)):
                # why: back-to-back blocks of one length are a reshape, not a gather
                blk = x[..., starts[0]:starts[0] + ln * len(ks)]
                blk = blk.reshape(blk.shape[:-1] + (len(ks), ln))
            else:
                blk = x[..., np.array(starts)[:, None] + np.arange(ln)]
            s = _pw_block(blk)
            for g, k in enumerate(ks):
                vals[k] = s[..., g]

        def combine(t):
            return vals[t] if isinstance(t, int) else combine(t[0]) + combine(t[1])
        r = combine(tree)
    return _fzero(zero) + r


# ----------------------------------------------------------------------------- reductions
_LOGIC = frozenset({"logical_and", "logical_or", "logical_xor"})
_IDENT = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf,
          "bitwise_and": -1, "bitwise_or": 0, "bitwise_xor": 0, "logical_and": True,
          "logical_or": False, "logical_xor": False}
_LAX = {"bitwise_and": lax.bitwise_and, "bitwise_or": lax.bitwise_or,
        "bitwise_xor": lax.bitwise_xor}


def _ident(op, dtype):
    return np.asarray(_IDENT[op]).astype(dtype)  # (-1 as uint32 is all ones, as in int64)


def _bit_reduce(op):
    def run(m):
        return lax.reduce(m, _ident(op, m.dtype)[()], _LAX[op], (m.ndim - 1,))
    return run


_REDUCE = {
    "subtract": lambda m: _fold(m, jnp.subtract), "multiply": lambda m: _fold(m, jnp.multiply),
    "maximum": lambda m: jnp.max(m, axis=-1), "minimum": lambda m: jnp.min(m, axis=-1),
    "logical_and": lambda m: jnp.all(m, axis=-1), "logical_or": lambda m: jnp.any(m, axis=-1),
    "logical_xor": lambda m: (jnp.sum(m.astype(jnp.int32), axis=-1) & 1) == 1,
    **{op: _bit_reduce(op) for op in _LAX},
}


def alu_reduce(op, x, axes, sel, zero):
    """:func:`.isa_rules.alu_reduce` on JAX values (masked-out elements are skipped).

    Args:
        op: reducible ALU operator.
        x: JAX array.
        axes: reduced axes, in the rule's order (it fixes numpy's summation order).
        sel: boolean mask broadcast to ``x``'s shape, or ``None``.
        zero: the program's run-time int32 zero.

    Returns:
        float32 (int32/uint32 for bitvec operators) of the kept axes' shape.
    """
    shape = x.shape
    if op in _LAX:
        x = _bits(x)[0]
    elif op in _LOGIC:
        x = to_f32(x) != 0
    else:
        x = to_f32(x)
    if sel is not None:
        x = jnp.where(sel, x, jnp.asarray(_ident(op, x.dtype)))
    keep = [d for d in range(x.ndim) if d not in axes]
    moved = jnp.transpose(x, keep + list(axes)).reshape([shape[d] for d in keep] + [-1])
    if op == "add":
        r = np_sum(moved, zero, sum_order(shape, axes))
    else:
        r = _REDUCE[op](moved)
    return r.astype(jnp.float32) if r.dtype == bool else r


# ----------------------------------------------------------------------------- ALU instructions
@jrule("tensor_tensor")
def _tensor_tensor(ex):
    a, b = ex.ins
    r = alu(ex.attrs["op"], a, _like(b, a.shape), ex.zero,
            exact_int=ex.attrs["engine"] == "gpsimd")
    return _out(r, ex.out_shape)


@jrule("tensor_scalar")
def _tensor_scalar(ex):
    x, o0, o1 = ex.ins
    nd, a = len(ex.out_shape), ex.attrs
    t = _apply(a["op0"], x, align(o0, nd), a["reverse0"], ex.zero, so=_static(ex, 1))
    if a["op1"] is not None:
        t = _apply(a["op1"], t, align(o1, nd), a["reverse1"], ex.zero, so=_static(ex, 2))
    return _out(t, ex.out_shape)


@jrule("scalar_tensor_tensor")
def _scalar_tensor_tensor(ex):
    x, o0, o1 = ex.ins
    a = ex.attrs
    t = _apply(a["op0"], x, align(o0, len(ex.out_shape)), a["reverse0"], ex.zero,
               so=_static(ex, 1))
    t = _apply(a["op1"], t, _like(o1, x.shape), a["reverse1"], ex.zero)
    return _out(t, ex.out_shape)


@jrule("tensor_tensor_scan")
def _tensor_tensor_scan(ex):
    d0, d1, init = ex.ins
    a, z = ex.attrs, ex.zero
    p = ex.out_shape[0]
    x0, x1 = to_f32(d0).reshape(p, -1), to_f32(d1).reshape(p, -1)
    prev = jnp.broadcast_to(to_f32(init).reshape(-1), (p,))

    def step(prev, cols):
        t = _apply(a["op0"], cols[0], prev, a["reverse0"], z)
        prev = to_f32(_apply(a["op1"], t, cols[1], a["reverse1"], z))
        return prev, prev

    _, ys = lax.scan(step, prev, (x0.T, x1.T), unroll=min(8, x0.shape[1]))
    return _out(ys.T.reshape(ex.out_shape), ex.out_shape)


def _check_negate(op):
    if op in _LAX:
        raise Unsupported(f"negate of a '{op}' reduction (numpy negates in int64)")


@jrule("tensor_reduce")
def _tensor_reduce(ex):
    a = ex.attrs
    axes, keep = tuple(a["axis"]), a["keepdims"]
    if a["negate"]:
        _check_negate(a["op"])
    x = ex.ins[0]
    sel = None if ex.mask is None else _sel_like(ex.mask, x.shape)
    r = alu_reduce(a["op"], x, axes, sel, ex.zero)
    if sel is not None:
        ex.out_sel = jnp.any(sel, axis=axes, keepdims=keep)
    if a["negate"]:
        r = -r
    return r.reshape(ex.out_shape)


@jrule("tensor_partition_reduce")
def _tensor_partition_reduce(ex):
    x = ex.ins[0]
    sel = None if ex.mask is None else _sel_like(ex.mask, x.shape)
    if sel is not None:
        ex.out_sel = jnp.any(sel, axis=0, keepdims=True)
    return alu_reduce(ex.attrs["op"], x, (0,), sel, ex.zero).reshape(ex.out_shape)


# ----------------------------------------------------------------------------- activation
@jrule("activation")
def _activation(ex):
    a = ex.attrs
    if len(ex.out_shapes) != 1 or a["reduce_cmd"] != "idle":
        raise Unsupported("nisa.activation with reduce_cmd/reduce_res (ScalarE registers)")
    if VALID_RANGE.get(a["op"]) is not None:
        # why: the interpreter warns for inputs outside the valid range (data-dependent)
        raise Unsupported(f"nisa.activation op={a['op']} (valid-range check)")
    x, sc, b = ex.ins
    nd, z = x.ndim, ex.zero
    t = opaque(to_f32(x) * to_f32(align(sc, nd)), z)
    t = opaque(t + to_f32(align(b, nd)), z)
    y = t if a["op"] == "copy" else _UNARY[a["op"]](t, z)
    return y.astype(jnp.float32)


# ----------------------------------------------------------------------------- TensorE
_HINTS = ("is_stationary_onezero", "is_moving_onezero", "is_transpose")


@jrule("nc_matmul")
def _nc_matmul(ex):
    a = ex.attrs
    for h in _HINTS:
        if a.get(h):
            raise Unsupported(f"nc_matmul {h}=True (the interpreter checks the hint on the data)")
    s, m = to_f32(ex.ins[0]), to_f32(ex.ins[1])
    hi = lax.Precision.HIGHEST  # why: full fp32 products and sums (GPUs would use TF32)
    if a.get("perf_mode") == "double_row_gen3":
        return jnp.einsum("kli,klj->ij", s, m, precision=hi, preferred_element_type=jnp.float32)
    return jnp.matmul(s.T, m, precision=hi, preferred_element_type=jnp.float32)


@jrule("nc_transpose")
def _nc_transpose(ex):
    x = ex.ins[0]
    x = x.reshape(x.shape[0], -1)
    out = x.T
    if ex.attrs.get("via_matmul"):
        # why: NC-v2 TensorE transposes by a matmul with identity: a NaN/Inf in a column of
        # data turns the whole transposed row into NaN (as the numpy rule)
        bad = ~jnp.all(jnp.isfinite(to_f32(x)), axis=0)
        out = jnp.where(bad[:, None], np.float32(np.nan), to_f32(out))
    return out


@jrule("dma_transpose")
def _dma_transpose(ex):
    return jnp.transpose(ex.ins[0], tuple(ex.attrs["axes"]))


# ----------------------------------------------------------------------------- copies
@jrule("tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst")
def _tensor_copy(ex):
    x = ex.ins[0]
    if ex.attrs.get("via_fp32") or storage(ex.attrs["dtype"]) != x.dtype:
        x = to_f32(x)  # why: a dtype change (and NC-v2 ScalarE copies) goes through fp32
    return _out(_like(x, ex.out_shape), ex.out_shape)


def _scalar_src(v, old_dtype):
    """The value numpy's ``np.where(cond, v, old)`` then ``astype(old.dtype)`` stores for ``v``."""
    r = np.where(np.ones((), bool), v, np.zeros((), old_dtype))
    r = r.astype(old_dtype) if r.dtype != old_dtype else r
    if old_dtype.kind == "f" and old_dtype != _F32:
        # why: a tile the interpreter holds as float32 (a widened input) takes float32(v)
        # rounded once more; only a value exact in both ways is unambiguous
        if D.from_f32(np.asarray(np.float32(v)), D.name_of(old_dtype)).tobytes() != r.tobytes():
            raise Unsupported(f"tensor_copy_predicated src={v!r} not exact in {old_dtype}")
    return r


@jrule("tensor_copy_predicated")
def _tensor_copy_predicated(ex):
    src, pred, old = ex.ins
    shape = old.shape
    cond = (_like(pred, shape) != 0) ^ bool(ex.attrs["reverse_pred"])
    v = _static(ex, 0)
    if v is not None:
        src = jnp.asarray(_scalar_src(v, np.dtype(old.dtype)))
    else:
        src = _like(src, shape)
        src = src if src.dtype == old.dtype else cast(src, D.name_of(old.dtype))
    return _out(jnp.where(cond, src, old), shape)


# ----------------------------------------------------------------------------- selections
@jrule("affine_select")
def _affine_select(ex):
    pred, x, off = ex.ins
    cond = jnp.broadcast_to(align(pred.astype(bool), len(ex.out_shape)), ex.out_shape)
    return jnp.where(cond, to_f32(x), to_f32(off))


@jrule("iota")
def _iota(ex):
    v = ex.ins[0].astype(jnp.int32)  # why: GpSimd evaluates in int32 (wraps like _wrap32)
    return _out(align(v, len(ex.out_shape)), ex.out_shape)


@jrule("sequence_bounds")
def _sequence_bounds(ex):
    ids = to_f32(ex.ins[0]).reshape(-1)
    n = ids.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    new = jnp.concatenate([jnp.ones(1, bool), ids[1:] != ids[:-1]])
    # why: a run starts at the last new segment at or before i and ends at the next after i
    starts = lax.cummax(jnp.where(new, idx, 0))
    nxt = lax.cummin(jnp.where(new, idx, n), reverse=True)
    ends = jnp.concatenate([nxt[1:], jnp.full(1, n, jnp.int32)])
    pad = ids == 0
    starts = jnp.where(pad, n, starts).astype(jnp.float32)
    ends = jnp.where(pad, -1, ends).astype(jnp.float32)
    return jnp.stack([starts, ends])[None]


# ----------------------------------------------------------------------------- statistics
def _masked_free(ex, x):
    p = x.shape[0]
    w = jnp.ones(x.shape, bool) if ex.mask is None else _sel_like(ex.mask, x.shape)
    if ex.mask is not None:
        ex.out_sel = _out_sel(ex.mask, ex.out_shape)
    return to_f32(x).reshape(p, -1), w.reshape(p, -1)


def _moments(x, w, z):
    c = jnp.sum(w, axis=1, dtype=jnp.int32).astype(jnp.float32)
    s = np_sum(jnp.where(w, x, np.float32(0)), z)
    mean = jnp.where(c > 0, div(s, jnp.maximum(c, np.float32(1)), z), np.float32(0))
    d = opaque(x - mean[:, None], z)
    m2 = np_sum(jnp.where(w, opaque(d * d, z), np.float32(0)), z)
    return c, mean, m2


@jrule("bn_stats")
def _bn_stats(ex):
    x, w = _masked_free(ex, ex.ins[0])
    cols = [v for k in (0, 1) for v in _moments(x[:, k::2], w[:, k::2], ex.zero)]
    return jnp.stack(cols, axis=1)


@jrule("bn_aggr")
def _bn_aggr(ex):
    x, _ = _masked_free(ex, ex.ins[0])
    z = ex.zero
    t = x.reshape(x.shape[0], -1, 3)
    c, m, v = t[..., 0], t[..., 1], t[..., 2]
    n = np_sum(c, z)
    mean = div(np_sum(opaque(c * m, z), z), n, z)
    d = opaque(m - mean[:, None], z)
    sq = opaque(c * opaque(d * d, z), z)
    var = div(np_sum(opaque(v + sq, z), z), n, z)
    return jnp.stack([mean, var], axis=1)


def _max8_nan():
    # why: numpy's SIMD float sort (x86-simd-sort) writes every NaN back as +quiet NaN, so
    # max8 returns its negation; without it, some NaN of the data (its sign flipped) comes back
    a = np.full(16, 1.0, np.float32)
    a[3] = np.nan
    return -np.sort(-a)[-1]


_MAX8_NAN = _max8_nan()


@jrule("max8")
def _max8(ex):
    # why: numpy sorts -x ascending, NaNs last: the 8 largest non-NaN values, then NaNs
    # (lax.top_k is much faster than a sort; NaNs are kept out of it as -inf)
    x, w = _masked_free(ex, ex.ins[0])
    x = jnp.where(w, x, -np.inf)
    nan = jnp.isnan(x)
    top = lax.top_k(jnp.where(nan, -np.inf, x), 8)[0]
    real = jnp.sum(~nan, axis=1, keepdims=True)
    return jnp.where(jnp.arange(8) < real, top, _MAX8_NAN)


@jrule("nc_stream_shuffle")
def _nc_stream_shuffle(ex):
    src = ex.ins[0]
    reads = ex.attrs["reads_dst"]
    dyn = []
    for o in ex.inst.ins[2 if reads else 1:]:
        c = E.const_value(o) if isinstance(o, E.Affine) else None
        if c is None:
            raise Unsupported("nc_stream_shuffle with run-time shuffle_mask entries")
        dyn.append(c)
    dyn = iter(dyn)
    sm = [next(dyn) if m < 0 else m for m in ex.attrs["shuffle_mask"]]
    pd, ps = ex.out_shape[0], src.shape[0]
    rows = []
    for d in range(pd):
        m = sm[d % 32]
        k = (d // 32) * 32 + m
        if m != 255 and (not 0 <= m < 32 or k >= ps):
            raise Unsupported("nc_stream_shuffle mask reading outside src (interpreter error)")
        rows.append(-1 if m == 255 else k)
    rows = np.array(rows)
    s = jnp.take(src.reshape(ps, -1), np.maximum(rows, 0), axis=0)
    if not reads:
        return s.reshape(ex.out_shape)
    old = ex.ins[1]
    s = s if s.dtype == old.dtype else cast(s, D.name_of(old.dtype))
    out = jnp.where(jnp.asarray(rows >= 0)[:, None], s, old.reshape(pd, -1))
    return out.reshape(ex.out_shape)

