"""When an on-chip tensor is dead: the interpreter frees it, the memory budget counts the peak.

A kernel traced with unrolled loops (a Python int of a loop variable, see
docs/control_flow.md) declares one copy of each body tile per iteration, all in one block: the
nki-samples flash-attention backward at 8192 tokens declared 544 copies of six [128, 512]
tiles when its causal condition still unrolled loops (split, it declares 16). Kept to the
end of the run they add up to 1.6 GiB; each copy is dead once the last
statement that names it has run.

:func:`free_plan` gives, per block, the root tensors to drop after each statement: tensors
allocated in that block, or anywhere inside one of its loops, whose every use (through any
view) lies in the block, at or before that statement. Kernel inputs, outputs, constants and
shared HBM are never dropped, and nothing is dropped inside a loop body that runs more than
once (each iteration's tile replaces the last, and the interpreter reuses its buffer); such
tiles are dropped after the loop, in the enclosing block. :func:`peak_bytes` is the most those
rules keep alive at once.
"""

from __future__ import annotations

import dataclasses

from ..ir import Alloc, Loop, walk_stmts

__all__ = ["free_plan", "peak_bytes", "names_used"]


def names_used(stmt, decls) -> frozenset:
    """Root tensor names a statement (an instruction, or a loop and all it holds) touches.

    Conservative: every IR node under it is searched, and any string naming a declared
    tensor (an access, an attribute) counts as a use.
    """
    out = set()
    stack = [stmt]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if x in decls:
                out.add(_root(x, decls))
        elif isinstance(x, (tuple, list, frozenset, set)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, Alloc):
            out.add(_root(x.decl.name, decls))
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            stack.extend(getattr(x, f.name) for f in dataclasses.fields(x))
    return frozenset(out)


def _root(name, decls):
    while decls[name].base is not None:
        name = decls[name].base
    return name


def _droppable(decl) -> bool:
    return (decl.base is None and decl.kind not in ("input", "output", "const")
            and decl.buffer != "shared_hbm")


def _allocated(s) -> list:
    """Root tensors a statement allocates, its loops' bodies included, in program order."""
    body = s.body if isinstance(s, Loop) else (s,)
    return [x.decl for x in walk_stmts(body) if isinstance(x, Alloc) and x.decl.base is None]


def free_plan(body, decls, repeated: bool = False) -> dict:
    """``{statement index: root names to drop after it}`` for one block.

    Args:
        body: the block's statements.
        decls: the kernel's declarations by name.
        repeated: the block is the body of a loop of more than one trip (nothing is dropped).
    """
    if repeated:
        return {}
    first, last = {}, {}
    for k, s in enumerate(body):
        used = names_used(s, decls)
        for d in _allocated(s):
            if _droppable(d) and d.name not in first:
                # why: a name used before this block allocates it lives outside the block
                first[d.name] = k if d.name not in last else None
        for n in used:
            last[n] = k
    plan: dict = {}
    for n, k in first.items():
        if k is not None:
            plan.setdefault(last[n], []).append(n)
    return {k: tuple(v) for k, v in plan.items()}


def peak_bytes(body, decls, size) -> int:
    """Most bytes the tensors allocated in ``body`` (recursively) hold at once under the plan.

    Args:
        body: statements.
        decls: declarations by name.
        size: ``decl -> bytes`` it costs while alive.
    """
    return _peak(body, decls, size, False)[0]


def _peak(body, decls, size, repeated) -> tuple:
    """``(peak, {name: bytes} still alive at the end)`` of one block."""
    plan = free_plan(body, decls, repeated)
    alive, live, peak = {}, 0, 0
    for k, s in enumerate(body):
        if isinstance(s, Loop):
            inner, left = _peak(s.body, decls, size, s.trip_count > 1)
            peak = max(peak, live + inner)
            for n, b in left.items():
                live += b - alive.get(n, 0)
                alive[n] = b
        elif isinstance(s, Alloc) and s.decl.base is None and s.decl.kind != "input":
            live += size(s.decl) - alive.get(s.decl.name, 0)
            alive[s.decl.name] = size(s.decl)
            peak = max(peak, live)
        for n in plan.get(k, ()):
            live -= alive.pop(n, 0)  # why: a one-trip loop's own plan may have dropped it
    return peak, alive
