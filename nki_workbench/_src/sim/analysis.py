"""IR facts both executors need about a loop body (pure functions of the IR)."""

from __future__ import annotations

from ..ir import Access, walk_insts
from ..ir.opcodes import OPCODES

__all__ = ["read_and_written", "starts_accumulation_group"]


def starts_accumulation_group(inst, decls) -> bool:
    """Whether ``inst`` is a TensorE ``+=`` into PSUM, whose unwritten elements count as 0.

    The first matmul of a PSUM accumulation group overwrites the bank instead of adding to it,
    so ``psum[...] += nisa.nc_matmul(...)`` into a fresh ``nl.ndarray`` (the only way in a
    directly allocated kernel, where ``nl.zeros`` is refused) accumulates from zero, as NKI's
    own simulator and published allocated kernels rely on.
    """
    if inst.attr("acc") != "add" or not inst.outs:
        return False
    info = OPCODES.get(inst.op)
    if info is None or info.engine != "tensor":
        return False
    decl = decls[inst.outs[0].tensor]
    while decl.base is not None:
        decl = decls[decl.base]
    return decl.buffer == "psum"


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
