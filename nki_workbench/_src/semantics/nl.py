"""Value rules of every ``nki.language`` opcode, written once over the numerics protocol.

A rule ``fn(P, ex)`` returns the result shaped like the output access (both executors round it
to the instruction's dtype and write it). Arithmetic follows the engines: inputs are widened to
float32, computed in float32 (every step fenced: rounded on its own), rounded once on output;
bitvec ops work on the 32-bit patterns (:meth:`.Numerics.alu`); reductions sum in the one
order of :meth:`.Numerics.reduce`; matmul multiplies and accumulates in float32.
``nki.isa`` rules live in ``semantics/isa*.py``, in the same table.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .numerics import ALU_OPS, BITVEC_OPS, COMPARE_OPS, VALUE_RULES, value_rule

__all__ = ["UNARY", "ELEMENTWISE_BINARY", "REDUCTIONS", "unary"]

_SQRT2 = np.float32(np.sqrt(2.0))
_SQRT_2_PI = np.float32(np.sqrt(2 / np.pi))
_INV_SQRT_2PI = np.float32(1 / np.sqrt(2 * np.pi))
_TWO_SQRT_PI = np.float32(2 / np.sqrt(np.pi))
_ZERO, _ONE, _HALF = np.float32(0), np.float32(1), np.float32(0.5)


def _gelu(P, x):
    return P.fence(_HALF * x) * P.fence(_ONE + P.special.erf(P.div(x, _SQRT2)))


def _gelu_dx(P, x):
    xp = P.xp
    cdf = P.fence(_HALF * P.fence(_ONE + P.special.erf(P.div(x, _SQRT2))))
    pdf = P.fence(P.fence(x * xp.exp(P.fence(-_HALF * P.fence(x * x)))) * _INV_SQRT_2PI)
    return cdf + pdf


def _gelu_tanh(P, x):
    inner = P.fence(x + P.fence(np.float32(0.044715) * P.fence(x * P.fence(x * x))))
    return P.fence(_HALF * x) * P.fence(_ONE + P.xp.tanh(P.fence(_SQRT_2_PI * inner)))


def _silu_dx(P, x):
    s = P.special.expit(x)
    return s * P.fence(_ONE + P.fence(x * P.fence(_ONE - s)))


def _softplus(P, x):
    return P.xp.logaddexp(_ZERO, x)


UNARY = {
    # name -> xp function name (a plain element-wise function), or fn(P, x) (a formula)
    "abs": "abs", "negative": "negative", "sign": "sign", "trunc": "trunc", "floor": "floor",
    "ceil": "ceil", "exp": "exp", "log": "log", "cos": "cos", "sin": "sin", "tan": "tan",
    "tanh": "tanh", "arctan": "arctan", "sqrt": "sqrt", "square": "square",
    "rsqrt": lambda P, x: P.div(_ONE, P.fence(P.xp.sqrt(x))),
    "reciprocal": lambda P, x: P.div(_ONE, x),
    "sigmoid": lambda P, x: P.special.expit(x),
    "relu": lambda P, x: P.xp.maximum(x, _ZERO),
    "gelu": _gelu,
    "gelu_dx": _gelu_dx,
    "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": lambda P, x: x * P.special.expit(P.fence(np.float32(1.702) * x)),
    "silu": lambda P, x: x * P.special.expit(x),
    "silu_dx": _silu_dx,
    "erf": lambda P, x: P.special.erf(x),
    "erf_dx": lambda P, x: _TWO_SQRT_PI * P.xp.exp(P.fence(-P.fence(x * x))),
    "softplus": _softplus,
    "mish": lambda P, x: x * P.xp.tanh(_softplus(P, x)),
}
"""Element-wise float32 functions (shared with ``nisa.activation``): see :func:`unary`."""


def unary(P, name, x, ex=None):
    """Apply unary function ``name`` of :data:`UNARY` to float32 ``x`` (into ``ex.out``)."""
    fn = UNARY[name]
    if isinstance(fn, str):
        f = getattr(P.xp, fn)
        return P.into(ex, f, x) if ex is not None else f(x)
    return fn(P, x).astype(np.float32)


def _unary_rule(name):
    def run(P, ex):
        x = P.f32(P.align(ex.ins[0], len(ex.out_shape)))
        r = unary(P, name, x, ex if x.shape == tuple(ex.out_shape) else None)
        return P.fresh(r, ex.out_shape)
    return run


for _n in UNARY:
    VALUE_RULES[_n] = _unary_rule(_n)


@value_rule("invert")
def _invert(P, ex):
    # why: the complement of the raw pattern (floats: of their int32 conversion)
    x = P.xp.asarray(P.align(ex.ins[0], len(ex.out_shape)))
    return P.fresh(~x if x.dtype.kind in "iub" else ~P.cast(x, "int32"), ex.out_shape)


@value_rule("logical_not")
def _logical_not(P, ex):
    return P.fresh(P.f32(P.align(ex.ins[0], len(ex.out_shape))) == 0, ex.out_shape)


# ----------------------------------------------------------------------------- binary
ELEMENTWISE_BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
                      "mod", "fmod", "equal", "not_equal", "greater", "greater_equal", "less",
                      "less_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
                      "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
"""``nl`` binary opcodes: each is :meth:`.Numerics.alu` of the same name."""
assert set(ELEMENTWISE_BINARY) <= ALU_OPS


def _binary_rule(op):
    reuse = op not in COMPARE_OPS and op not in BITVEC_OPS

    def run(P, ex):
        nd = len(ex.out_shape)
        a, b = P.align(ex.ins[0], nd), P.align(ex.ins[1], nd)
        out = ex.out if reuse else None
        return P.fresh(P.alu(op, a, b, out=out), ex.out_shape)
    return run


for _n in ELEMENTWISE_BINARY:
    VALUE_RULES[_n] = _binary_rule(_n)


@value_rule("where")
def _where(P, ex):
    c, x, y = (P.align(v, len(ex.out_shape)) for v in ex.ins)
    return P.fresh(P.xp.where(P.f32(c) != 0, P.f32(x), P.f32(y)), ex.out_shape)


# ----------------------------------------------------------------------------- copies, fills
def _broadcastable(a, b):
    try:
        return np.broadcast_shapes(a, b) == tuple(b)
    except ValueError:
        return False


@value_rule("copy", "load", "store", "broadcast_to", "load_transpose2d", "loop_reduce")
def _copy(P, ex):
    x = P.xp.asarray(ex.ins[0])
    shape = tuple(ex.out_shape)
    if ex.inst.op == "broadcast_to":
        while x.ndim > len(shape) and x.shape[-1] == 1:
            x = x[..., 0]  # why: trailing unit dims hold no elements (NKI ignores them)
        x = P.align(x, len(shape))
    if ex.inst.op == "load_transpose2d":
        x = x.T
    if x.shape != shape:
        if x.size == int(np.prod(shape)) and not _broadcastable(x.shape, shape):
            x = x.reshape(shape)  # why: NKI matches elements per partition, not shapes
        else:
            x = P.align(x, len(shape))
    return P.place(ex, x)


@value_rule("memset")
def _memset(P, ex):
    v = ex.ins[0]
    if isinstance(v, bool):
        dt = np.bool_
    elif isinstance(v, float):
        dt = np.float32
    else:
        dt = P.xp.asarray(v).dtype
    dst = ex.attrs.get("dtype")
    if dst is not None and ex.attrs.get("acc") is None and np.ndim(v) == 0:
        # why: the constant converted to the tile's dtype once, not the whole tile after (an
        # int 0 into a 128x512 float32 PSUM tile: a 16 us astype per nl.zeros)
        return P.place(ex, P.cast(P.xp.full((1,), v, dtype=dt), dst))  # (1-D: casts need it)
    return P.xp.full(ex.out_shape, v, dtype=dt)


@value_rule("rand")
def _rand(P, ex):
    return ex.rng(ex.out_shape)


@value_rule("random_seed")
def _random_seed(P, ex):
    if ex.state is None:
        P.unsupported("random_seed reseeds the interpreter's generator")
    ex.state.reseed(int(np.asarray(ex.ins[0]).reshape(-1)[0]))
    return None


@value_rule("dropout")
def _dropout(P, ex):
    x, rate = (P.align(v, len(ex.out_shape)) for v in ex.ins)
    keep = ex.rng(ex.out_shape) >= P.f32(rate)
    x = P.xp.asarray(x)
    if x.dtype.kind in "iu":
        return P.xp.where(keep, x, 0).astype(x.dtype)
    return P.xp.where(keep, P.f32(x), _ZERO)


# ----------------------------------------------------------------------------- reductions
REDUCTIONS = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum",
              "mean": None, "var": None, "all": None}
"""Reduction opcodes -> the ALU operator they fold with (mean/var/all are formulas)."""
_FILL = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def _mean_var(P, op, x, sel, axes, keep):
    # why: mean is sum / n and var is mean((x - mean)**2): one rounding per step
    xp = P.xp
    if sel is None:
        n = np.float32(np.prod([x.shape[a] for a in axes]))
        xs = x
    else:
        n = xp.maximum(P.sum(sel.astype(np.float32), axes, True), _ONE)
        xs = xp.where(sel, x, _ZERO)
    m = P.div(P.sum(xs, axes, True), n)
    if op == "mean":
        r = m
    else:
        d = P.fence(x - m)
        sq = P.fence(d * d)
        if sel is not None:
            sq = xp.where(sel, sq, _ZERO)
        r = P.div(P.sum(sq, axes, True), n)
    return r if keep else xp.squeeze(r, axis=axes)


def _reduce_rule(op):
    alu_op = REDUCTIONS[op]

    def run(P, ex):
        xp = P.xp
        axes = tuple(ex.attrs["axis"])
        keep = ex.attrs.get("keepdims", False)
        x = P.f32(ex.ins[0])
        sel = None
        if ex.mask is not None:
            sel = xp.broadcast_to(ex.mask, x.shape)
            ex.out_sel = xp.any(sel, axis=axes, keepdims=keep)
        if op == "all":
            v = x != 0
            if sel is not None:
                v = v | ~sel
            return xp.all(v, axis=axes, keepdims=keep)
        if alu_op is None:
            return _mean_var(P, op, x, sel, axes, keep).astype(np.float32)
        if sel is not None:
            x = xp.where(sel, x, np.float32(_FILL[alu_op]))
        return xp.asarray(P.reduce(alu_op, x, axes, keep), dtype=np.float32)
    return run


for _n in REDUCTIONS:
    VALUE_RULES[_n] = _reduce_rule(_n)


# ----------------------------------------------------------------------------- TensorE
@value_rule("matmul")
def _matmul(P, ex):
    x, y = P.f32(ex.ins[0]), P.f32(ex.ins[1])
    lhs = x.T if ex.attrs.get("transpose_x") else x
    # why: a product only added into PSUM is consumed at once: a reused scratch saves a malloc
    out = ex.scratch((lhs.shape[0], y.shape[1])) if ex.attrs.get("acc") == "add" else None
    return P.matmul(lhs, y, out=out)


@value_rule("transpose")
def _transpose(P, ex):
    return P.xp.asarray(ex.ins[0]).T  # (the executor copies a view into a new tile)


# ----------------------------------------------------------------------------- composites
@value_rule("softmax")
def _softmax(P, ex):
    axes = tuple(ex.attrs["axis"])
    x = P.f32(ex.ins[0])
    e = P.xp.exp(P.fence(x - P.reduce("maximum", x, axes, True)))
    return P.div(e, P.sum(e, axes, True))


@value_rule("rms_norm")
def _rms_norm(P, ex):
    axes = tuple(ex.attrs["axis"])
    x, w = P.f32(ex.ins[0]), P.f32(P.align(ex.ins[1], len(ex.out_shape)))
    ms = P.div(P.sum(P.fence(x * x), axes, True), np.float32(ex.attrs["n"]))
    root = P.xp.sqrt(P.fence(ms + np.float32(ex.attrs["epsilon"])))
    return P.fence(P.div(x, root)) * w


@value_rule("gather_flattened")
def _gather_flattened(P, ex):
    xp = P.xp
    data, idx = xp.asarray(ex.ins[0]), xp.asarray(ex.ins[1])
    p = data.shape[0]
    flat = data.reshape(p, -1)
    ii = idx if idx.dtype.kind in "iu" else P.cast(idx, "int32")
    # why: NKI leaves out-of-range gathers undefined; we clip them and never read outside
    ii = xp.clip(ii.reshape(p, -1), 0, flat.shape[1] - 1).astype(np.int32)
    return xp.take_along_axis(flat, ii, axis=1).reshape(idx.shape)


@value_rule("device_print")
def _device_print(P, ex):
    prefix = ex.attrs.get("prefix", "")
    value = P.concrete(ex.ins[0])
    if ex.mask is not None:
        value = np.where(np.broadcast_to(ex.mask, value.shape), D.to_f32(value)
                         if value.dtype.kind not in "biu" else value, np.nan)
    with np.printoptions(threshold=1 << 20):
        print(prefix, value if value.dtype.kind in "biuf" else D.to_f32(value), flush=True)
    return None
