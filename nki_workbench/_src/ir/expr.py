"""IR index expressions: affine forms over loop variables, program ids and positional iotas.

An index expression is what a kernel writes inside a subscript or a mask: ``i * 128 +
nl.arange(128)[:, None]``. It is kept symbolic so that loops stay loops:

* :class:`Var` — a loop variable or a program id (a scalar integer known only at run time);
* :class:`Iota` — the positional index grid ``0..size-1`` along ``axis`` of an ``ndim``-D grid
  (what ``nl.arange(size)[:, None]`` denotes); two iotas with the same axis denote the same grid
  axis, which is how masks line up with the operands they guard;
* :class:`Affine` — ``const + sum(coef * atom)`` in a canonical (sorted, merged) form;
* :class:`Fn` — the non-affine operations kernels use on indices (``//``, ``%``, products,
  ``min``/``max``); an ``Fn`` can be an atom of an ``Affine``;
* :class:`Pred` — comparisons and their ``& | ~`` combinations, the language of masks.

All nodes are frozen and structurally comparable; arithmetic lives in the module functions
below, never in ``__eq__`` (the frontend wraps these nodes in objects with operator overloads).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

__all__ = ["Var", "Iota", "Dyn", "Affine", "Fn", "Pred", "Expr", "const", "as_expr", "add", "mul",
           "neg",
           "sub", "floordiv", "mod", "compare", "land", "lor", "lnot", "free_vars", "iotas", "dyns",
           "grid_shape", "is_affine", "evaluate", "bounds", "substitute", "to_str", "const_value",
           "align_iotas"]


@dataclass(frozen=True, slots=True)
class Var:
    """A scalar symbol: a loop variable or a program id."""

    name: str


@dataclass(frozen=True, slots=True)
class Iota:
    """Index grid ``0..size-1`` along ``axis`` of an ``ndim``-D grid (a reshaped ``nl.arange``)."""

    size: int
    axis: int
    ndim: int

    @property
    def shape(self) -> tuple[int, ...]:
        """Broadcast shape: ``size`` at ``axis``, 1 elsewhere."""
        return tuple(self.size if d == self.axis else 1 for d in range(self.ndim))


@dataclass(frozen=True, slots=True)
class Fn:
    """A non-affine integer operation: ``floordiv``, ``mod``, ``mul``, ``min``, ``max``."""

    op: str
    args: tuple


@dataclass(frozen=True, slots=True)
class Dyn:
    """A run-time index read from an SBUF tile (indirect addressing): ``t[idx_tile[i_p, 0], i_f]``.

    ``index`` is the per-dimension index of ``tensor`` (``None`` = whole); ``shape`` its grid.
    """

    tensor: str
    index: tuple | None
    shape: tuple


@dataclass(frozen=True, slots=True)
class Affine:
    """``const + sum(coef * atom for atom, coef in terms)``, terms sorted and merged."""

    terms: tuple
    const: int = 0


@dataclass(frozen=True, slots=True)
class Pred:
    """A predicate: comparison (``lt le gt ge eq ne``) or logic (``and or not``)."""

    op: str
    args: tuple


Atom = Var | Iota | Fn | Dyn
Expr = Affine | Pred

_CMP = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
        "eq": operator.eq, "ne": operator.ne}
_CMP_SYM = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_FNS = {"floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "mul": lambda a, b: a * b,
        "min": np.minimum, "max": np.maximum}


def _atom_key(atom) -> tuple:
    # why: a total order on atoms makes the affine normal form unique (structural equality works).
    if isinstance(atom, Var):
        return (0, atom.name)
    if isinstance(atom, Iota):
        return (1, atom.ndim, atom.axis, atom.size)
    if isinstance(atom, Dyn):
        return (3, to_str(atom))
    return (2, to_str(atom))


def _affine(terms: dict, c: int) -> Affine:
    items = sorted(((a, k) for a, k in terms.items() if k != 0), key=lambda t: _atom_key(t[0]))
    return Affine(tuple(items), int(c))


def const(c: int) -> Affine:
    """The constant expression ``c``."""
    return Affine((), int(c))


def as_expr(x) -> Expr:
    """Lift an int, atom or expression to an :class:`Affine` (predicates pass through)."""
    if isinstance(x, (Affine, Pred)):
        return x
    if isinstance(x, (Var, Iota, Fn, Dyn)):
        return Affine(((x, 1),), 0)
    if isinstance(x, (bool, np.bool_)):
        return const(int(x))
    if isinstance(x, (int, np.integer)):
        return const(int(x))
    raise TypeError(f"index expressions are integer-valued; got {type(x).__name__} {x!r}")


def const_value(e) -> int | None:
    """The integer value of a constant expression, else ``None``."""
    e = as_expr(e)
    if isinstance(e, Affine) and not e.terms:
        return e.const
    return None


def add(a, b) -> Affine:
    """``a + b``."""
    a, b = as_expr(a), as_expr(b)
    _no_pred(a, b)
    terms = dict(a.terms)
    for atom, k in b.terms:
        terms[atom] = terms.get(atom, 0) + k
    return _affine(terms, a.const + b.const)


def neg(a) -> Affine:
    """``-a``."""
    return mul(a, -1)


def sub(a, b) -> Affine:
    """``a - b``."""
    return add(a, neg(b))


def mul(a, b) -> Affine:
    """``a * b``; affine when one side is constant, otherwise an ``Fn('mul')`` atom."""
    a, b = as_expr(a), as_expr(b)
    _no_pred(a, b)
    return _mul_fixed(a, b)


def _mul_fixed(a: Affine, b: Affine) -> Affine:
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(ca * cb)
    if ca is None and cb is None:
        return as_expr(Fn("mul", tuple(sorted((a, b), key=to_str))))
    k, other = (ca, b) if ca is not None else (cb, a)
    return _affine({atom: c * k for atom, c in other.terms}, other.const * k)


def floordiv(a, b) -> Affine:
    """``a // b`` (folded when both sides are constant or ``b == 1``)."""
    a, b = as_expr(a), as_expr(b)
    _no_pred(a, b)
    ca, cb = const_value(a), const_value(b)
    if cb == 0:
        raise ZeroDivisionError("index expression divided by zero")
    if ca is not None and cb is not None:
        return const(ca // cb)
    if cb == 1:
        return a
    return as_expr(Fn("floordiv", (a, b)))


def mod(a, b) -> Affine:
    """``a % b`` (folded when both sides are constant)."""
    a, b = as_expr(a), as_expr(b)
    _no_pred(a, b)
    ca, cb = const_value(a), const_value(b)
    if cb == 0:
        raise ZeroDivisionError("index expression modulo zero")
    if ca is not None and cb is not None:
        return const(ca % cb)
    if cb == 1:
        return const(0)
    return as_expr(Fn("mod", (a, b)))


def minmax(op: str, a, b) -> Affine:
    """``min(a, b)`` / ``max(a, b)`` on index expressions."""
    a, b = as_expr(a), as_expr(b)
    ca, cb = const_value(a), const_value(b)
    if ca is not None and cb is not None:
        return const(min(ca, cb) if op == "min" else max(ca, cb))
    return as_expr(Fn(op, (a, b)))


def compare(op: str, a, b) -> Pred:
    """Comparison predicate ``a <op> b`` with ``op`` in ``lt le gt ge eq ne``."""
    if op not in _CMP:
        raise ValueError(f"unknown comparison {op!r}")
    a, b = as_expr(a), as_expr(b)
    _no_pred(a, b)
    return Pred(op, (a, b))


def land(a: Pred, b: Pred) -> Pred:
    """``a & b``."""
    return Pred("and", (_pred(a), _pred(b)))


def lor(a: Pred, b: Pred) -> Pred:
    """``a | b``."""
    return Pred("or", (_pred(a), _pred(b)))


def lnot(a: Pred) -> Pred:
    """``~a``."""
    return Pred("not", (_pred(a),))


def _pred(p):
    if not isinstance(p, Pred):
        raise TypeError("'&', '|' and '~' combine comparisons (masks), not integer expressions")
    return p


def _no_pred(*xs):
    for x in xs:
        if isinstance(x, Pred):
            raise TypeError("a comparison (mask) cannot be used as an integer index value")


# ----------------------------------------------------------------------------- structure queries

def _children(e):
    if isinstance(e, Affine):
        return [a for a, _ in e.terms]
    if isinstance(e, (Fn, Pred)):
        return list(e.args)
    if isinstance(e, Dyn) and e.index is not None:
        return list(e.index)
    return []


def _walk(e):
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(_children(node))


def free_vars(e) -> frozenset:
    """Names of the :class:`Var` symbols ``e`` depends on."""
    return frozenset(n.name for n in _walk(as_expr(e) if not isinstance(e, Pred) else e)
                     if isinstance(n, Var))


def iotas(e) -> frozenset:
    """The :class:`Iota` atoms in ``e``."""
    return frozenset(n for n in _walk(as_expr(e) if not isinstance(e, Pred) else e)
                     if isinstance(n, Iota))


def is_affine(e) -> bool:
    """True when ``e`` (or every comparison side of a predicate) has no non-affine atom."""
    return not any(isinstance(n, Fn) for n in _walk(e if isinstance(e, Pred) else as_expr(e)))


def dyns(e) -> list:
    """The :class:`Dyn` atoms in ``e`` (indirect indices)."""
    return [n for n in _walk(e if isinstance(e, Pred) else as_expr(e)) if isinstance(n, Dyn)]


def grid_shape(exprs) -> tuple[int, ...]:
    """Numpy broadcast shape of the iota grids (and indirect index tiles) in ``exprs``."""
    shapes = [io.shape for e in exprs for io in iotas(e)]
    shapes += [d.shape for e in exprs for d in dyns(e)]
    if not shapes:
        return ()
    return tuple(np.broadcast_shapes(*shapes))


def align_iotas(e, ndim: int):
    """Re-express every iota of ``e`` in an ``ndim``-D grid (numpy right-aligned broadcasting)."""
    mapping = {}
    for io in iotas(e):
        if io.ndim < ndim:
            mapping[io] = as_expr(Iota(io.size, io.axis + ndim - io.ndim, ndim))
    return substitute(e, mapping) if mapping else e


def substitute(e, mapping: dict):
    """Replace atoms (``Var``/``Iota``) by expressions, re-normalising the result."""
    if isinstance(e, Pred):
        return Pred(e.op, tuple(substitute(a, mapping) for a in e.args))
    if isinstance(e, (Var, Iota)):
        return mapping.get(e, as_expr(e))
    if isinstance(e, Dyn):
        if e.index is None:
            return as_expr(e)
        return as_expr(Dyn(e.tensor, tuple(substitute(i, mapping) for i in e.index), e.shape))
    if isinstance(e, Fn):
        args = [substitute(a, mapping) for a in e.args]
        return _FN_BUILD[e.op](*args)
    out = const(e.const)
    for atom, k in e.terms:
        out = add(out, _mul_fixed(as_expr(substitute(atom, mapping)), const(k)))
    return out


_FN_BUILD = {"floordiv": floordiv, "mod": mod,
             "mul": lambda a, b: _mul_fixed(as_expr(a), as_expr(b)),
             "min": lambda a, b: minmax("min", a, b), "max": lambda a, b: minmax("max", a, b)}


# ----------------------------------------------------------------------------- evaluation

def evaluate(e, env: dict, dyn=None):
    """Evaluate with ``env`` mapping var names to ints; iotas become broadcast ``np.arange`` grids.

    ``dyn(atom, env)`` supplies the values of indirect-index atoms (the simulator reads the tile).
    """
    if isinstance(e, Dyn):
        if dyn is None:
            raise ValueError(f"{to_str(e)} is a run-time value")
        return dyn(e, env)
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Iota):
        return np.arange(e.size, dtype=np.int64).reshape(e.shape)
    if isinstance(e, Affine):
        val = e.const
        for atom, k in e.terms:
            val = val + k * evaluate(atom, env, dyn)
        return val
    if isinstance(e, Fn):
        return _FNS[e.op](*(evaluate(a, env, dyn) for a in e.args))
    if e.op in _CMP:
        return _CMP[e.op](evaluate(e.args[0], env, dyn), evaluate(e.args[1], env, dyn))
    if e.op == "and":
        return np.logical_and(evaluate(e.args[0], env, dyn), evaluate(e.args[1], env, dyn))
    if e.op == "or":
        return np.logical_or(evaluate(e.args[0], env, dyn), evaluate(e.args[1], env, dyn))
    return np.logical_not(evaluate(e.args[0], env, dyn))


def bounds(e, ranges: dict) -> tuple[int, int]:
    """Inclusive interval of an integer expression, given ``ranges[var] = (lo, hi)``."""
    if isinstance(e, Var):
        return ranges[e.name]
    if isinstance(e, Iota):
        return (0, e.size - 1)
    if isinstance(e, Dyn):
        raise ValueError(f"{to_str(e)} is only known at run time")
    if isinstance(e, Affine):
        lo = hi = e.const
        for atom, k in e.terms:
            a, b = bounds(atom, ranges)
            lo += min(k * a, k * b)
            hi += max(k * a, k * b)
        return (lo, hi)
    (alo, ahi), (blo, bhi) = (bounds(a, ranges) for a in e.args)
    if e.op == "mul":
        c = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        return (min(c), max(c))
    if e.op == "floordiv" and blo == bhi and blo > 0:
        return (alo // blo, ahi // blo)
    if e.op == "mod" and blo == bhi and blo > 0:
        return (0, blo - 1) if ahi - alo + 1 >= blo or alo // blo != ahi // blo else (alo % blo,
                                                                                    ahi % blo)
    if e.op in ("min", "max"):
        f = min if e.op == "min" else max
        return (f(alo, blo), f(ahi, bhi))
    raise ValueError(f"cannot bound {to_str(e)}")


# ----------------------------------------------------------------------------- printing

def tuple_str(t) -> str:
    """``(a, b)`` / ``(a,)`` / ``()`` for a tuple of ints."""
    inner = ", ".join(str(x) for x in t)
    return f"({inner},)" if len(t) == 1 else f"({inner})"


def to_str(e) -> str:
    """Text form, parsed back by :func:`nki_workbench._src.ir.parser.parse_expr`."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Iota):
        return f"{{{e.size}@{e.axis}/{e.ndim}}}"
    if isinstance(e, Dyn):
        idx = "" if e.index is None else "[" + ", ".join(to_str(i) for i in e.index) + "]"
        return f"dyn({e.tensor}{idx}:{tuple_str(e.shape)})"
    if isinstance(e, Fn):
        return f"{e.op}({', '.join(to_str(a) for a in e.args)})"
    if isinstance(e, Pred):
        if e.op in _CMP:
            return f"({to_str(e.args[0])} {_CMP_SYM[e.op]} {to_str(e.args[1])})"
        if e.op == "not":
            return f"~{to_str(e.args[0])}"
        sym = "&" if e.op == "and" else "|"
        return f"({to_str(e.args[0])} {sym} {to_str(e.args[1])})"
    parts = []
    for atom, k in e.terms:
        s = to_str(atom)
        body = s if abs(k) == 1 else f"{abs(k)}*{s}"
        if not parts:
            parts.append(body if k > 0 else f"-{body}")
        else:
            parts.append(f"+ {body}" if k > 0 else f"- {body}")
    if e.const or not parts:
        if not parts:
            parts.append(str(e.const))
        else:
            parts.append(f"+ {e.const}" if e.const > 0 else f"- {-e.const}")
    return " ".join(parts)
