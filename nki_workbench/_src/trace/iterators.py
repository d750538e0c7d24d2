"""Loop iterators.

``affine_range`` and ``sequential_range`` stay loops in the IR (the body is traced once with a
symbolic loop variable, or once per segment when a Python condition on the variable splits
the range: docs/control_flow.md); ``static_range`` unrolls into Python ints.
"""

from __future__ import annotations

from ..errors import NkiError, user_frame, user_location
from ..ir import expr as E
from . import context as C
from .index import IndexExpr

__all__ = ["affine_range", "sequential_range", "static_range", "directive_attr"]


def _range(api: str, args) -> range:
    if not 1 <= len(args) <= 3:
        raise NkiError(None, f"{api} takes 1 to 3 arguments (stop | start, stop[, step]), got "
                       f"{len(args)}", user_location())
    vals = []
    for a in args:
        if isinstance(a, IndexExpr):
            c = E.const_value(a.expr) if not isinstance(a.expr, E.Pred) else None
            if c is None:
                raise NkiError("err_dynamic_control_flow_not_supported",
                               f"{api} bounds must be compile-time ints, got "
                               f"'{E.to_str(a.expr)}'", user_location(),
                               "loop bounds come from shapes or constants; mask the tail")
            a = c
        try:
            vals.append(int(a))
        except (TypeError, ValueError):
            raise NkiError(None, f"{api} bounds must be ints, got {a!r}", user_location()) from None
    if len(vals) == 3 and vals[2] == 0:
        raise NkiError(None, f"{api} step cannot be zero", user_location())
    return range(*vals)


def directive_attr(d):
    """A loop directive (``ncc.multi_buffer(2)``, ``ncc.no_reorder()``) as an IR literal."""
    if d is None:
        return None
    to = getattr(d, "to_attr", None)
    if to is not None:
        return to()
    if isinstance(d, (list, tuple)):
        return tuple(directive_attr(x) for x in d)
    return repr(d)


class _SymbolicRange:
    """A loop traced once; iterating yields the symbolic loop variable exactly once."""

    def __init__(self, kind: str, args, kwargs):
        self.kind = kind
        self.api = f"nl.{kind}_range"
        self.range = _range(self.api, args)
        unknown = set(kwargs) - {"directives"}
        if unknown:
            raise NkiError(None, f"{self.api} got unexpected keyword(s) {sorted(unknown)}",
                           user_location())
        d = directive_attr(kwargs.get("directives"))
        self.attrs = (("directives", d),) if d is not None else ()
        self.loc = user_location()
        self.hint = C.TraceContext.loop_var_name()
        frame = user_frame()
        self.key = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None

    def __iter__(self):
        ctx = C.require(self.api)
        if self.key is not None and self.key in ctx.unroll:
            # why: a Python condition on this loop's variable needs its value (C.UnrollLoops):
            # the iterations are traced one by one with Python ints, as nl.static_range does
            yield from self.range
            return
        pending, segment = self.range, 0
        while True:
            var = ctx.open_loop(self.kind, pending, self.attrs, self.loc, self.hint, self.key,
                                segment=segment)
            info = ctx.loops[-1]
            try:
                yield IndexExpr(E.as_expr(E.Var(var)))
            finally:
                if ctx.loops and ctx.loops[-1]["var"] == var:
                    ctx.close_loop()
            # why: a condition on the loop variable split the range (index.split_loops): the
            # iterations after this segment are traced as the next loop, in order
            pending, segment = info.get("rest"), segment + 1
            if pending is None or not len(pending):
                return

    def __len__(self):
        return len(self.range)


def affine_range(*args, **kwargs):
    """A loop without loop-carried dependencies (PSUM ``+=`` accumulation is allowed).

    The body is traced once; the IR keeps the loop and its trip count.

    Args:
        *args: ``stop`` | ``start, stop`` | ``start, stop, step`` (compile-time ints).
        **kwargs: ``directives=`` (e.g. ``ncc.multi_buffer(2)``), kept as a loop attribute.

    Returns:
        An iterable yielding one symbolic loop variable.
    """
    return _SymbolicRange("affine", args, kwargs)


def sequential_range(*args, **kwargs):
    """A loop whose iterations depend on each other, executed in order.

    Args:
        *args: ``stop`` | ``start, stop`` | ``start, stop, step``.
        **kwargs: ``directives=``.

    Returns:
        An iterable yielding one symbolic loop variable.
    """
    return _SymbolicRange("sequential", args, kwargs)


def static_range(*args):
    """A loop unrolled at trace time: the loop variable is a Python int.

    Args:
        *args: ``stop`` | ``start, stop`` | ``start, stop, step``.

    Returns:
        range: a plain Python range.
    """
    return _range("nl.static_range", args)
