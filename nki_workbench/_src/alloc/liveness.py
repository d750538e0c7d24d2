"""Static liveness of on-chip tensors over the IR (no simulation).

Instructions are numbered in program (text) order; a loop body is numbered once, so positions
describe *one* iteration. A tensor lives from its first to its last access; an access inside a
loop nested deeper than the tensor's ``Alloc`` keeps it live over that whole loop (the next
iteration needs it again). A tensor allocated in a loop body therefore lives for one iteration,
which is exactly what lets the allocator reuse its space. ``multi_buffer(k)`` on the nearest
enclosing loop that carries it (or a ``with ncc.multi_buffer(k):`` scope around the tensor's
creation) keeps ``k`` copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Access, Alloc, Inst, Loop
from ..ir import expr as E

__all__ = ["TensorLife", "Liveness", "liveness", "ONCHIP", "loop_directives"]

ONCHIP = ("sbuf", "psum")


@dataclass(frozen=True)
class TensorLife:
    """Where an on-chip tensor is created and used.

    Attributes:
        decl: its declaration.
        alloc_pos: position of the first instruction after its ``Alloc``.
        start: first instruction that accesses it (``alloc_pos`` if never accessed).
        end: last instruction that keeps it live (inclusive).
        scope_end: last instruction of the block holding its ``Alloc`` (stack allocator).
        loops: variables of the loops enclosing the ``Alloc``, outermost first.
        copies: buffers kept by ``multi_buffer`` (1 without it).
        tensor_engine: written by a TensorE instruction (a PSUM accumulation group).
        order: declaration order in the program.
    """

    decl: object
    alloc_pos: int
    start: int
    end: int
    scope_end: int
    loops: tuple
    copies: int
    tensor_engine: bool
    order: int


@dataclass(frozen=True)
class Liveness:
    """Liveness of every SBUF/PSUM tensor of a kernel.

    Attributes:
        insts: instructions in static program order (their index is the position).
        locs: ``loc`` of each instruction.
        tensors: ``name -> TensorLife`` for root (non-view) on-chip tensors.
    """

    insts: tuple
    tensors: dict

    @property
    def num_positions(self) -> int:
        """Number of instruction positions (at least 1)."""
        return max(1, len(self.insts))


def loop_directives(loop: Loop) -> tuple:
    """The directive literals of a loop (``(("multi_buffer", 2), ...)``)."""
    d = dict(loop.attrs).get("directives")
    if d is None:
        return ()
    if isinstance(d, tuple) and d and isinstance(d[0], str):
        return (d,)
    return tuple(x for x in d if isinstance(x, tuple) and x)


def _factor(directives) -> int | None:
    for d in directives:
        if d[0] == "multi_buffer":
            return int(d[1]) if len(d) > 1 else 2
    return None


def _operand_tensors(op):
    if isinstance(op, Access):
        yield op.tensor
        for e in op.index or ():
            for d in E.dyns(e):
                yield d.tensor
    elif isinstance(op, (E.Affine, E.Pred)):
        for d in E.dyns(op):
            yield d.tensor


def liveness(kernel) -> Liveness:
    """Compute the static liveness of the kernel's SBUF/PSUM tensors.

    Args:
        kernel: an IR :class:`~nki_workbench._src.ir.Kernel`.

    Returns:
        Liveness
    """
    from ..ir import opinfo
    decls = kernel.decls()
    insts: list = []
    allocs: dict = {}       # name -> (alloc_pos, loops, copies, order, scope id)
    uses: dict = {}         # name -> list of (pos, loops)
    te_written: set = set()
    spans: dict = {}        # loop var -> (first, last)
    scope_ends: dict = {}   # scope id -> last position
    scope_factor = {}
    for directive, tensors, _loops in kernel.attr("directive_scopes", ()) or ():
        f = _factor((directive,))
        for t in tensors if f else ():
            scope_factor[t] = max(f, scope_factor.get(t, 1))

    def root(name):
        while name in decls and decls[name].base is not None:
            name = decls[name].base
        return name

    def walk(body, loops, factor, sid):
        for s in body:
            if isinstance(s, Alloc):
                d = s.decl
                if d.buffer in ONCHIP and d.base is None:
                    copies = max(factor or 1, scope_factor.get(d.name, 1))
                    allocs[d.name] = (len(insts), loops, copies, len(allocs), sid)
            elif isinstance(s, Loop):
                first = len(insts)
                f = _factor(loop_directives(s))
                walk(s.body, loops + (s.var,), f if f is not None else factor, id(s))
                spans[s.var] = (first, len(insts) - 1)
            elif isinstance(s, Inst):
                pos = len(insts)
                insts.append(s)
                try:
                    engine = opinfo(s.op).engine
                except (KeyError, ValueError):
                    engine = None
                for o in s.outs:
                    for t in _operand_tensors(o):
                        uses.setdefault(root(t), []).append((pos, loops))
                    if engine == "tensor" and isinstance(o, Access):
                        te_written.add(root(o.tensor))
                for o in s.ins:
                    for t in _operand_tensors(o):
                        uses.setdefault(root(t), []).append((pos, loops))
        scope_ends[sid] = len(insts) - 1

    walk(kernel.body, (), None, 0)
    last = max(0, len(insts) - 1)
    tensors = {}
    for name, (apos, loops, copies, order, sid) in allocs.items():
        apos = min(apos, last)
        lo, hi = None, None
        for pos, uloops in uses.get(name, ()):
            a = b = pos
            if len(uloops) > len(loops):
                span = spans.get(uloops[len(loops)])
                if span is not None and span[1] >= span[0]:
                    a, b = span
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        if lo is None:
            lo = hi = apos
        tensors[name] = TensorLife(decls[name], apos, lo, hi, max(hi, min(last, scope_ends[sid])),
                                   loops, copies, name in te_written, order)
    return Liveness(tuple(insts), tensors)
