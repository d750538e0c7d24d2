"""The numerics protocol: the few primitives every value rule is written over.

A value rule (``semantics/nl.py``, ``semantics/isa*.py``) says what an opcode computes, once, as
``fn(P, ex) -> value``; ``P`` is a :class:`Numerics` object and ``ex`` a :class:`Ex`. Two
instances exist:

* :data:`NUMPY` — the interpreter's (``xp = numpy``); every primitive is plain numpy.
* ``semantics.jax_numerics()`` — the compiled lowering's (:mod:`.numerics_jax`,
  ``xp = jax.numpy``), built on first use so numpy-only runs never import jax. It is bound to
  the lowering's run-time int32 zero, which :meth:`Numerics.fence` needs
  (``jax_numerics(zero)``; the unbound instance fences with an optimisation barrier instead).

The primitives that fix numerics across both executors:

* ``f32 / cast / from_f32``: NKI dtype conversion (one spec: ``dtypes.cast`` on numpy, the same
  rules on JAX values, proven equal bit for bit by ``tests/sim/test_semantics_numerics.py``).
* ``fence``: each float32 step rounds on its own (no FMA contraction, no reassociation).
* ``div``: one correctly rounded division (never ``x * (1 / y)``); ``mod``: numpy's float mod.
* ``reduce / sum``: the ONE reduction order — float32 sums in numpy's own pairwise order
  (:mod:`.summation`), other products and sums a fixed pairwise tree (see :meth:`reduce`).
* ``alu``: the ONE ALU table (float32 arithmetic, compares, logic, 32-bit bitvec patterns).
* ``matmul``: float32 products and accumulation.
* ``unsupported / concrete``: where a rule needs a Python value of data (warnings, errors), the
  compiled backend gives the kernel to the interpreter; numpy just runs.
"""

from __future__ import annotations

import numpy as np
from scipy import special as _sp_special

from .. import dtypes as D
from ..platform import tile_matmul
from .summation import native_matches, native_sum, pairwise_sum

__all__ = ["Numerics", "NUMPY", "Unsupported", "Ex", "value_rule",
           "VALUE_RULES", "ALU_OPS", "BITVEC_OPS", "COMPARE_OPS", "REDUCE_IDENTITY"]

_F32 = np.dtype(np.float32)
_U32 = np.dtype(np.uint32)
_I32 = np.dtype(np.int32)


class Unsupported(Exception):  # noqa: N818 - a signal, not an error shown to users
    """A rule or lowering met something the compiled backend does not cover.

    Raised while lowering; the compiled backend then runs the kernel in the interpreter (and
    emits :class:`~nki_workbench.CompiledFallbackWarning`).
    """


# ----------------------------------------------------------------------------- rule table
VALUE_RULES: dict = {}
"""opcode -> ``fn(P, ex)``: the one value rule of every opcode both executors run."""


def value_rule(*names):
    """Register ``fn(P, ex) -> value`` as the value rule of opcodes ``names``.

    A name registered twice is an error (every opcode has exactly one rule).
    """
    def deco(fn):
        for n in names:
            if n in VALUE_RULES and VALUE_RULES[n] is not fn:
                raise ValueError(f"opcode {n!r} has two value rules")
            VALUE_RULES[n] = fn
        return fn
    return deco


class Ex:
    """What a value rule sees (one class for both executors).

    Attributes:
        inst: the IR instruction.
        ins: input values (numpy arrays / scalars, or JAX values), one per operand.
        mask: the instruction's mask (bool array broadcastable to the outputs) or ``None``.
        state: the executor's services (the interpreter's state: ``rng``, ``reseed``, ``regs``);
            ``None`` under the compiled lowering (rules needing it call ``P.unsupported``).
        out_shapes: shape of each output access.
        attrs: the instruction's attributes (a dict).
        out_sel: set by a rule whose result mask differs from ``mask`` (reductions).
        out: numpy only: a dead float32 tile of the output's shape the rule may compute into.
    """

    __slots__ = ("inst", "ins", "mask", "state", "out_shapes", "out_sel", "attrs", "out")

    def __init__(self, inst, ins, mask, state, out_shapes, attrs=None):
        self.inst = inst
        self.ins = ins
        self.mask = mask
        self.state = state
        self.out_shapes = out_shapes
        self.out_sel = None
        self.attrs = dict(inst.attrs) if attrs is None else attrs
        self.out = None

    @property
    def out_shape(self):
        """Shape of the first output."""
        return self.out_shapes[0]

    def results(self, result, sel, n):
        """``(k, value, mask)`` of each output ``k < n`` the rule's ``result`` writes.

        A rule returns one value or a tuple (several destinations); ``None`` writes nothing.
        The mask is ``out_sel`` when the rule set one (a reduction's), else ``sel``.
        """
        values = result if isinstance(result, tuple) else (result,)
        mask = self.out_sel if self.out_sel is not None else sel
        return [(k, v, mask) for k, v in enumerate(values[:n]) if v is not None]

    def rng(self, shape):
        """Uniform float32 ``[0, 1)`` random numbers of ``shape``: the executor's generator.

        Raises:
            Unsupported: under the compiled lowering (random numbers are the interpreter's).
        """
        if self.state is None:
            raise Unsupported(f"'{self.inst.op}' draws random numbers (interpreter only)")
        return self.state.rng.random(shape, dtype=np.float32)

    def scratch(self, shape):
        """A reusable float32 buffer of ``shape`` (numpy), or ``None`` (compiled lowering).

        For results that are consumed at once (a product only added into PSUM).
        """
        if self.state is None:
            return None
        key = ("scratch", self.inst.op, tuple(shape))
        buf = self.state.regs.get(key)
        if buf is None:
            buf = self.state.regs[key] = np.empty(shape, np.float32)
        return buf


# ----------------------------------------------------------------------------- ALU facts
COMPARE_OPS = frozenset({"equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
                         "logical_and", "logical_or", "logical_xor"})
BITVEC_OPS = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
                        "right_shift"})
_FLOAT_OPS = frozenset({"add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
                        "mod", "fmod", "abs", "rsqrt", "reciprocal"})
ALU_OPS = COMPARE_OPS | BITVEC_OPS | _FLOAT_OPS
"""Every binary ALU operator :meth:`Numerics.alu` knows (``abs``/``rsqrt``/``reciprocal``
ignore their second operand, as nisa's ALU does)."""

REDUCE_IDENTITY = {"add": -0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}
"""Identity of each tree-reduced operator (``-0.0`` for add: ``-0.0 + x == x`` for every x)."""


# ----------------------------------------------------------------------------- protocol
class Numerics:
    """The primitives value rules compute with (see the module docstring).

    Attributes:
        name: ``"numpy"`` or ``"jax"``.
        xp: the array namespace (``numpy`` or ``jax.numpy``).
        special: erf/expit provider (``scipy.special`` or ``jax.scipy.special``).
    """

    name = "?"
    xp = np
    special = _sp_special

    # --- dtypes -------------------------------------------------------------------------
    def f32(self, x):
        """``x`` widened to float32 (exact for every NKI float)."""
        raise NotImplementedError

    def cast(self, x, name: str):
        """``x`` converted to NKI dtype ``name`` with the hardware rules of ``dtypes.cast``."""
        raise NotImplementedError

    def from_f32(self, x, name: str):
        """A float32 ``x`` narrowed to NKI dtype ``name`` (``dtypes.from_f32``)."""
        raise NotImplementedError

    @staticmethod
    def storage(name: str) -> np.dtype:
        """The array dtype holding NKI dtype ``name``."""
        return np.dtype(D.storage_dtype(D.from_name(name)))

    # --- float32 steps ------------------------------------------------------------------
    def fence(self, x):
        """``x`` unchanged; its rounding can not be fused with the next step's."""
        return x

    def div(self, a, b, out=None):
        """``a / b`` in float32, rounded once (``out``: numpy only, a buffer to write into)."""
        return np.divide(a, b) if out is None else np.divide(a, b, out=out)

    def mod(self, a, b, out=None):
        """Float mod with numpy's sign rule (the result takes the divisor's sign)."""
        return np.mod(a, b) if out is None else np.mod(a, b, out=out)

    def matmul(self, a, b, out=None):
        """``a @ b`` of float32 operands, float32 accumulation (``out``: numpy only)."""
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)

    def concrete(self, x):
        """``x`` as a numpy value (rules needing a Python decision on data)."""
        return np.asarray(x)

    def flagged(self, bad) -> bool:
        """Whether any element of ``bad`` (booleans) is set, for a rule that warns on its data.

        numpy answers it. The compiled executor answers ``False`` and records ``any(bad)`` as a
        run-time flag: set, the kernel re-runs in the interpreter, whose rule then warns with
        its exact message, so no warning is lost and none is invented.
        """
        return bool(np.any(bad))

    def unsupported(self, why: str):
        """Signal that a rule can not run on this executor (numpy runs everything)."""
        return None

    def into(self, ex, fn, *args):
        """``fn(*args)`` (an ``xp`` ufunc), written into ``ex.out`` when the executor gave one."""
        return fn(*args)

    def place(self, ex, x):
        """``x`` broadcast to the first output's shape (copied into ``ex.out`` when given)."""
        return self.fresh(x, ex.out_shape)

    # --- shapes -------------------------------------------------------------------------
    @staticmethod
    def align(x, ndim):
        """``x`` with unit dims on the right up to ``ndim`` dims (tile broadcasting).

        A ``[P, 1]`` operand so spans every free dim of the result.
        """
        nd = getattr(x, "ndim", 0)
        if 0 < nd < ndim:
            return x.reshape(x.shape + (1,) * (ndim - nd))
        return x

    def fresh(self, x, shape):
        """``x`` with exactly ``shape`` (a broadcast when it differs)."""
        if getattr(x, "shape", None) == tuple(shape):
            return x
        return self.xp.broadcast_to(x, shape)

    # --- the ALU ------------------------------------------------------------------------
    def bits(self, x):
        """The 32-bit pattern of a bitvec operand, as uint32 (floats cast to int32 first)."""
        xp = self.xp
        x = xp.asarray(x)
        if x.dtype == _U32:
            return x
        if x.dtype.kind == "b":
            return x.astype(xp.uint32)
        if x.dtype.kind not in "iu":
            x = self.cast(x, "int32")
        return self._wrap_u32(x)

    def _wrap_u32(self, x):
        # why: sign-extend to 32 bits then reinterpret (int64 constants: keep the low 32 bits)
        return x.astype(self.xp.uint32)

    def read32(self, pattern, *operands):
        """A 32-bit result pattern read as uint32 when an operand is uint32, else int32."""
        if any(getattr(o, "dtype", None) == _U32 for o in operands):
            return pattern
        return self._as_int32(pattern)

    def _as_int32(self, pattern):
        return np.asarray(pattern).view(np.int32)

    def alu(self, op: str, a, b, out=None):
        """One binary ALU operation with the engines' numerics.

        Float ops widen both operands to float32 and round once; comparisons and logical ops
        give bool; bitvec ops work on the 32-bit patterns (shifts: logical, counts outside
        ``[0, 32)`` give 0) and read as uint32 when an operand is uint32, else int32.

        Args:
            op: one of :data:`ALU_OPS`.
            a: first operand.
            b: second operand (ignored by ``abs``/``rsqrt``/``reciprocal``).
            out: numpy only: a float32 buffer a float op may write its result into.

        Returns:
            float32, bool, int32 or uint32 values.
        """
        xp = self.xp
        if op in BITVEC_OPS:
            ua, ub = self.bits(a), self.bits(b)
            if op in ("left_shift", "right_shift"):
                ok = ub < 32
                cnt = xp.where(ok, ub, xp.uint32(0))
                sh = (ua << cnt) if op == "left_shift" else (ua >> cnt)
                r = xp.where(ok, sh, xp.uint32(0))
            else:
                r = getattr(xp, op)(ua, ub)
            return self.read32(r, xp.asarray(a), xp.asarray(b))
        fa = self.f32(a)
        if op == "abs":
            return xp.abs(fa)
        if op == "rsqrt":
            return self.div(np.float32(1), self.fence(xp.sqrt(fa)))
        if op == "reciprocal":
            return self.div(np.float32(1), fa)
        fb = self.f32(b)
        if op in ("logical_and", "logical_or", "logical_xor"):
            return getattr(xp, op)(fa != 0, fb != 0)
        if op == "divide":
            return self.div(fa, fb, out=out)
        if op == "mod":
            return self.mod(fa, fb, out=out)
        if op not in ALU_OPS:
            raise Unsupported(f"ALU op '{op}'")
        if out is not None and op not in COMPARE_OPS:
            return getattr(xp, op)(fa, fb, out=out)
        return self.fence(getattr(xp, op)(fa, fb))

    # --- reductions ---------------------------------------------------------------------
    def reduce(self, op: str, x, axes, keepdims: bool = False):
        """Reduce ``x`` over ``axes`` with ALU operator ``op`` in the one documented order.

        The reduced axes are moved last (kept axes in order) and flattened in C order into one
        axis of extent n. A float32 ``add`` then sums along it in numpy's pairwise order
        (:func:`.summation.pairwise_sum`; the same bits as ``np.add.reduce`` on a contiguous
        row). Other ``add`` and ``multiply`` reductions combine along it as a fixed pairwise
        tree: with ``p`` the smallest power of two >= n (the missing elements being the
        identity, see :data:`REDUCE_IDENTITY`), element ``i < p/2`` becomes
        ``x[i] op x[i + p/2]``, each step rounded, until one element is left. The exact
        operators (max, min, logical, bitwise) are order-free and use ``xp``'s reduce.

        Args:
            op: ``add``, ``multiply``, ``maximum``, ``minimum``, ``logical_*`` or ``bitwise_*``.
            x: the values (already float32 for float ops).
            axes: the reduced axes (an int or a tuple).
            keepdims: keep reduced axes as unit dims.

        Returns:
            The reduced values.
        """
        xp = self.xp
        x = xp.asarray(x)
        axes = (axes,) if isinstance(axes, int) else tuple(axes)
        axes = tuple(a % x.ndim for a in axes) if x.ndim else ()
        if not axes:
            return x
        shape = x.shape
        out_shape = tuple(1 if d in axes else e for d, e in enumerate(shape)) if keepdims \
            else tuple(e for d, e in enumerate(shape) if d not in axes)
        if op not in ("add", "multiply"):
            return self._exact_reduce(op, x, axes).reshape(out_shape)
        keep = [d for d in range(x.ndim) if d not in axes]
        n = 1
        for d in axes:
            n *= shape[d]
        if keep != list(range(len(keep))):
            x = xp.transpose(x, keep + list(axes))
        x = x.reshape(tuple(shape[d] for d in keep) + (n,))
        if op == "add" and x.dtype == _F32:
            return self._sum(x, n).reshape(out_shape)
        return self._tree(op, x, n).reshape(out_shape)

    def sum(self, x, axes, keepdims: bool = False):
        """``reduce("add", ...)``: the one summation order."""
        return self.reduce("add", x, axes, keepdims)

    def _sum(self, x, n):
        # why: float32 sums follow numpy's pairwise order (summation.py), on every executor
        return pairwise_sum(self, x, n)

    def _tree(self, op, x, n):
        # why: the documented halving tree over the last axis (products, non-float32 sums)
        xp = self.xp
        fn = xp.add if op == "add" else xp.multiply
        if n == 0:
            return xp.full(x.shape[:-1], np.float32(0.0 if op == "add" else 1.0), x.dtype)
        p = 1 << (n - 1).bit_length()
        while p > 1:
            h = p // 2
            if n > h:
                head = self.fence(fn(x[..., : n - h], x[..., h:n]))
                x = head if n == p else xp.concatenate([head, x[..., n - h: h]], axis=-1)
            else:
                x = x[..., :n]
            n, p = h, h
        return x[..., 0]

    def _exact_reduce(self, op, x, axes):
        # why: max/min/logical/bitwise are exact, so any order gives the same result
        return getattr(np, op).reduce(x, axis=axes)


# ----------------------------------------------------------------------------- numpy
class _NumpyNumerics(Numerics):
    """The interpreter's numerics: plain numpy (runs under ``np.errstate(all="ignore")``)."""

    name = "numpy"
    xp = np
    special = _sp_special

    def f32(self, x):
        if isinstance(x, np.ndarray):
            if x.dtype is _F32:
                return x  # why: the hot case; to_f32 returns float32 input as is
            return D.to_f32(x)
        return np.float32(x)

    def cast(self, x, name):
        return D.cast(x, name)

    def from_f32(self, x, name):
        return D.from_f32(x, name)

    def matmul(self, a, b, out=None):
        # why: the same product; tile_matmul picks the BLAS threads (one unless measured faster)
        return tile_matmul(a, b, out)

    def into(self, ex, fn, *args):
        out = ex.out
        if out is not None and isinstance(fn, np.ufunc):
            try:
                return fn(*args, out=out)  # why: computing into the dead tile saves a malloc
            except (ValueError, TypeError):
                pass
        return fn(*args)

    def _wrap_u32(self, x):
        return np.asarray(x).astype(np.uint32)

    def place(self, ex, x):
        out = ex.out
        if out is not None and isinstance(x, np.ndarray) and x.dtype == out.dtype:
            np.copyto(out, x)  # why: reuse the dead tile (copyto broadcasts x itself)
            return out
        return self.fresh(x, ex.out_shape)

    def _sum(self, x, n):
        # why: numpy's own reduce is that order (checked once, native_matches) and 3x faster
        if n >= 8 and native_matches():
            return native_sum(x)
        return pairwise_sum(self, x, n)

    def _tree(self, op, x, n):
        # why: the same tree as Numerics._tree without the concatenate (fresh halves measured
        # faster than in-place halving: numpy buffers overlapping in/out operands)
        fn = np.add if op == "add" else np.multiply
        if n == 0:
            return np.full(x.shape[:-1], np.float32(0.0 if op == "add" else 1.0), x.dtype)
        if n == 1:
            return np.array(x[..., 0])
        h = 1 << (n - 1).bit_length() - 1
        if n == 2 * h:
            x = fn(x[..., :h], x[..., h:])
        else:
            head = np.array(x[..., :h])
            fn(head[..., : n - h], x[..., h:n], out=head[..., : n - h])
            x = head
        while h > 1:
            h //= 2
            x = fn(x[..., :h], x[..., h:])
        return x[..., 0]


NUMPY = _NumpyNumerics()
"""The interpreter's :class:`Numerics`."""
