"""Numerics of every ``nki.language`` opcode on numpy: the simulator's rule table.

A rule receives an :class:`Ex` (the instruction, its input values and mask) and returns the
result as a *fresh* numpy array (never a view of an input) shaped like the output access;
the interpreter rounds it to the instruction's dtype and writes it. Arithmetic follows the
engines: inputs are widened to float32, computed in float32, rounded once on output; bitwise
ops work on the raw integers; matmul multiplies in float32 and accumulates in float32.
``nki.isa`` adds its rules to the same table.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from .. import dtypes as D
from ..errors import NkiError

__all__ = ["Ex", "RULES", "rule", "f32", "ALU"]

RULES: dict = {}


class Ex:
    """What a rule sees: the instruction, input values, mask and interpreter state."""

    __slots__ = ("inst", "ins", "mask", "state", "out_shapes", "out_sel", "attrs", "out")

    def __init__(self, inst, ins, mask, state, out_shapes, attrs=None):
        self.inst = inst
        self.ins = ins
        self.mask = mask
        self.state = state
        self.out_shapes = out_shapes
        self.out_sel = None
        self.attrs = dict(inst.attrs) if attrs is None else attrs
        self.out = None  # a dead float32 tile of the output's shape a rule may compute into

    @property
    def out_shape(self):
        """Shape of the first output."""
        return self.out_shapes[0]


def rule(*names):
    """Register a rule for opcodes ``names``."""
    def deco(fn):
        for n in names:
            RULES[n] = fn
        return fn
    return deco


def f32(x):
    """Widen a value (array or scalar) to float32."""
    if isinstance(x, np.ndarray):
        return D.to_f32(x)
    return np.float32(x)


def _raw(x):
    """Integer value of a bitvec operand (bools as 0/1)."""
    a = np.asarray(x)
    return a.astype(np.int64) if a.dtype.kind in "biu" else D.cast(a, "int32").astype(np.int64)


def align(x, ndim):
    """Give a value fewer dims than the result unit free dims on the right (tile broadcasting)."""
    if isinstance(x, np.ndarray) and 0 < x.ndim < ndim:
        return x.reshape(x.shape + (1,) * (ndim - x.ndim))
    return x


def _fresh(x, shape, ins=()):
    """``x`` shaped like the output.

    The interpreter copies results that alias an input (or are views) before binding them as a
    new tile, so rules need not copy defensively.
    """
    if isinstance(x, np.ndarray) and x.shape == tuple(shape):
        return x
    return np.broadcast_to(x, shape)


# ----------------------------------------------------------------------------- unary
_SQRT2 = np.float32(np.sqrt(2.0))
_UNARY = {
    "abs": np.abs, "negative": np.negative, "sign": np.sign, "trunc": np.trunc,
    "floor": np.floor, "ceil": np.ceil, "exp": np.exp, "log": np.log, "cos": np.cos,
    "sin": np.sin, "tan": np.tan, "tanh": np.tanh, "arctan": np.arctan, "sqrt": np.sqrt,
    "rsqrt": lambda x: np.float32(1) / np.sqrt(x), "reciprocal": lambda x: np.float32(1) / x,
    "square": np.square, "sigmoid": lambda x: special.expit(x).astype(np.float32),
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "gelu": lambda x: (0.5 * x * (1 + special.erf(x / _SQRT2))).astype(np.float32),
    "gelu_dx": lambda x: (0.5 * (1 + special.erf(x / _SQRT2)) +
                          x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)).astype(np.float32),
    "gelu_apprx_tanh": lambda x: (0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                                         (x + 0.044715 * x ** 3)))
                                  ).astype(np.float32),
    "gelu_apprx_sigmoid": lambda x: (x * special.expit(1.702 * x)).astype(np.float32),
    "silu": lambda x: (x * special.expit(x)).astype(np.float32),
    "silu_dx": lambda x: (special.expit(x) * (1 + x * (1 - special.expit(x)))
                          ).astype(np.float32),
    "erf": lambda x: special.erf(x).astype(np.float32),
    "erf_dx": lambda x: (2 / np.sqrt(np.pi) * np.exp(-x * x)).astype(np.float32),
    "softplus": lambda x: np.logaddexp(np.float32(0), x),
    "mish": lambda x: x * np.tanh(np.logaddexp(np.float32(0), x)),
}
ALU = {}  # canonical ALU name -> float32 binary function (shared with nki.isa)


def _unary_rule(fn):
    def run(ex: Ex):
        x = f32(align(ex.ins[0], len(ex.out_shape)))
        if ex.out is not None and isinstance(fn, np.ufunc) and x.shape == ex.out.shape:
            return fn(x, out=ex.out)  # why: reusing the dead tile avoids a fresh allocation
        return _fresh(fn(x), ex.out_shape, ex.ins)
    return run


for _n, _f in _UNARY.items():
    RULES[_n] = _unary_rule(_f)


@rule("invert")
def _invert(ex):
    x = np.asarray(align(ex.ins[0], len(ex.out_shape)))
    return _fresh(~x if x.dtype.kind in "iub" else bits32(~_raw(x), x), ex.out_shape, ex.ins)


@rule("logical_not")
def _logical_not(ex):
    return _fresh(f32(align(ex.ins[0], len(ex.out_shape))) == 0, ex.out_shape, ex.ins)


# ----------------------------------------------------------------------------- binary
def _fmod(a, b):
    return np.fmod(a, b)


_ARITH = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "power": np.power, "maximum": np.maximum, "minimum": np.minimum, "mod": np.mod,
    "fmod": _fmod, "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
    "logical_and": lambda a, b: np.logical_and(a != 0, b != 0),
    "logical_or": lambda a, b: np.logical_or(a != 0, b != 0),
    "logical_xor": lambda a, b: np.logical_xor(a != 0, b != 0),
    "abs": lambda a, b: np.abs(a), "rsqrt": lambda a, b: np.float32(1) / np.sqrt(a),
    "reciprocal": lambda a, b: np.float32(1) / a,
}


def _shift_right(a, b):
    # why: NKI's right_shift is logical: shift the unsigned bit pattern of the 32-bit value
    return (a.astype(np.int64) & 0xFFFFFFFF) >> b


_BITVEC = {
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": _shift_right,
}
ALU.update(_ARITH)


def bits32(r, *operands):
    """A bitvec result as the 32-bit ALU leaves it (int64 values a store keeps as they are).

    Wrapped mod 2**32, and read as uint32 when an operand is uint32, else as int32.
    """
    w = np.asarray(r, dtype=np.int64) & 0xFFFFFFFF
    if any(np.asarray(o).dtype == np.uint32 for o in operands):
        return w
    return w - ((w >> 31) << 32)


def binary(op, a, b):
    """Apply ALU op ``op`` to two values with the engines' numerics (fp32 or raw bits)."""
    if op in _BITVEC:
        # why: numpy computes in int64; the engines' shifts drop the bits past 32
        return bits32(_BITVEC[op](_raw(a), _raw(b)), a, b)
    return _ARITH[op](f32(a), f32(b))  # (the interpreter runs under np.errstate(all="ignore"))


_COMPARE = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
            "logical_and", "logical_or", "logical_xor"}


def _binary_rule(op):
    fn = _ARITH.get(op)
    reuse = isinstance(fn, np.ufunc) and op not in _COMPARE

    def run(ex: Ex):
        nd = len(ex.out_shape)
        a, b = align(ex.ins[0], nd), align(ex.ins[1], nd)
        if reuse and ex.out is not None:
            # why: computing into the dead tile avoids a fresh allocation (~10x on big tiles)
            return fn(f32(a), f32(b), out=ex.out)
        return _fresh(binary(op, a, b), ex.out_shape, ex.ins)
    return run


for _n in list(_ARITH) + list(_BITVEC):
    if _n not in ("abs", "rsqrt", "reciprocal"):
        RULES[_n] = _binary_rule(_n)


@rule("where")
def _where(ex):
    c, x, y = (align(v, len(ex.out_shape)) for v in ex.ins)
    return _fresh(np.where(f32(c) != 0, f32(x), f32(y)), ex.out_shape, ex.ins)


# ----------------------------------------------------------------------------- copies, fills
@rule("copy", "load", "store", "broadcast_to", "load_transpose2d", "loop_reduce")
def _copy(ex):
    x = ex.ins[0]
    if ex.inst.op == "broadcast_to":
        x = np.asarray(x)
        while x.ndim > len(ex.out_shape) and x.shape[-1] == 1:
            x = x[..., 0]  # why: trailing unit dims hold no elements (NKI ignores them)
        x = align(x, len(ex.out_shape))
    if ex.inst.op == "load_transpose2d":
        x = np.asarray(x).T
    if isinstance(x, np.ndarray) and x.shape != tuple(ex.out_shape):
        if x.size == int(np.prod(ex.out_shape)) and not _broadcastable(x.shape, ex.out_shape):
            x = x.reshape(ex.out_shape)  # why: NKI matches elements per partition, not shapes
        else:
            x = align(x, len(ex.out_shape))
    if ex.out is not None and isinstance(x, np.ndarray) and x.dtype == ex.out.dtype:
        np.copyto(ex.out, np.broadcast_to(x, ex.out.shape))
        return ex.out
    return _fresh(x, ex.out_shape, ex.ins)


def _broadcastable(a, b):
    try:
        return np.broadcast_shapes(a, b) == tuple(b)
    except ValueError:
        return False


@rule("memset")
def _memset(ex):
    return np.full(ex.out_shape, ex.ins[0], dtype=np.float32 if isinstance(ex.ins[0], float)
                   else np.asarray(ex.ins[0]).dtype if not isinstance(ex.ins[0], bool)
                   else np.bool_)


@rule("rand")
def _rand(ex):
    return ex.state.rng.random(ex.out_shape, dtype=np.float32)


@rule("random_seed")
def _random_seed(ex):
    seed = int(np.asarray(ex.ins[0]).reshape(-1)[0])
    ex.state.reseed(seed)
    return None


@rule("dropout")
def _dropout(ex):
    x, rate = (align(v, len(ex.out_shape)) for v in ex.ins)
    rate = f32(rate)
    keep = ex.state.rng.random(ex.out_shape, dtype=np.float32) >= rate
    x = np.asarray(x)
    if x.dtype.kind in "iu":
        return np.where(keep, x, 0).astype(x.dtype)
    return np.where(keep, f32(x), np.float32(0))


# ----------------------------------------------------------------------------- reductions
_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean,
           "all": None, "var": np.var}
_IDENT = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf, "all": 1.0}


def _reduce_rule(op):
    def run(ex: Ex):
        axes = tuple(ex.attrs["axis"])
        keep = ex.attrs.get("keepdims", False)
        x = f32(ex.ins[0])
        sel = None
        if ex.mask is not None:
            sel = np.broadcast_to(ex.mask, x.shape)
            ex.out_sel = np.any(sel, axis=axes, keepdims=keep)
        with np.errstate(all="ignore"):
            if op == "all":
                v = x != 0
                if sel is not None:
                    v = v | ~sel
                return np.all(v, axis=axes, keepdims=keep)
            if op in ("mean", "var"):
                w = None if sel is None else sel.astype(np.float32)
                if w is None:
                    return np.asarray(_REDUCE[op](x, axis=axes, keepdims=keep), np.float32)
                n = np.maximum(w.sum(axis=axes, keepdims=True), 1)
                m = (np.where(sel, x, 0).sum(axis=axes, keepdims=True)) / n
                if op == "mean":
                    r = m
                else:
                    r = (np.where(sel, (x - m) ** 2, 0).sum(axis=axes, keepdims=True)) / n
                return np.asarray(r if keep else np.squeeze(r, axis=axes), np.float32)
            if sel is not None:
                x = np.where(sel, x, np.float32(_IDENT[op]))
            return np.asarray(_REDUCE[op](x, axis=axes, keepdims=keep), dtype=np.float32)
    return run


for _n in _REDUCE:
    RULES[_n] = _reduce_rule(_n)


# ----------------------------------------------------------------------------- TensorE
@rule("matmul")
def _matmul(ex):
    x, y = f32(ex.ins[0]), f32(ex.ins[1])
    stationary = x if ex.attrs.get("transpose_x") else x.T
    if ex.attrs.get("acc") == "add":
        # why: the product is only added into PSUM; a reused scratch avoids a fresh allocation
        shape = (stationary.shape[1], y.shape[1])
        scratch = ex.state.regs.get(("matmul_scratch", shape))
        if scratch is None:
            scratch = ex.state.regs[("matmul_scratch", shape)] = np.empty(shape, np.float32)
        return np.matmul(stationary.T, y, out=scratch)
    return np.matmul(stationary.T, y)


@rule("transpose")
def _transpose(ex):
    return np.array(np.asarray(ex.ins[0]).T)


# ----------------------------------------------------------------------------- composites
@rule("softmax")
def _softmax(ex):
    axes = tuple(ex.attrs["axis"])
    x = f32(ex.ins[0])
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=axes, keepdims=True))
        return e / np.sum(e, axis=axes, keepdims=True)


@rule("rms_norm")
def _rms_norm(ex):
    axes = tuple(ex.attrs["axis"])
    x, w = f32(ex.ins[0]), f32(align(ex.ins[1], len(ex.out_shape)))
    ms = np.sum(x * x, axis=axes, keepdims=True) / np.float32(ex.attrs["n"])
    return x / np.sqrt(ms + np.float32(ex.attrs["epsilon"])) * w


@rule("gather_flattened")
def _gather_flattened(ex):
    data, idx = np.asarray(ex.ins[0]), np.asarray(ex.ins[1])
    p = data.shape[0]
    flat = data.reshape(p, -1)
    ii = idx.reshape(p, -1).astype(np.int64)
    # why: NKI leaves out-of-range gathers undefined; we clip them and never read outside
    ii = np.clip(ii, 0, flat.shape[1] - 1)
    return np.take_along_axis(flat, ii, axis=1).reshape(idx.shape)


@rule("device_print")
def _device_print(ex):
    prefix = ex.attrs.get("prefix", "")
    value = np.asarray(ex.ins[0])
    if ex.mask is not None:
        value = np.where(np.broadcast_to(ex.mask, value.shape), D.to_f32(value)
                         if value.dtype.kind not in "biu" else value, np.nan)
    with np.printoptions(threshold=1 << 20):
        print(prefix, value if value.dtype.kind in "biuf" else D.to_f32(value), flush=True)
    return None


@rule("atomic_rmw")
def _atomic_rmw(ex):
    # the interpreter applies atomic_rmw itself (it needs the destination); see interp
    raise NkiError(None, "internal: atomic_rmw is executed by the interpreter")
