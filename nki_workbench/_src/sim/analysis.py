"""IR facts both executors need about a loop body (pure functions of the IR)."""

from __future__ import annotations

from ..ir import Access, walk_insts

__all__ = ["read_and_written"]


def read_and_written(body, decls) -> set:
    """Root tensor names that the statements both read and write (not by accumulation)."""
    def root(name):
        while decls[name].base is not None:
            name = decls[name].base
        return name
    reads, writes = set(), set()
    for inst in walk_insts(body):
        for o in inst.ins:
            if isinstance(o, Access):
                reads.add(root(o.tensor))
        if inst.attr("acc") is None:
            for o in inst.outs:
                writes.add(root(o.tensor))
    return reads & writes
