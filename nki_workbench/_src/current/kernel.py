"""How a kernel of today's ``import nki`` is traced into the shared IR.

:class:`CurrentFunction` wraps the kernel's Python function. Inside a trace it marks the
:class:`~..trace.context.TraceContext` as a current-API trace (``ctx.attrs["api"] = "nki"``: the
subscript rules of NKI 0.2+ apply) and runs the body with ``nl.affine_range`` /
``nl.sequential_range`` as IR loops, exactly as the legacy front end does, so the two APIs give
the same IR for the same kernel. Since NKI 0.2 those iterators are plain Python ``range``s,
and kernels may use the loop variable in Python (``if k == 0``, ``min(n, k * 128)``); when the
symbolic body trips over such a use, the trace starts over with every loop unrolled (what AWS's
tracer does). The retry restores the context to its state at entry. When that fails too in
an LNC launch (``kernel[2]``; the kernel uses ``nl.program_id`` as a Python int), the body is
traced once per core with a Python-int program id, each instruction guarded by ``pid0 == c``
(what AWS's tracer does: it specialises the kernel for every core).
"""

from __future__ import annotations

import functools

from ..errors import NkiError
from ..ir import expr as E
from ..trace import context as C

__all__ = ["CurrentFunction", "unrolling", "is_current", "current_trace", "program_guarded"]

# why: a symbolic loop variable used as a Python value fails in many ways (a truth value, a
# slice whose length depends on it, an int() of it); NKI 0.2+ loops are Python ranges, so any
# trace error inside a symbolic loop is retried unrolled, where a real error raises again
_RETRY = (NkiError, TypeError, ValueError, IndexError)


def current_trace() -> bool:
    """Whether the kernel being traced in this thread uses today's API."""
    ctx = C.current()
    return ctx is not None and ctx.attrs.get("api") == "nki"


def unrolling() -> bool:
    """Whether loops of the current trace are unrolled into Python ints."""
    ctx = C.current()
    return ctx is not None and bool(ctx.attrs.get("unroll"))


def _snapshot(ctx) -> dict:
    snap = {}
    for k, v in vars(ctx).items():
        if k == "blocks":
            snap[k] = [list(b) for b in v]
        elif isinstance(v, (dict, list, set)):
            snap[k] = type(v)(v)
        else:
            snap[k] = v
    return snap


def _restore(ctx, snap: dict) -> None:
    for k, v in snap.items():
        if k == "blocks":
            setattr(ctx, k, [list(b) for b in v])
        elif isinstance(v, (dict, list, set)):
            setattr(ctx, k, type(v)(v))
        else:
            setattr(ctx, k, v)


class CurrentFunction:
    """A kernel function written for ``import nki`` (callable like the function itself).

    Attributes:
        fn: the user's function.
    """

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.__code__ = getattr(fn, "__code__", None)

    def __call__(self, *args, **kwargs):
        ctx = C.current()
        if ctx is None or ctx.attrs.get("api") == "nki":
            return self.fn(*args, **kwargs)  # why: a sub-kernel call inside a current trace
        ctx.attrs["api"] = "nki"
        snap = _snapshot(ctx)
        programs = _programs(ctx)
        try:
            return self.fn(*args, **kwargs)
        except _RETRY:
            if not _has_loops(ctx, snap) and programs == 1:
                raise
            loops = _has_loops(ctx, snap)
        if loops:
            _retry(ctx, snap)
            try:
                return self.fn(*args, **kwargs)
            except _RETRY:
                if programs == 1:
                    raise
        return self._per_program(ctx, snap, programs, args, kwargs)

    def _per_program(self, ctx, snap, programs, args, kwargs):
        """Trace the body once per LNC core with a Python-int program id (NKI 0.2+ does).

        Each body's instructions carry the guard ``pid0 == c``; shared-HBM tensors are one
        set for all cores (the k-th allocation of every body is the same tensor).
        """
        _retry(ctx, snap)
        result = None
        try:
            for c in range(programs):
                ctx.attrs["program_id"] = c
                ctx.attrs["program_guard"] = E.compare("eq", E.as_expr(E.Var("pid0")),
                                                       E.const(c))
                ctx.attrs["shared_next"] = 0
                out = self.fn(*args, **kwargs)
                result = out if c == 0 else result
        finally:
            for k in ("program_id", "program_guard", "shared_next"):
                ctx.attrs.pop(k, None)
        return result

    def __repr__(self):
        return f"<nki kernel function {getattr(self.fn, '__qualname__', self.fn)}>"


def _programs(ctx) -> int:
    n = 1
    for g in ctx.grid:
        n *= int(g)
    return n if len(ctx.grid) == 1 else 1


def _retry(ctx, snap) -> None:
    C.pop(ctx)
    _restore(ctx, snap)
    ctx.attrs["unroll"] = True
    C.push(ctx)


def program_guarded() -> int | None:
    """The core whose body is being traced (per-program tracing), else ``None``."""
    ctx = C.current()
    return None if ctx is None else ctx.attrs.get("program_id")


def _has_loops(ctx, snap) -> bool:
    # why: only a trace that opened symbolic loops can succeed unrolled
    return ctx._loop_ids > snap["_loop_ids"]


def is_current(func) -> bool:
    """Whether a kernel function (or ``@nki.jit`` object's ``func``) uses today's API."""
    return isinstance(func, CurrentFunction)
