"""Frontend index objects.

``nl.arange``, ``nl.mgrid``, ``nl.ds``, ``nl.par_dim`` and the symbolic integers that loop
variables and program ids are.

:class:`IndexExpr` wraps an IR expression and gives it Python operators, so kernels can write
``i * 128 + nl.arange(128)[:, None]`` and ``mask=(i_p < n) & (i_f < m)``.

Python control flow on a condition of loop variables (``if i * 128 >= j * 512:``) is evaluated
at trace time, as NKI does: decided outright when it has one value over every iteration, else
the loops it depends on are split into consecutive loops over which it is decided
(:func:`split_loops`); a Python int of a loop variable traces its loops unrolled
(:class:`~.context.UnrollLoops`) (docs/control_flow.md). Conditions on ``nl.arange``/``nl.mgrid``
indices or on tensor values are refused with NKI's error codes (use a mask or
``affine_select``).
"""

from __future__ import annotations

import dis
import functools
import sys

import numpy as np

from ..errors import NkiError, is_internal, user_location
from ..ir import expr as E
from . import context as C

__all__ = ["IndexExpr", "arange", "mgrid", "ds", "DynSlice", "par_dim", "ParDim", "MGrid",
           "as_index_expr"]


def _lift(x):
    if isinstance(x, IndexExpr):
        return x.expr
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return E.const(int(x))
    lift = getattr(type(x), "__nki_index__", None)
    if lift is not None:
        return lift(x)  # why: an SBUF tile in `offsets[0, i] + iy` is a run-time index
    return None


class IndexExpr:
    """A symbolic integer (or mask) in a kernel: loop variables, aranges and their arithmetic."""

    __slots__ = ("expr",)
    __array_priority__ = 1000  # why: numpy ints on the left must defer to our operators

    def __init__(self, expr):
        self.expr = expr

    # -- arithmetic
    def _bin(self, other, fn, reflected=False):
        o = _lift(other)
        if o is None:
            return NotImplemented
        a, b = (o, self.expr) if reflected else (self.expr, o)
        return IndexExpr(fn(a, b))

    def __add__(self, o):
        return self._bin(o, E.add)

    def __radd__(self, o):
        return self._bin(o, E.add, True)

    def __sub__(self, o):
        return self._bin(o, E.sub)

    def __rsub__(self, o):
        return self._bin(o, E.sub, True)

    def __mul__(self, o):
        return self._bin(o, E.mul)

    def __rmul__(self, o):
        return self._bin(o, E.mul, True)

    def __floordiv__(self, o):
        return self._bin(o, E.floordiv)

    def __rfloordiv__(self, o):
        return self._bin(o, E.floordiv, True)

    def __mod__(self, o):
        return self._bin(o, E.mod)

    def __rmod__(self, o):
        return self._bin(o, E.mod, True)

    def __neg__(self):
        return IndexExpr(E.neg(self.expr))

    def __pos__(self):
        return self

    # -- comparisons build mask predicates
    def _cmp(self, other, op):
        o = _lift(other)
        if o is None:
            return NotImplemented
        return IndexExpr(E.compare(op, self.expr, o))

    def __lt__(self, o):
        return self._cmp(o, "lt")

    def __le__(self, o):
        return self._cmp(o, "le")

    def __gt__(self, o):
        return self._cmp(o, "gt")

    def __ge__(self, o):
        return self._cmp(o, "ge")

    def __eq__(self, o):
        return self._cmp(o, "eq")

    def __ne__(self, o):
        return self._cmp(o, "ne")

    __hash__ = None

    def __and__(self, o):
        if isinstance(o, (bool, np.bool_)):
            return self if o else _constant_pred(False)  # why: kernels mix Python flags in
        if not isinstance(o, IndexExpr):
            return NotImplemented
        return IndexExpr(E.land(self.expr, o.expr))

    __rand__ = __and__

    def __or__(self, o):
        if isinstance(o, (bool, np.bool_)):
            return _constant_pred(True) if o else self
        if not isinstance(o, IndexExpr):
            return NotImplemented
        return IndexExpr(E.lor(self.expr, o.expr))

    __ror__ = __or__

    def __invert__(self):
        return IndexExpr(E.lnot(self.expr))

    # -- shape manipulation: nl.arange(n)[:, None]
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        ios = E.iotas(self.expr)
        ndim = max((io.ndim for io in ios), default=0)
        colons = [k for k, item in enumerate(key) if isinstance(item, slice)]
        if any(item is not None and not (isinstance(item, slice) and item == slice(None))
               for item in key):
            raise NkiError(None, f"an index expression can only be re-shaped with ':' and None, "
                           f"got {key!r}", user_location(),
                           "write nl.arange(n)[:, None] or nl.arange(n)[None, :]")
        if len(colons) != ndim:
            raise NkiError(None, f"index expression has {ndim} axes but the subscript {key!r} "
                           f"keeps {len(colons)}", user_location())
        new_ndim = len(key)
        mapping = {io: E.as_expr(E.Iota(io.size, colons[io.axis], new_ndim)) for io in ios}
        return IndexExpr(E.substitute(self.expr, mapping))

    def __setitem__(self, key, value):
        raise NkiError("err_cannot_assign_to_index",
                       f"cannot assign into the index expression '{E.to_str(self.expr)}'",
                       user_location(), "index tensors are read-only; materialise them as a "
                       "tile with nisa.iota(expr, dtype) first")

    @property
    def shape(self) -> tuple:
        """Broadcast shape of the index grid (``()`` for a scalar such as a loop variable)."""
        return E.grid_shape([self.expr])

    @property
    def ndim(self) -> int:
        """Number of grid axes."""
        return len(self.shape)

    # -- Python control flow on symbols: evaluated at trace time
    def __bool__(self):
        ctx = C.current()
        if ctx is not None and not E.iotas(self.expr) and not E.dyns(self.expr):
            pred = self.expr if isinstance(self.expr, E.Pred) else E.compare("ne", self.expr, 0)
            decided = _decide(ctx, pred)
            if decided is None:
                decided = split_loops(ctx, pred)
            if decided is not None:
                return decided
        if isinstance(self.expr, E.Pred) and _held_for_and(self.expr):
            return True  # why: `p and q` as a value: q is the mask, combined with p when used
        if E.iotas(self.expr):
            raise NkiError("err_control_flow_condition_depending_on_arange",
                           "a Python condition depends on nl.arange/nl.mgrid indices",
                           user_location(), "use mask=(...) on the API call, or nisa.affine_select")
        pred = self.expr if isinstance(self.expr, E.Pred) else E.compare("ne", self.expr, 0)
        if ctx is not None and not E.dyns(pred):
            names = E.free_vars(pred)
            loops = [lp for lp in ctx.loops if lp["var"] in names and lp.get("key")]
            if loops and {lp["var"] for lp in loops} == set(names):
                raise C.UnrollLoops(lp["key"] for lp in loops)
        raise NkiError("err_dynamic_control_flow_not_supported",
                       f"a Python condition depends on the symbolic value "
                       f"'{E.to_str(self.expr)}' (a loop variable or program id)",
                       user_location(),
                       "use a mask (mask=(i < n)) or nisa.affine_select instead of 'if'; "
                       "nl.static_range unrolls loops if you need a Python int")

    def _int(self):
        c = E.const_value(self.expr) if not isinstance(self.expr, E.Pred) else None
        if c is None and not E.iotas(self.expr) and not E.dyns(self.expr):
            # why: as for `if`, a Python int of a loop variable is that iteration's value:
            # the loops it names are traced unrolled (int(i), range(i), a list indexed by i)
            ctx = C.current()
            names = E.free_vars(self.expr)
            loops = [] if ctx is None else [lp for lp in ctx.loops
                                             if lp["var"] in names and lp.get("key")]
            if loops and {lp["var"] for lp in loops} == set(names):
                raise C.UnrollLoops(lp["key"] for lp in loops)
        if c is None:
            raise NkiError("err_dynamic_control_flow_not_supported",
                           f"'{E.to_str(self.expr)}' is symbolic and has no Python int value",
                           user_location(),
                           "use it in index expressions, nl.ds or masks; nl.static_range gives "
                           "Python ints")
        return c

    def __index__(self):
        return self._int()

    def __int__(self):
        return self._int()

    def __repr__(self):
        return f"IndexExpr({E.to_str(self.expr)})"


@functools.lru_cache(maxsize=1024)
def _and_jumps(code) -> frozenset:
    """Offsets of the jumps that Python's ``and`` operator compiles to in ``code``."""
    ins = list(dis.get_instructions(code))
    out = {i.offset for i in ins if i.opname == "JUMP_IF_FALSE_OR_POP"}  # 3.11
    for a, b, c in zip(ins, ins[1:], ins[2:], strict=False):  # 3.12+: COPY 1; (TO_BOOL;) POP_JUMP
        if a.opname == "COPY" and a.arg == 1:
            jump = b if b.opname.startswith("POP_JUMP") else c
            if jump.opname in ("POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE"):
                out.add(jump.offset)
    return frozenset(out)


def _held_for_and(expr) -> bool:
    """Whether the kernel line is evaluating ``expr and ...`` (not an ``if``): hold ``expr``."""
    ctx = C.current()
    frame = sys._getframe(2)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    if ctx is None or frame is None or frame.f_lasti not in _and_jumps(frame.f_code):
        return False
    ctx.pending_and.append((id(frame), frame.f_code, expr))
    return True


def take_pending_and(expr):
    """``expr`` combined with the left operands of a Python ``and`` held on this kernel line."""
    ctx = C.current()
    if ctx is None or not ctx.pending_and:
        return expr
    frame = sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    key = (id(frame), getattr(frame, "f_code", None))
    mine = [p for f, c, p in ctx.pending_and if (f, c) == key]
    ctx.pending_and[:] = [x for x in ctx.pending_and if (x[0], x[1]) != key]
    for p in reversed(mine):
        expr = E.land(p, expr)
    return expr


def _constant_pred(value: bool) -> IndexExpr:
    return IndexExpr(E.compare("eq" if value else "ne", E.const(0), E.const(0)))


_DECIDE_LIMIT = 1 << 16  # why: beyond this many iteration tuples, unrolling is cheaper to try


def _decide(ctx, pred):
    """``True``/``False`` when ``pred`` has that value in every iteration, else ``None``."""
    ranges = {lp["var"]: lp["range"] for lp in ctx.loops}
    for axis, size in enumerate(ctx.grid):
        ranges.setdefault(f"pid{axis}", range(size))
    names = sorted(E.free_vars(pred))
    if any(n not in ranges for n in names):
        return None
    if int(np.prod([len(ranges[n]) for n in names])) > _DECIDE_LIMIT:
        return None
    grids = np.meshgrid(*[np.asarray(ranges[n], dtype=np.int64) for n in names],
                        indexing="ij") if names else []
    value = np.asarray(E.evaluate(pred, dict(zip(names, grids, strict=True))))
    if value.size == 0:
        return None
    if value.all():
        return True
    if not value.any():
        return False
    return None


def split_loops(ctx, pred):
    """Decide ``pred`` for the loop iterations being traced by splitting loop ranges.

    The loops named by ``pred`` are cut (``TraceContext.split_loop``) until ``pred`` has one
    value over what is left of their ranges; the cut-off iterations are traced afterwards as
    further loops, where the condition is decided again. The innermost loop is cut first, at
    the longest run of its values over which ``pred`` is constant for every value of the
    other loops; when no loop has such a run, the outermost loop is narrowed to one
    iteration. A triangular ``if 128 * i_q + 127 >= 512 * i_k:`` over 16 x 64 iterations
    becomes 31 loops instead of 1024 unrolled bodies. ``None`` when a name is not a loop
    being traced (a program id) or the iteration space is too large to enumerate.
    """
    names = sorted(E.free_vars(pred))
    loops = {lp["var"]: lp for lp in ctx.loops}
    if not names or any(n not in loops or not loops[n].get("key") for n in names):
        return None
    order = [lp for lp in ctx.loops if lp["var"] in names]  # outermost first
    while True:
        ranges = [loops[n]["range"] for n in names]
        if int(np.prod([len(r) for r in ranges])) > _DECIDE_LIMIT or not all(ranges):
            return None
        grids = np.meshgrid(*[np.asarray(r, dtype=np.int64) for r in ranges], indexing="ij")
        value = np.broadcast_to(np.asarray(E.evaluate(pred, dict(zip(names, grids,
                                                                    strict=True)))),
                                grids[0].shape)
        if value.all() or not value.any():
            return bool(value.flat[0])
        for lp in reversed(order):
            n = len(lp["range"])
            if n < 2:
                continue
            rows = np.moveaxis(value, names.index(lp["var"]), 0).reshape(n, -1)
            same = (rows == rows[0, 0]).all(axis=1)  # constant, and equal to the first value
            keep = int(np.argmin(same))  # the first row that differs (n > 1 rows, not all same)
            if keep:
                ctx.split_loop(lp, keep)
                break
        else:
            ctx.split_loop(next(lp for lp in order if len(lp["range"]) > 1), 1)


def as_index_expr(x):
    """The IR expression of an int / IndexExpr (``None`` for anything else)."""
    return _lift(x)


def arange(*args) -> IndexExpr:
    """``nl.arange(stop)`` / ``nl.arange(start, stop[, step])``: a 1-D index vector.

    Reshape it with ``[:, None]`` / ``[None, :]`` before indexing a tensor.

    Returns:
        IndexExpr: the symbolic index vector.
    """
    r = range(*[int(a) for a in args])
    if len(r) == 0:
        raise NkiError(None, f"nl.arange{args} is empty", user_location())
    return IndexExpr(E.add(E.mul(E.Iota(len(r), 0, 1), r.step), r.start))


class MGrid(tuple):
    """The index grids of ``nl.mgrid[...]``: a tuple that also has ``.p .x .y .z`` attributes."""

    __slots__ = ()

    def __getattr__(self, name):
        pos = {"p": 0, "x": 1, "y": 2, "z": 3}.get(name)
        if pos is None or pos >= len(self):
            raise AttributeError(name)
        return self[pos]


class _MGridMaker:
    """``nl.mgrid[0:128, 0:512]`` → broadcastable index grids, like ``numpy.mgrid``."""

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        out = []
        for axis, s in enumerate(key):
            if not isinstance(s, slice) or isinstance(s.step, complex):
                raise NkiError(None, f"nl.mgrid takes slices start:stop[:step], got {s!r}",
                               user_location())
            r = range(s.start or 0, s.stop, s.step or 1)
            io = E.Iota(len(r), axis, len(key))
            out.append(IndexExpr(E.add(E.mul(io, r.step), r.start)))
        return MGrid(out)


mgrid = _MGridMaker()


class DynSlice:
    """``nl.ds(start, size)``: the slice ``start:start+size`` where ``start`` may be symbolic."""

    __slots__ = ("start", "size")

    def __init__(self, start, size):
        self.start = start
        self.size = int(size)

    def __repr__(self):
        return f"ds({self.start!r}, {self.size})"


def ds(start, size) -> DynSlice:
    """Dynamic slice ``start:start+size`` (``start`` may depend on loop variables).

    Args:
        start: int or index expression.
        size: number of elements.

    Returns:
        DynSlice: usable in a subscript.
    """
    if _lift(start) is None:
        raise NkiError(None, f"nl.ds start must be an int or index expression, got {start!r}",
                       user_location())
    return DynSlice(start, size)


class ParDim(int):
    """An int marking the partition dimension inside a shape (``nl.par_dim(128)``)."""

    def __repr__(self):
        return f"par_dim({int(self)})"


def par_dim(n) -> ParDim:
    """Mark ``n`` as the partition dimension of a tensor shape.

    Args:
        n: size of the partition dimension.

    Returns:
        ParDim: an int that remembers it is the partition dim.
    """
    return ParDim(int(n))
