"""The tracing context: builds the IR while the kernel's Python body runs once.

Holds the block stack (loops nest), the tensor declarations, symbol ranges (for static bounds
checks), the names already used, and the read/write facts the end-of-trace checks need.
``current()`` is the context of the kernel being traced; NKI APIs called with no kernel being
traced raise ``err_nki_api_outside_of_nki_kernel``.
"""

from __future__ import annotations

import keyword
import linecache
import re
import sys
import threading
from dataclasses import replace

from ..errors import NkiError, user_location
from ..ir import Alloc, Inst, Loop, TensorDecl

__all__ = ["TraceContext", "current", "require", "push", "pop", "UnrollLoops"]


class UnrollLoops(BaseException):
    """Raised while tracing when a Python condition needs loop variables as Python ints.

    ``trace_function`` catches it and traces the kernel again with the loops at ``keys``
    (``(file, line)`` of their ``for`` statement) unrolled, so the condition is evaluated per
    iteration at trace time. A ``BaseException``: a kernel's ``except Exception`` must not
    swallow it.
    """

    def __init__(self, keys):
        self.keys = frozenset(keys)
        super().__init__(sorted(self.keys))


class _Stacks(threading.local):
    # why: each thread traces its own kernels; a shared stack let concurrent traces see (and
    # pop) each other's contexts
    def __init__(self):
        self.stack: list = []


_LOCAL = _Stacks()
AUTO = object()  # "take the kernel line being traced" default for locations
_RESERVED = {"kernel", "param", "alloc", "for", "return", "pass", "expr", "mask", "dyn", "None",
             "True", "False", "nan", "inf", "floordiv", "mod", "mul", "min", "max"}
_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]+)?(?:\[[^\]]*\])?\s*(?:[-+*/]?=)(?!=)")
_FOR = re.compile(r"^\s*for\s+([A-Za-z_]\w*)\s+in\b")


def current():
    """The context of the kernel being traced in this thread, or ``None``."""
    stack = _LOCAL.stack
    return stack[-1] if stack else None


def require(api: str):
    """The current context; raises ``err_nki_api_outside_of_nki_kernel`` outside a kernel."""
    stack = _LOCAL.stack
    if not stack:
        raise NkiError("err_nki_api_outside_of_nki_kernel",
                       f"{api} was called outside of an NKI kernel", user_location(),
                       "call it inside a function decorated with @nki.jit (or run through "
                       "nki.simulate_kernel)")
    return stack[-1]


def push(ctx):
    """Make ``ctx`` current in this thread."""
    _LOCAL.stack.append(ctx)


def pop(ctx):
    """Stop tracing with ``ctx`` (and drop anything an exception left above it)."""
    stack = _LOCAL.stack
    if ctx in stack:
        del stack[stack.index(ctx):]


def _source_line(depth_frames=2) -> str:
    from ..errors import is_internal
    frame = sys._getframe(depth_frames)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return ""
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno)


class TraceContext:
    """Mutable IR builder for one kernel trace."""

    def __init__(self, name: str, target: str, grid: tuple, kernel_code=None,
                 unroll: frozenset = frozenset()):
        self.name = name
        self.unroll = frozenset(unroll)  # keys of the loops traced unrolled (UnrollLoops)
        self.target = target
        self.grid = tuple(grid)
        self.kernel_code = kernel_code
        self.blocks: list[list] = [[]]
        self.loops: list[dict] = []
        self.scope: tuple = ()
        self._loop_ids = 0
        self.names: set[str] = set()
        self._next_suffix: dict[str, int] = {}  # base -> no smaller free suffix exists
        self.decls: dict[str, TensorDecl] = {}
        # why: NKI allocates instruction results itself even in directly allocated kernels;
        # the no-mixing rule applies only to the tensors the kernel declares
        self.results: set[str] = set()
        # why: `mask=(a < n and b < m)` evaluates bool(a) first; the left predicates wait here
        # for the mask that consumes the right one (see IndexExpr.__bool__)
        self.pending_and: list = []
        self.var_ranges: dict[str, tuple | None] = {}
        self.writes: dict[str, str | None] = {}
        self.reads: set[str] = set()
        self.attrs: dict = {}
        self.dead_depth = 0  # > 0 inside a loop that runs zero times
        self.rng_used = False
        for axis, size in enumerate(self.grid):
            var = self.fresh_name(f"pid{axis}")
            self.var_ranges[var] = (0, size - 1)

    # ------------------------------------------------------------------ names
    def fresh_name(self, hint: str | None) -> str:
        """A unique identifier derived from ``hint``."""
        base = re.sub(r"\W", "_", hint or "t") or "t"
        if base[0].isdigit():
            base = "t" + base
        if keyword.iskeyword(base) or base in _RESERVED:
            base += "_"
        name = base
        if name in self.names:
            # why: names are never released, so the first free suffix only grows; probing from
            # 1 each time made a trace quadratic in its instruction count
            n = self._next_suffix.get(base, 1)
            while f"{base}_{n}" in self.names:
                n += 1
            name = f"{base}_{n}"
            self._next_suffix[base] = n + 1
        self.names.add(name)
        return name

    @staticmethod
    def assigned_name() -> str | None:
        """Name on the left of ``=`` in the kernel line being traced (to name tensors)."""
        m = _ASSIGN.match(_source_line(3))
        return m.group(1) if m else None

    @staticmethod
    def loop_var_name() -> str | None:
        """Name of the ``for`` target in the kernel line being traced."""
        m = _FOR.match(_source_line(3))
        return m.group(1) if m else None

    # ------------------------------------------------------------------ building
    @property
    def block(self) -> list:
        """The statement list being appended to."""
        return self.blocks[-1]

    def append(self, stmt):
        """Add a statement to the current block."""
        self.block.append(stmt)

    def declare(self, shape, dtype: str, buffer: str, *, kind: str = "local",
                name: str | None = None,
                par_dim: int = 0, base=None, view=None, data=None, alloc=None,
                loc=AUTO, emit: bool = True) -> TensorDecl:
        """Create a tensor declaration (appending its ``Alloc`` unless ``emit`` is false)."""
        decl = TensorDecl(name=self.fresh_name(name), shape=tuple(int(s) for s in shape),
                          dtype=dtype, buffer=buffer, kind=kind, par_dim=par_dim, base=base,
                          view=view, data=data, alloc=alloc,
                          loc=user_location() if loc is AUTO else loc)
        self.decls[decl.name] = decl
        if emit:
            self.append(Alloc(decl))
        return decl

    def update_decl(self, name: str, **changes):
        """Change a declaration's fields (applied to its Alloc when the kernel is built)."""
        self.decls[name] = replace(self.decls[name], **changes)

    def root(self, name: str) -> str:
        """The tensor that ``name`` is a view of (itself if not a view)."""
        while self.decls[name].base is not None:
            name = self.decls[name].base
        return name

    def open_loop(self, kind: str, r: range, attrs: tuple, loc: str | None, hint: str | None,
                  key=None, segment: int = 0):
        """Start a symbolic loop; returns the loop variable's name.

        ``key`` (``(file, line)`` of the ``for``) names the loop for :class:`UnrollLoops`;
        ``segment`` counts the earlier parts of the same ``for`` when a condition split its
        range (:meth:`split_loop`).
        """
        var = self.fresh_name(hint or "i")
        self._loop_ids += 1
        self.loops.append(dict(var=var, kind=kind, range=r, attrs=attrs, loc=loc,
                               id=self._loop_ids, key=key, segment=segment))
        self.scope = self.scope + (self._loop_ids,)
        self.var_ranges[var] = (r[0], r[-1]) if len(r) else None
        if not len(r):
            self.dead_depth += 1
        self.blocks.append([])
        return var

    def split_loop(self, info: dict, keep: int):
        """Cut the open loop ``info`` to its first ``keep`` iterations; the rest is traced next.

        Everything traced so far in its body holds for any part of its range, so the loop
        closes with the shorter range and the iterator opens the remaining iterations as a new
        loop (``info["rest"]``) right after it, keeping their order.
        """
        r = info["range"]
        if not 0 < keep < len(r):
            raise ValueError(f"cannot keep {keep} of {len(r)} iterations")
        rest = info.get("rest")
        info["rest"] = range(r[keep], rest.stop if rest is not None else r.stop, r.step)
        info["range"] = r[:keep]
        self.var_ranges[info["var"]] = (info["range"][0], info["range"][-1])

    def close_loop(self):
        """Finish the innermost loop and append it to its parent block."""
        if not self.loops:
            return
        info = self.loops.pop()
        body = self.blocks.pop()
        self.scope = self.scope[:-1]
        r = info["range"]
        if not len(r):
            self.dead_depth -= 1
        self.append(Loop(info["var"], r.start, r.stop, r.step, info["kind"], tuple(body),
                         info["loc"], info["attrs"]))

    def emit_inst(self, inst: Inst) -> int:
        """Append an instruction; returns its position in the current block."""
        self.append(inst)
        return len(self.block) - 1

    def note_write(self, tensor: str, loc: str | None):
        """Remember that ``tensor`` (its root) is written (inside live code)."""
        if self.dead_depth:
            return
        self.writes.setdefault(self.root(tensor), loc)

    def note_read(self, tensor: str):
        """Remember that ``tensor`` (its root) is read."""
        self.reads.add(self.root(tensor))

    def finish_body(self) -> tuple:
        """The top-level statements, with updated declarations substituted into their Allocs."""
        while self.loops:
            self.close_loop()
        return tuple(_refresh(self.blocks[0], self.decls))


def _refresh(body, decls):
    out = []
    for s in body:
        if isinstance(s, Alloc):
            d = decls.get(s.decl.name, s.decl)
            out.append(s if d is s.decl else Alloc(d))
        elif isinstance(s, Loop):
            out.append(replace(s, body=tuple(_refresh(s.body, decls))))
        else:
            out.append(s)
    return out
