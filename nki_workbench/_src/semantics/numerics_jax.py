"""The JAX instance of the numerics protocol (imported only by the compiled backend).

Bit-exactness with the numpy instance, and where it cannot hold:

* XLA's CPU backend contracts ``a * b + c`` into a fused multiply-add and rewrites
  ``x / broadcast(s)`` as ``x * (1 / s)``; numpy rounds every step. :meth:`JaxNumerics.fence`
  (an integer OR with a run-time zero no compiler can see through) is applied to every float32
  result, and divisors are hidden behind an optimisation barrier (:meth:`JaxNumerics.div`, under
  ``vmap`` too), so element-wise arithmetic is bit-identical.
* XLA's CPU runtime flushes float32 subnormals (|x| < 1.18e-38) to zero; numpy keeps them
  (inputs holding them run in the interpreter: ``jax_static.subnormal_input``; docs/semantics.md).
  With :data:`CHECK_FLUSHES` on, under :func:`watching_flags`, each float32 ``add``,
  ``subtract``, ``multiply`` and ``divide`` of :meth:`JaxNumerics.alu` also records whether a
  result was flushed (:func:`_flushed`), which the compiled executor turns into its
  re-run-in-the-interpreter flag.
* Transcendentals (exp, log, tanh, erf, power ...) use XLA's kernels: a few float32 ulps apart.
* matmul: XLA's dot sums in another order than BLAS.
* Reductions follow the one order of :meth:`.Numerics.reduce` on both: bit-identical.
"""

from __future__ import annotations

import contextlib
import os
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy import special as jsp

from .. import dtypes as D
from .numerics import Numerics, Unsupported

__all__ = ["JaxNumerics", "is_traced", "watching_flags", "note_flush"]

_F32 = np.dtype(np.float32)
_WATCH = threading.local()
_FLUSHABLE = frozenset({"add", "subtract", "multiply", "divide"})


CHECK_FLUSHES = os.environ.get("NKI_WORKBENCH_CHECK_SUBNORMALS", "") not in ("", "0")
"""Whether compiled programs check for flushed subnormal results (``False``, the default: such
results are 0, unseen). On (``NKI_WORKBENCH_CHECK_SUBNORMALS=1``, or set this before a kernel's
first compiled run), a flushed result makes the interpreter re-run the kernel, so results keep
their subnormals; it costs 1.5-3x on element-wise compiled kernels (measured, docs/semantics.md)."""


@contextlib.contextmanager
def watching_flags():
    """Collect the run-time flags of the rules lowered inside (a list of boolean scalars).

    A flag set at run time makes the compiled executor re-run the kernel in the interpreter.
    Flags come from :meth:`JaxNumerics.flagged` (a rule's data check that warns, e.g. the
    activation valid ranges) and, with :data:`CHECK_FLUSHES` on, from flushed subnormal results.
    """
    prev = getattr(_WATCH, "flags", None)
    _WATCH.flags = flags = []
    try:
        yield flags
    finally:
        _WATCH.flags = prev


def note_flush(flag):
    """Add ``flag`` to the flags being collected (nothing when no one is watching)."""
    flags = getattr(_WATCH, "flags", None)
    if flags is not None:
        flags.append(flag)


def _flushed(op, a, b, r):
    """Whether ``r = a op b`` (float32) is 0 where the exact result is not: a flushed subnormal.

    An exact sum or difference of two float32 values below 2^-126 is a multiple of 2^-149, so a
    subnormal: ``a + b == 0`` with ``a != -b`` happens only by flushing. A product or quotient of
    nonzero finite values rounds to 0 only below 2^-150 (numpy gives 0 too: a needless re-run).
    """
    z = r == 0
    if op == "add":
        return jnp.any(z & (a != -b))
    if op == "subtract":
        return jnp.any(z & (a != b))
    if op == "multiply":
        return jnp.any(z & (a != 0) & (b != 0) & jnp.isfinite(a) & jnp.isfinite(b))
    return jnp.any(z & (a != 0) & jnp.isfinite(b) & (b != 0))


def is_traced(x) -> bool:
    """Whether ``x`` is a JAX value (not a Python/numpy constant known at lowering)."""
    return not isinstance(x, (int, np.integer, np.ndarray, np.bool_, bool))


class JaxNumerics(Numerics):
    """The compiled lowering's numerics, bound to a run-time int32 zero (or ``None``)."""

    name = "jax"
    xp = jnp
    special = jsp

    def __init__(self, zero):
        self.zero = zero

    def alu(self, op: str, a, b, out=None):
        """:meth:`.Numerics.alu`, noting flushed subnormal results (:func:`watching_flags`)."""
        r = super().alu(op, a, b, out)
        if CHECK_FLUSHES and op in _FLUSHABLE and getattr(_WATCH, "flags", None) is not None \
                and getattr(r, "dtype", None) == _F32 and is_traced(r):
            note_flush(_flushed(op, self.f32(a), self.f32(b), r))
        return r

    def flagged(self, bad):
        """:meth:`.Numerics.flagged`: ``False`` now, ``any(bad)`` a run-time flag.

        Set, the flag re-runs the kernel in the interpreter, where the rule warns with its
        exact message; outside an instruction's lowering the rule cannot compile.
        """
        if getattr(_WATCH, "flags", None) is None:
            self.unsupported("a data check outside a compiled instruction")
        _WATCH.flags.append(jnp.any(jnp.asarray(bad)))
        return False

    # --- dtypes -------------------------------------------------------------------------
    def f32(self, x):
        x = jnp.asarray(x)
        return x if x.dtype == _F32 else x.astype(jnp.float32)

    def from_f32(self, x, name):
        st = self.storage(name)
        x = jnp.asarray(x)
        if x.dtype != _F32:
            return self.cast(x, name)
        if name == "float32":
            return x
        if name in ("float8_e4m3", "float8_e5m2"):
            return _fp8_narrow(x, st)
        if name == "tfloat32":
            return _tf32_round(x)
        if st.kind in "iu":
            return _f32_to_int(x, st)
        return x.astype(st)

    def cast(self, x, name):
        st = self.storage(name)
        x = jnp.asarray(x)
        family = "bool" if st.kind == "b" else "int" if st.kind in "iu" else "float"
        if x.dtype.kind == "b":
            x = x.astype(jnp.uint8)
        if x.dtype.kind in "iu":
            if family == "float":
                return self.from_f32(x.astype(jnp.float32), name)
            if family == "bool":
                return x != 0
            src, info = np.iinfo(x.dtype), np.iinfo(st)
            lo, hi = max(src.min, info.min), min(src.max, info.max)
            return jnp.clip(x, x.dtype.type(lo), x.dtype.type(hi)).astype(st)
        w = self.f32(x)
        if family == "bool":
            return w != 0
        if family == "int":
            return _f32_to_int(jnp.where(jnp.isnan(w), np.float32(0), w), st)
        return self.from_f32(w, name)

    # --- float32 steps ------------------------------------------------------------------
    def fence(self, x):
        x = jnp.asarray(x)
        if x.dtype != _F32:
            return x
        if self.zero is None:
            return lax.optimization_barrier(x)
        bits = lax.bitcast_convert_type(x, jnp.int32)
        return lax.bitcast_convert_type(bits | self.zero, jnp.float32)

    def div(self, a, b, out=None):
        a, b = jnp.asarray(a), jnp.asarray(b)
        shape = jnp.broadcast_shapes(a.shape, b.shape)
        # why: XLA rewrites x / y into x * (1 / y) whenever it sees y is one repeated value (a
        # broadcast, a memset tile, through element-wise ops too); a barrier hides what y is
        b = lax.optimization_barrier(jnp.broadcast_to(b, shape))
        return _divide(jnp.broadcast_to(a, shape), b)

    def mod(self, a, b, out=None):
        # why: npy_divmod: fmod moved to the divisor's sign, a zero takes the divisor's sign
        r = jnp.fmod(a, b)
        r = jnp.where((r != 0) & ((r < 0) != (b < 0)), self.fence(r + b), r)
        return jnp.where(r == 0, jnp.copysign(np.float32(0), b), r)

    def matmul(self, a, b, out=None):
        # why: full fp32 products and sums everywhere (GPUs would otherwise use TF32)
        return jnp.matmul(a, b, precision=lax.Precision.HIGHEST,
                          preferred_element_type=jnp.float32)

    def concrete(self, x):
        if is_traced(x):
            raise Unsupported("a rule needs a concrete value of run-time data")
        return np.asarray(x)

    def unsupported(self, why):
        raise Unsupported(why)

    # --- the ALU ------------------------------------------------------------------------
    def _wrap_u32(self, x):
        x = jnp.asarray(x)
        if x.dtype.itemsize < 4:
            x = x.astype(jnp.int32 if x.dtype.kind == "i" else jnp.uint32)
        return lax.bitcast_convert_type(x, jnp.uint32) if x.dtype == np.int32 else \
            x.astype(jnp.uint32)

    def _as_int32(self, pattern):
        return lax.bitcast_convert_type(pattern, jnp.int32)

    def _exact_reduce(self, op, x, axes):
        # why: max/min/logical/bitwise are exact, so any order gives the same result
        if op == "maximum":
            return jnp.max(x, axis=axes)
        if op == "minimum":
            return jnp.min(x, axis=axes)
        if op in ("logical_and", "logical_or", "logical_xor"):
            v = x != 0
            if op == "logical_and":
                return jnp.all(v, axis=axes)
            if op == "logical_or":
                return jnp.any(v, axis=axes)
            return (jnp.sum(v.astype(jnp.int32), axis=axes) % 2) == 1
        comb = {"bitwise_and": lax.bitwise_and, "bitwise_or": lax.bitwise_or,
                "bitwise_xor": lax.bitwise_xor}.get(op)
        if comb is None:
            raise Unsupported(f"reduction by '{op}'")
        init = np.asarray(-1 if op == "bitwise_and" else 0).astype(x.dtype)[()]  # (uint32: ~0)
        return lax.reduce(x, init, comb, tuple(axes))


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


def _fp8_narrow(x, dt):
    # why: the same (bits above the rounding position, sticky) table as dtypes.from_f32, so the
    # rounding is ml_dtypes' bit for bit
    mbits = 3 if dt == D.float8_e4m3 else 2
    table = jnp.asarray(D.narrow_table(dt, mbits))
    rp = 22 - mbits
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    key = (bits >> (rp - 1)) & jnp.uint32(0xFFFFFFFE)
    key = key | ((bits & jnp.uint32((1 << rp) - 1)) != 0).astype(jnp.uint32)
    return lax.bitcast_convert_type(jnp.take(table, key.astype(jnp.int32)), dt)


def _tf32_round(x):
    # why: RNE of the mantissa to 10 bits with canonical NaN, as dtype_casts._round_tf32
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    lsb = (bits >> 13) & jnp.uint32(1)
    rounded = (bits + jnp.uint32((1 << 12) - 1) + lsb) & jnp.uint32(0xFFFFE000)
    nan = (bits & jnp.uint32(0x80000000)) | jnp.uint32(0x7FC00000)
    return lax.bitcast_convert_type(jnp.where(jnp.isnan(x), nan, rounded), jnp.float32)


def _f32_to_int(t, st):
    # why: truncate toward zero like dtypes.cast; int32/uint32 maxima are not float32 values,
    # so the top of the range is clamped explicitly instead of left to the convert
    t = jnp.trunc(t)
    info = np.iinfo(st)
    lo, hi = np.float32(info.min), np.float32(info.max)
    if int(hi) > info.max:
        below = np.nextafter(hi, np.float32(0))
        return jnp.where(t >= hi, st.type(info.max), jnp.clip(t, lo, below).astype(st))
    return jnp.clip(t, lo, hi).astype(st)
