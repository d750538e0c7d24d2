"""The ``Machine`` seam: what an executor offers the instructions it cannot run by value rule.

A value rule says what an opcode computes from its operand values. A few instructions need the
executor's memory itself — collectives (read the sources, exchange with other ranks, write the
results), indirect DMA, in-place register state. Their factories get a :class:`Machine`:

=====================================  =======================================================
``read(state, access, sel, loc)``      ``(value, written)``: the elements of ``access`` (under
                                       the mask ``sel``) and a bool mask of the ones something
                                       wrote (``None`` = all were written)
``write(state, access, decl, value,``  store ``value`` (rounded to ``dtype``, default the
``dtype, sel, binds, loc)``            tensor's) into ``access`` under ``sel``; ``binds``: the
                                       tensor is not allocated yet and this write allocates it
``alloc(decl)``                        ``run(state)`` that allocates ``decl`` when executed
``report(state, inst, written, loc)``  report a read of unwritten elements (warning or
                                       ``wb_uninitialized_read`` per ``SimParams``)
=====================================  =======================================================

``state`` is the executor's per-program state (``state.env``: loop variables, ``state.pid``,
``state.params``, ``state.shared``). :func:`machine_of` adapts today's interpreter
(:class:`~.sim.interp.Program`) to the seam; it is the one place that knows the interpreter's
internal method names, until the executors implement the protocol themselves.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Machine", "machine_of", "ProgramMachine"]


class Machine(Protocol):
    """Memory access an executor gives special instructions (see the module docstring)."""

    def read(self, state, access, sel, loc):
        """``(value, written mask or None)`` of ``access`` under the mask ``sel``."""

    def write(self, state, access, decl, value, dtype, sel, binds, loc) -> None:
        """Store ``value`` into ``access`` of tensor ``decl`` under the mask ``sel``."""

    def alloc(self, decl):
        """``run(state)`` allocating tensor ``decl``."""

    def report(self, state, inst, written, loc) -> None:
        """Report that ``inst`` read elements nothing wrote (``written``: masks, one per read)."""


class ProgramMachine:
    """:class:`Machine` over the numpy interpreter's ``Program`` (an adapter).

    Args:
        program: the interpreter's compiled ``Program``.
    """

    __slots__ = ("program",)

    def __init__(self, program):
        self.program = program

    def read(self, state, access, sel, loc):
        """See :meth:`Machine.read` (no race tracking: special reads are not loop-carried)."""
        return self.program._read(state, access, sel, loc, (), {})

    def write(self, state, access, decl, value, dtype, sel, binds, loc) -> None:
        """See :meth:`Machine.write` (plain store, no accumulation)."""
        self.program._write(state, access, decl, value, dtype, None, sel, binds, loc, (), {})

    def alloc(self, decl):
        """See :meth:`Machine.alloc`."""
        return self.program._alloc(decl)

    def report(self, state, inst, written, loc) -> None:
        """See :meth:`Machine.report`."""
        self.program._uninit(state, inst, list(written), loc)


def machine_of(program) -> Machine:
    """The :class:`Machine` of an executor's program (itself when it implements the seam)."""
    if all(callable(getattr(program, n, None)) for n in ("read", "write", "alloc", "report")):
        return program
    return ProgramMachine(program)
