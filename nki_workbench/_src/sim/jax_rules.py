"""The compiled simulator's JAX rule table (numerics per opcode) and its memory accesses.

Every rule here mirrors the numpy rule of the same opcode in :mod:`.rules` (same widening to
float32, same formula, same shapes); :mod:`.jax_exec` lowers the IR through this table. An
opcode without a rule here makes the compiled backend hand that kernel to the interpreter.

Bit-exactness with numpy, and where it cannot hold:

* XLA's CPU backend contracts ``a * b + c`` into a fused multiply-add and rewrites
  ``x / broadcast(s)`` as ``x * (1 / s)``; numpy rounds every step. :func:`opaque` (an integer
  OR with a run-time zero that no compiler can see through) is applied to every float32
  instruction result, and divisors are hidden behind an optimisation barrier, so element-wise
  arithmetic is bit-identical.
* XLA's CPU runtime flushes float32 subnormals (|x| < 1.18e-38) to zero; numpy keeps them.
  Results differ only where such values occur.
* Transcendentals (exp, log, tanh, sigmoid, erf, power ...) use XLA's polynomial kernels
  instead of numpy's: a few float32 ulps apart (measured: exp 2, log 3, tanh 4, rsqrt 0).
* Reductions (sum, mean, var, prod) and matmul sum in a different order than numpy/BLAS;
  ``psum += matmul`` over a vectorised loop is one dot over all iterations
  (:mod:`.jax_vector`), another float32 summation order again: within one bf16 ulp of the
  interpreter once rounded to bf16, a few float32 ulps of the largest output in float32.
* Division keeps its own rounding, under ``vmap`` too: :func:`div` keeps every divisor behind
  a barrier (batching an unbatched one first, ``custom_vmap``), else XLA rewrites ``x / y``
  into ``x * (1 / y)`` wherever it sees ``y`` is one repeated value.

:class:`JaxAccess` reads and writes one IR access: (dynamic) slices when the lowering proves
the indices in range, checked gathers/scatters (returning an out-of-range flag) otherwise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy import special as jsp

from .. import dtypes as D
from ..ir import Access
from ..ir import expr as E
from .access import CompiledAccess
from .interp import _CROSS_LANE, _LANEWISE

__all__ = ["JAX_RULES", "JEx", "Unsupported", "jrule", "opaque", "to_f32", "from_f32", "cast",
           "binary", "storage", "JaxAccess", "is_traced", "xp", "fits", "fit", "lanewise",
           "np_mod", "div", "taint_lanes", "taint_rows", "ROWWISE_OPS"]

JAX_RULES: dict = {}
_F32 = np.dtype(np.float32)


class Unsupported(Exception):  # noqa: N818 - a signal, not an error shown to users
    """Lowering met something the compiled backend does not cover (the kernel is interpreted)."""


class JEx:
    """What a JAX rule sees: the instruction, traced input values, mask and a run-time zero."""

    __slots__ = ("inst", "ins", "mask", "out_shapes", "out_sel", "attrs", "zero")

    def __init__(self, inst, ins, mask, out_shapes, zero):
        self.inst = inst
        self.ins = ins
        self.mask = mask
        self.out_shapes = out_shapes
        self.out_sel = None
        self.attrs = dict(inst.attrs)
        self.zero = zero

    @property
    def out_shape(self):
        """Shape of the first output."""
        return self.out_shapes[0]


def jrule(*names):
    """Register a JAX rule for opcodes ``names``."""
    def deco(fn):
        for n in names:
            JAX_RULES[n] = fn
        return fn
    return deco


# ----------------------------------------------------------------------------- dtypes
def storage(name: str) -> np.dtype:
    """Array dtype holding NKI dtype ``name`` (the interpreter's storage dtype)."""
    return np.dtype(D.storage_dtype(D.from_name(name)))


def opaque(x, zero):
    """``x`` unchanged, but opaque to XLA's float rewrites (no FMA contraction through it)."""
    if x.dtype != _F32:
        return x
    bits = lax.bitcast_convert_type(x, jnp.int32)
    return lax.bitcast_convert_type(bits | zero, jnp.float32)


def to_f32(x):
    """Widen to float32 (exact for every NKI float; ints round to nearest like numpy)."""
    x = jnp.asarray(x)
    return x if x.dtype == _F32 else x.astype(jnp.float32)


def _fp8_narrow(x, dt):
    # why: the same (bits above the rounding position, sticky) table as dtypes.from_f32, so the
    # rounding is ml_dtypes' bit for bit
    mbits = 3 if dt == D.float8_e4m3 else 2
    table = jnp.asarray(D._narrow_table(dt, mbits))
    rp = 22 - mbits
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    key = (bits >> (rp - 1)) & jnp.uint32(0xFFFFFFFE)
    key = key | ((bits & jnp.uint32((1 << rp) - 1)) != 0).astype(jnp.uint32)
    return lax.bitcast_convert_type(jnp.take(table, key.astype(jnp.int32)), dt)


def _tf32_round(x):
    # why: RNE of the mantissa to 10 bits with canonical NaN, as dtypes._round_tf32
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    lsb = (bits >> 13) & jnp.uint32(1)
    rounded = (bits + jnp.uint32((1 << 12) - 1) + lsb) & jnp.uint32(0xFFFFE000)
    nan = (bits & jnp.uint32(0x80000000)) | jnp.uint32(0x7FC00000)
    return lax.bitcast_convert_type(jnp.where(jnp.isnan(x), nan, rounded), jnp.float32)


def _f32_to_int(t, st):
    # why: truncate toward zero like numpy's astype; int32/uint32 maxima are not float32
    # values, so the top of the range is clamped explicitly instead of left to the convert
    t = jnp.trunc(t)
    info = np.iinfo(st)
    lo, hi = np.float32(info.min), np.float32(info.max)
    if int(hi) > info.max:
        below = np.nextafter(hi, np.float32(0))
        return jnp.where(t >= hi, st.type(info.max), jnp.clip(t, lo, below).astype(st))
    return jnp.clip(t, lo, hi).astype(st)


def from_f32(x, name: str):
    """Narrow a float32 value to NKI dtype ``name`` (``dtypes.from_f32``)."""
    st = storage(name)
    x = jnp.asarray(x)
    if x.dtype != _F32:
        return cast(x, name)
    if name == "float32":
        return x
    if name in ("float8_e4m3", "float8_e5m2"):
        return _fp8_narrow(x, st)
    if name == "tfloat32":
        return _tf32_round(x)
    if st.kind in "iu":
        return _f32_to_int(x, st)
    return x.astype(st)


def cast(x, name: str):
    """Convert to NKI dtype ``name`` with the hardware rules of ``dtypes.cast``."""
    st = storage(name)
    x = jnp.asarray(x)
    spec_family = "bool" if st.kind == "b" else "int" if st.kind in "iu" else "float"
    if x.dtype.kind == "b":
        x = x.astype(jnp.uint8)
    if x.dtype.kind in "iu":
        if spec_family == "float":
            return from_f32(x.astype(jnp.float32), name)
        if spec_family == "bool":
            return x != 0
        src = np.iinfo(x.dtype)
        info = np.iinfo(st)
        lo, hi = max(src.min, info.min), min(src.max, info.max)
        return jnp.clip(x, x.dtype.type(lo), x.dtype.type(hi)).astype(st)
    w = to_f32(x)
    if spec_family == "bool":
        return w != 0
    if spec_family == "int":
        return _f32_to_int(jnp.where(jnp.isnan(w), np.float32(0), w), st)
    return from_f32(w, name)


# ----------------------------------------------------------------------------- helpers
def f32(x):
    """Widen an operand (array or 0-d constant) to float32."""
    return to_f32(x)


def align(x, ndim):
    """Unit free dims on the right for values with fewer dims (tile broadcasting)."""
    if 0 < x.ndim < ndim:
        return x.reshape(x.shape + (1,) * (ndim - x.ndim))
    return x


def _fresh(x, shape):
    return x if x.shape == tuple(shape) else jnp.broadcast_to(x, shape)


def div(a, b, zero):
    """``a / b`` rounded once, never rewritten into a multiplication by a reciprocal."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    shape = jnp.broadcast_shapes(a.shape, b.shape)
    # why: XLA rewrites x / y into x * (1 / y) whenever it sees y is one repeated value (a
    # broadcast, a memset tile, through element-wise ops too); a barrier hides what y is
    b = lax.optimization_barrier(jnp.broadcast_to(b, shape))
    return _divide(jnp.broadcast_to(a, shape), b)


@jax.custom_batching.custom_vmap
def _divide(a, b):
    return a / b


@_divide.def_vmap
def _divide_batched(axis_size, in_batched, a, b):
    # why: vmap would broadcast an unbatched divisor after the barrier, and XLA rewrites
    # x / broadcast(y): batch the operands here, the divisor behind a barrier again
    if not in_batched[0]:
        a = jnp.broadcast_to(a, (axis_size, *a.shape))
    if not in_batched[1]:
        b = lax.optimization_barrier(jnp.broadcast_to(b, (axis_size, *b.shape)))
    return _divide(a, b), True


def np_mod(a, b, zero):
    """Float ``mod`` as numpy computes it (npy_divmod): fmod moved to the divisor's sign."""
    r = jnp.fmod(a, b)
    r = jnp.where((r != 0) & ((r < 0) != (b < 0)), opaque(r + b, zero), r)
    return jnp.where(r == 0, jnp.copysign(np.float32(0), b), r)


def _raw(x):
    x = jnp.asarray(x)
    if x.dtype.kind == "b":
        return x.astype(jnp.int32)
    if x.dtype.kind in "iu":
        return x
    return cast(x, "int32")


# ----------------------------------------------------------------------------- unary
_SQRT2 = np.float32(np.sqrt(2.0))
_UNARY = {
    "abs": lambda x, z: jnp.abs(x), "negative": lambda x, z: -x,
    "sign": lambda x, z: jnp.sign(x), "trunc": lambda x, z: jnp.trunc(x),
    "floor": lambda x, z: jnp.floor(x), "ceil": lambda x, z: jnp.ceil(x),
    "exp": lambda x, z: jnp.exp(x), "log": lambda x, z: jnp.log(x),
    "cos": lambda x, z: jnp.cos(x), "sin": lambda x, z: jnp.sin(x),
    "tan": lambda x, z: jnp.tan(x), "tanh": lambda x, z: jnp.tanh(x),
    "arctan": lambda x, z: jnp.arctan(x), "sqrt": lambda x, z: jnp.sqrt(x),
    "rsqrt": lambda x, z: div(np.float32(1), opaque(jnp.sqrt(x), z), z),
    "reciprocal": lambda x, z: div(np.float32(1), x, z),
    "square": lambda x, z: x * x,
    "sigmoid": lambda x, z: jsp.expit(x),
    "relu": lambda x, z: jnp.maximum(x, np.float32(0)),
    "gelu": lambda x, z: 0.5 * x * (1 + jsp.erf(div(x, _SQRT2, z))),
    "gelu_dx": lambda x, z: (0.5 * (1 + jsp.erf(div(x, _SQRT2, z))) +
                             x * jnp.exp(-0.5 * x * x) / np.float32(np.sqrt(2 * np.pi))),
    "gelu_apprx_tanh": lambda x, z: 0.5 * x * (1 + jnp.tanh(np.float32(np.sqrt(2 / np.pi)) *
                                                            (x + 0.044715 * x ** 3))),
    "gelu_apprx_sigmoid": lambda x, z: x * jsp.expit(1.702 * x),
    "silu": lambda x, z: x * jsp.expit(x),
    "silu_dx": lambda x, z: jsp.expit(x) * (1 + x * (1 - jsp.expit(x))),
    "erf": lambda x, z: jsp.erf(x),
    "erf_dx": lambda x, z: np.float32(2 / np.sqrt(np.pi)) * jnp.exp(-x * x),
    "softplus": lambda x, z: jnp.logaddexp(np.float32(0), x),
    "mish": lambda x, z: x * jnp.tanh(jnp.logaddexp(np.float32(0), x)),
}


def _unary_rule(fn):
    def run(ex: JEx):
        x = f32(align(ex.ins[0], len(ex.out_shape)))
        return _fresh(fn(x, ex.zero).astype(jnp.float32), ex.out_shape)
    return run


for _n, _f in _UNARY.items():
    JAX_RULES[_n] = _unary_rule(_f)


@jrule("invert")
def _invert(ex):
    x = align(ex.ins[0], len(ex.out_shape))
    return _fresh(~x if x.dtype.kind in "iub" else ~_raw(x), ex.out_shape)


@jrule("logical_not")
def _logical_not(ex):
    return _fresh(f32(align(ex.ins[0], len(ex.out_shape))) == 0, ex.out_shape)


# ----------------------------------------------------------------------------- binary
_ARITH = {
    "add": jnp.add, "subtract": jnp.subtract, "multiply": jnp.multiply,
    "divide": None, "power": jnp.power, "maximum": jnp.maximum, "minimum": jnp.minimum,
    "mod": jnp.mod, "fmod": jnp.fmod, "equal": jnp.equal, "not_equal": jnp.not_equal,
    "greater": jnp.greater, "greater_equal": jnp.greater_equal, "less": jnp.less,
    "less_equal": jnp.less_equal,
    "logical_and": lambda a, b: jnp.logical_and(a != 0, b != 0),
    "logical_or": lambda a, b: jnp.logical_or(a != 0, b != 0),
    "logical_xor": lambda a, b: jnp.logical_xor(a != 0, b != 0),
}
_BITVEC = {"bitwise_and": jnp.bitwise_and, "bitwise_or": jnp.bitwise_or,
           "bitwise_xor": jnp.bitwise_xor}


def binary(op, a, b, zero):
    """ALU op ``op`` with the engines' numerics (float32, or raw integers for bitvec ops)."""
    if op in _BITVEC:
        ra, rb = _raw(a), _raw(b)
        if ra.dtype != rb.dtype:
            # why: numpy works in int64 here; mixed 32-bit types would need 64-bit integers
            raise Unsupported(f"'{op}' on mixed integer types {ra.dtype}/{rb.dtype}")
        return _BITVEC[op](ra, rb)
    if op not in _ARITH:
        raise Unsupported(f"ALU op '{op}'")
    fa, fb = f32(a), f32(b)
    if op == "divide":
        return div(fa, fb, zero)
    if op == "mod":
        return np_mod(fa, fb, zero)
    return _ARITH[op](fa, fb)


def _binary_rule(op):
    def run(ex: JEx):
        nd = len(ex.out_shape)
        return _fresh(binary(op, align(ex.ins[0], nd), align(ex.ins[1], nd), ex.zero),
                      ex.out_shape)
    return run


for _n in list(_ARITH) + list(_BITVEC):
    JAX_RULES[_n] = _binary_rule(_n)


@jrule("where")
def _where(ex):
    c, x, y = (align(v, len(ex.out_shape)) for v in ex.ins)
    return _fresh(jnp.where(f32(c) != 0, f32(x), f32(y)), ex.out_shape)


# ----------------------------------------------------------------------------- copies, fills
@jrule("copy", "load", "store", "broadcast_to", "load_transpose2d", "loop_reduce")
def _copy(ex):
    x = ex.ins[0]
    if ex.inst.op == "broadcast_to":
        while x.ndim > len(ex.out_shape) and x.shape[-1] == 1:
            x = x[..., 0]  # why: trailing unit dims hold no elements (as the numpy rule)
        x = align(x, len(ex.out_shape))
    if ex.inst.op == "load_transpose2d":
        x = x.T
    shape = tuple(ex.out_shape)
    if x.shape != shape:
        if x.size == int(np.prod(shape)) and not _broadcastable(x.shape, shape):
            x = x.reshape(shape)  # why: NKI matches elements per partition, not shapes
        else:
            x = align(x, len(shape))
    return _fresh(x, shape)


def _broadcastable(a, b):
    try:
        return np.broadcast_shapes(a, b) == tuple(b)
    except ValueError:
        return False


@jrule("memset")
def _memset(ex):
    return jnp.broadcast_to(ex.ins[0], ex.out_shape)


# ----------------------------------------------------------------------------- reductions
_REDUCE = {"sum": jnp.sum, "prod": jnp.prod, "max": jnp.max, "min": jnp.min}
_IDENT = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}


def _mean_var(op, x, sel, axes, keep, zero):
    # why: numpy's mean is sum / n and var is mean((x - mean)**2): same steps, one rounding each
    w = jnp.ones(x.shape, jnp.float32) if sel is None else sel.astype(jnp.float32)
    xs = x if sel is None else jnp.where(sel, x, np.float32(0))
    if sel is None:
        n = jnp.full((1,) * x.ndim, np.float32(np.prod([x.shape[a] for a in axes])))
    else:
        n = jnp.maximum(w.sum(axis=axes, keepdims=True), np.float32(1))
    m = div(xs.sum(axis=axes, keepdims=True), n, zero)
    if op == "mean":
        r = m
    else:
        d = x - m
        sq = opaque(d * d, zero)
        if sel is not None:
            sq = jnp.where(sel, sq, np.float32(0))
        r = div(sq.sum(axis=axes, keepdims=True), n, zero)
    return r if keep else jnp.squeeze(r, axis=axes)


def _reduce_rule(op):
    def run(ex: JEx):
        axes = tuple(ex.attrs["axis"])
        keep = ex.attrs.get("keepdims", False)
        x = f32(ex.ins[0])
        sel = None
        if ex.mask is not None:
            sel = jnp.broadcast_to(ex.mask, x.shape)
            ex.out_sel = jnp.any(sel, axis=axes, keepdims=keep)
        if op == "all":
            v = x != 0
            if sel is not None:
                v = v | ~sel
            return jnp.all(v, axis=axes, keepdims=keep)
        if op in ("mean", "var"):
            return _mean_var(op, x, sel, axes, keep, ex.zero)
        if sel is not None:
            x = jnp.where(sel, x, np.float32(_IDENT[op]))
        return _REDUCE[op](x, axis=axes, keepdims=keep).astype(jnp.float32)
    return run


for _n in ("sum", "prod", "max", "min", "mean", "all", "var"):
    JAX_RULES[_n] = _reduce_rule(_n)


# ----------------------------------------------------------------------------- TensorE
@jrule("matmul")
def _matmul(ex):
    x, y = f32(ex.ins[0]), f32(ex.ins[1])
    lhs = x.T if ex.attrs.get("transpose_x") else x
    # why: full fp32 products and sums everywhere (GPUs would otherwise use TF32)
    return jnp.matmul(lhs, y, precision=lax.Precision.HIGHEST,
                      preferred_element_type=jnp.float32)


@jrule("transpose")
def _transpose(ex):
    return ex.ins[0].T


# ----------------------------------------------------------------------------- composites
@jrule("softmax")
def _softmax(ex):
    axes = tuple(ex.attrs["axis"])
    x = f32(ex.ins[0])
    e = jnp.exp(x - jnp.max(x, axis=axes, keepdims=True))
    return div(e, jnp.sum(e, axis=axes, keepdims=True), ex.zero)


@jrule("rms_norm")
def _rms_norm(ex):
    axes = tuple(ex.attrs["axis"])
    x, w = f32(ex.ins[0]), f32(align(ex.ins[1], len(ex.out_shape)))
    ms = div(jnp.sum(opaque(x * x, ex.zero), axis=axes, keepdims=True),
             np.float32(ex.attrs["n"]), ex.zero)
    root = jnp.sqrt(opaque(ms + np.float32(ex.attrs["epsilon"]), ex.zero))
    return opaque(div(x, root, ex.zero), ex.zero) * w


@jrule("gather_flattened")
def _gather_flattened(ex):
    data, idx = ex.ins[0], ex.ins[1]
    p = data.shape[0]
    flat = data.reshape(p, -1)
    ii = jnp.clip(_raw(idx).reshape(p, -1), 0, flat.shape[1] - 1)
    return jnp.take_along_axis(flat, ii, axis=1).reshape(idx.shape)


# ----------------------------------------------------------------------------- memory access
def is_traced(x) -> bool:
    """Whether ``x`` is a JAX value (not a Python/numpy constant known at lowering)."""
    return not isinstance(x, (int, np.integer, np.ndarray, np.bool_, bool))


def xp(*xs):
    """``jax.numpy`` when any argument is a JAX value, else ``numpy``."""
    if any(is_traced(x) for x in xs):
        import jax.numpy as jnp
        return jnp
    return np


# ----------------------------------------------------------------------------- written-masks
def lanewise(inst) -> bool:
    """Whether each output element depends only on the same element of the inputs."""
    from ..ir import OPCODES
    return inst.op in _LANEWISE or (
        inst.op in OPCODES and OPCODES[inst.op].family in ("unary", "binary", "fill")
        and inst.op not in _CROSS_LANE)


# why: reductions whose result row is unwritten exactly when an input row is
ROWWISE_OPS = {op: True for op in ("sum", "prod", "max", "min", "mean", "all", "var",
                                    "softmax", "rms_norm")}


def taint_rows(inst, taints, shape):
    """Written-mask of a reduction's result: a row is written when all its inputs were."""
    axes = tuple(inst.attr("axis"))
    keep = bool(inst.attr("keepdims", False)) or inst.op in ("softmax", "rms_norm")
    t = taints[0]
    for other in taints[1:]:
        if fits(other.shape, t.shape):
            t = t & jnp.broadcast_to(other, t.shape)
        else:
            t = t & jnp.all(other)
    row = jnp.all(t, axis=axes, keepdims=keep) if t.ndim > max(axes) else t
    return jnp.broadcast_to(row, shape) if keep else row.reshape(shape)


def taint_lanes(taints, shape):
    """Written-mask of a lane-wise result: the AND of the inputs' masks."""
    out = jnp.ones(shape, bool)
    for t in taints:
        if 0 < t.ndim < len(shape):
            t = t.reshape(t.shape + (1,) * (len(shape) - t.ndim))
        out = out & (jnp.broadcast_to(t, shape) if fits(t.shape, shape) else jnp.all(t))
    return out


# ----------------------------------------------------------------------------- accesses
class JaxAccess:
    """One IR access lowered to slices (proven in range) or checked gathers/scatters."""

    def __init__(self, acc: Access, decl_shape, loc):
        self.ca = CompiledAccess(acc, decl_shape, loc)
        self.size = int(np.prod(self.ca.shape)) if self.ca.shape else 1

    def in_range(self, ranges) -> bool:
        """Whether every index stays inside the tensor for every value the loop vars take."""
        ca = self.ca
        if ca.whole:
            return True
        if ca.has_dyn:
            return False
        for e, n in zip(ca.exprs, ca.decl_shape, strict=False):
            try:
                lo, hi = E.bounds(e, ranges)
            except (ValueError, KeyError):
                return False
            if lo < 0 or hi >= n:
                return False
        return True

    def _region(self, env):
        """Per dim: (low index, span, stride, reversed, kept)."""
        out = []
        for c, vars_, size, k in self.ca.dims:
            start = c
            for v, kv in vars_:
                start = start + kv * env[v]
            if size is None:
                out.append((start, 1, 1, False, False))
            elif k > 0:
                out.append((start, k * (size - 1) + 1, k, False, True))
            else:
                out.append((start + k * (size - 1), -k * (size - 1) + 1, -k, True, True))
        return out

    def _slice(self, data, env):
        from jax import lax
        reg = self._region(env)
        los = [r[0] for r in reg]
        spans = [r[1] for r in reg]
        if any(is_traced(lo) for lo in los):
            import jax.numpy as jnp
            v = lax.dynamic_slice(data, [jnp.asarray(lo, jnp.int32) for lo in los], spans)
            if any(r[2] != 1 for r in reg):
                v = lax.slice(v, [0] * len(reg), spans, [r[2] for r in reg])
        else:
            v = lax.slice(data, los, [lo + s for lo, s in zip(los, spans, strict=False)],
                          [r[2] for r in reg])
        rev = tuple(d for d, r in enumerate(reg) if r[3])
        if rev:
            v = lax.rev(v, rev)
        return v, reg

    def _to_region(self, x, reg, grid_shaped):
        """A value (access-shaped) or mask (grid-shaped) in the sliced region's layout."""
        import jax.numpy as jnp
        ca = self.ca
        x = jnp.broadcast_to(x, ca.grid if grid_shaped else ca.shape).reshape(ca.sorted_shape)
        if ca.inv_perm is not None:
            x = x.transpose(ca.inv_perm)
        return x.reshape([(r[1] - 1) // r[2] + 1 for r in reg])

    def read(self, data, lw, sel=None, fill=0):
        """``(value, bad)``: ``bad`` is a bool (or traced bool) of an out-of-range read."""
        ca = self.ca
        if ca.whole:
            return (data if data.shape == ca.shape else data.reshape(ca.shape)), False
        if ca.fast and self.in_range(lw.ranges):
            v, reg = self._slice(data, lw.env)
            v = v.reshape([(r[1] - 1) // r[2] + 1 for r in reg if r[4]])
            if ca.perm is not None:
                v = v.transpose(ca.perm)
            return v.reshape(ca.shape), False
        return self._gather(data, lw, sel, fill)

    def _index_arrays(self, lw):
        ca = self.ca
        xs = [lw.eval(e) for e in ca.exprs]
        lib = xp(*xs)
        if lib is np:
            return [np.broadcast_to(np.asarray(a, np.int64), ca.grid) for a in xs]
        return [lib.broadcast_to(lib.asarray(a, lib.int32), ca.grid) for a in xs]

    def _inb(self, arrs):
        lib = xp(*arrs)
        ok = None
        for a, n in zip(arrs, self.ca.decl_shape, strict=False):
            t = (a >= 0) & (a < n)
            ok = t if ok is None else ok & t
        return lib, ok

    def _gather(self, data, lw, sel, fill):
        import jax.numpy as jnp
        ca = self.ca
        arrs = self._index_arrays(lw)
        if not arrs:
            return data.reshape(ca.shape), False
        if self.in_range(lw.ranges):
            return data[tuple(arrs)].reshape(ca.shape), False
        lib, inb = self._inb(arrs)
        clipped = tuple(lib.clip(a, 0, n - 1) for a, n in zip(arrs, ca.decl_shape, strict=False))
        v = data[clipped]
        if sel is None:
            return v.reshape(ca.shape), ~lib.all(inb)
        bad = lib.any(~inb & sel)
        masked = jnp.where(sel, v, jnp.asarray(fill, v.dtype))
        v = jnp.where(lib.all(inb), v, masked)
        return v.reshape(ca.shape), bad

    def static_block(self, value, lw):
        """``(starts, block)`` of a write of one in-range, unit-stride block at static offsets.

        ``block`` is ``value`` laid out as that block; ``None`` for any other write.
        """
        ca = self.ca
        if ca.whole:
            return (0,) * len(ca.decl_shape), jnp.broadcast_to(value, ca.shape).reshape(
                ca.decl_shape)
        if not ca.fast or not self.in_range(lw.ranges):
            return None
        reg = self._region(lw.env)
        if any(is_traced(r[0]) or r[2] != 1 or r[3] for r in reg):
            return None
        return tuple(int(r[0]) for r in reg), self._to_region(value, reg, False)

    def write(self, data, value, lw, sel=None):
        """``(new data, bad)`` with ``value`` stored where ``sel`` (grid-shaped) holds."""
        import jax.numpy as jnp
        from jax import lax
        ca = self.ca
        value = jnp.asarray(value).astype(data.dtype)
        if ca.whole and sel is None:
            return jnp.broadcast_to(value, ca.shape).reshape(data.shape), False
        if ca.fast and self.in_range(lw.ranges) and all(abs(d[3]) <= 1 for d in ca.dims):
            reg = self._region(lw.env)
            val = self._to_region(value, reg, False)
            if sel is not None:
                old, _ = self._slice(data, lw.env)
                val = jnp.where(self._to_region(sel, reg, True), val, old.reshape(val.shape))
            rev = tuple(d for d, r in enumerate(reg) if r[3])
            if rev:
                val = lax.rev(val, rev)
            los = [r[0] for r in reg]
            if any(is_traced(lo) for lo in los):
                los = [jnp.asarray(lo, jnp.int32) for lo in los]
            return lax.dynamic_update_slice(data, val, los), False
        arrs = self._index_arrays(lw)
        val = jnp.broadcast_to(value, ca.shape).reshape(ca.grid)
        static = self.in_range(lw.ranges)
        if static and sel is None:
            return data.at[tuple(arrs)].set(val), False
        lib, inb = self._inb(arrs)
        keep = inb if sel is None else (inb & sel)
        bad = (~lib.all(inb)) if sel is None else lib.any(~inb & sel)
        if static:
            bad = False
        idx = tuple(jnp.where(keep, a, n) for a, n in zip(arrs, ca.decl_shape, strict=False))
        return data.at[idx].set(val, mode="drop"), bad


def fits(a, b) -> bool:
    """Whether shape ``a`` broadcasts to shape ``b``."""
    try:
        return np.broadcast_shapes(tuple(a), tuple(b)) == tuple(b)
    except ValueError:
        return False


def fit(sel, grid):
    """A mask broadcast to an access grid (``None`` when it does not broadcast)."""
    if not fits(np.shape(sel), grid):
        return None
    lib = xp(sel)
    return lib.broadcast_to(sel, grid)

from . import jax_isa as _jax_isa  # noqa: E402,F401  (registers the nki.isa rules)
