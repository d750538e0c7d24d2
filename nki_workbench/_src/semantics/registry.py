"""The opcode registry: per-opcode facts both executors read (one record per opcode).

:data:`..ir.opcodes.OPCODES` knows each opcode's engine and family (the IR's facts; ``nl`` in
``ir/opcodes.py``, ``nisa`` in ``isa/__init__.py``, collectives in ``collectives/kinds.py``).
This module adds what the executors need to know, in declared tables instead of sets spread
over the executors:

* ``lanewise``: each output element depends only on the same element of every input (an
  unwritten input element propagates to the output instead of being reported).
* ``cross_partition``: output partition ``p`` reads more than input partition ``p`` (TensorE,
  cross-partition GpSimd, transposing DMAs): unwritten inputs are reported, never propagated.
* ``rowwise``: a reduction along free axes (a result row is written when its input row was).
* ``compiles``: ``False`` for :data:`INTERPRETER_ONLY` opcodes (the compiled backend hands a
  kernel using one to the interpreter); ``special``: the reason an opcode has no value rule
  (:data:`EXECUTOR_SPECIAL`, run by the executors themselves).

The coverage test (``tests/sim/test_registry.py``) checks every registry opcode has exactly
one value rule or a declared special reason, and one cost entry.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from ..ir.opcodes import OPCODES
from . import isa_props

__all__ = ["OpProps", "props", "registry", "INTERPRETER_ONLY", "EXECUTOR_SPECIAL",
           "COMPILED_SPECIAL", "LOWERED_SPECIAL", "LANEWISE", "CROSS_LANE", "CROSS_PARTITION",
           "ROWWISE",
           "VALID_RANGE"]

LANEWISE = frozenset({"copy", "load", "store", "broadcast_to", "where", "memset", "dropout"})
"""Lane-wise opcodes outside the unary/binary/fill families (those are lane-wise unless in
:data:`CROSS_LANE`)."""

CROSS_LANE = frozenset({"load_transpose2d", "atomic_rmw"})
"""Opcodes of a lane-wise family whose output element reads other elements."""

CROSS_PARTITION = frozenset({"matmul", "transpose", "load_transpose2d", "all_reduce",
                             "atomic_rmw", "device_print"}) | isa_props.CROSS_PARTITION
"""Opcodes whose output partition reads more than the same input partition."""

ROWWISE = frozenset({"sum", "prod", "max", "min", "mean", "all", "var", "softmax", "rms_norm"})
"""Reductions along free axes (attribute ``axis``): written rows propagate row by row."""

_COLLECTIVE = "a collective across SPMD programs / ranks (collectives/sim.py)"
NL_INTERPRETER_ONLY = {
    "rand": "draws from the interpreter's random generator",
    "random_seed": "reseeds the interpreter's random generator",
    "dropout": "draws from the interpreter's random generator",
    "device_print": "prints values of run-time data",
    "atomic_rmw": "an indirect read-modify-write of HBM (serialised duplicate indices)",
}
"""nki.language opcodes only the interpreter runs, with the reason."""

NL_EXECUTOR_SPECIAL = {
    "atomic_rmw": "needs the destination memory and indirect indices (interp_inst._atomic_rmw)",
    "all_reduce": "exchanges values between SPMD programs (interp_inst._all_reduce, jax_lower)",
}
"""nki.language opcodes without a value rule: the executors run them themselves."""


def _collectives():
    # why: collective opcodes are registered by collectives/kinds.py, all run by the executor
    return {n for n, info in OPCODES.items() if info.doc.startswith("collective (")}


def _interpreter_only():
    table = {**NL_INTERPRETER_ONLY, **isa_props.INTERPRETER_ONLY}
    for n in _collectives():
        table[n] = _COLLECTIVE
    return table


def _executor_special():
    table = {**NL_EXECUTOR_SPECIAL, **isa_props.EXECUTOR_SPECIAL}
    for n in _collectives():
        table[n] = _COLLECTIVE
    return table


class _Lazy(Mapping):
    """A read-only table built on read (collectives register their opcodes after import)."""

    def __init__(self, build):
        self._build = build
        self._table, self._size = {}, -1

    def _get(self):
        if self._size != len(OPCODES):
            self._table, self._size = self._build(), len(OPCODES)
        return self._table

    def __getitem__(self, k):
        return self._get()[k]

    def __iter__(self):
        return iter(self._get())

    def __len__(self):
        return len(self._get())

    def __repr__(self):
        return repr(self._get())


INTERPRETER_ONLY = _Lazy(_interpreter_only)
"""opcode -> why only the interpreter runs it (nl, nisa and collectives together)."""

EXECUTOR_SPECIAL = _Lazy(_executor_special)
"""opcode -> why it has no value rule (the executors run it themselves)."""

COMPILED_SPECIAL = isa_props.COMPILED_SPECIAL
LOWERED_SPECIAL = isa_props.LOWERED_SPECIAL
"""Opcodes the interpreter runs through a special path but the compiled backend lowers through
their value rule."""

VALID_RANGE = isa_props.VALID_RANGE
"""``nisa.activation`` function -> its documented valid input range ((lo, hi), or (lo, hi,
"abs") for a range on |x|; ``None``: any input). Inputs outside it warn
``ActivationRangeWarning``; a range-checked function runs in the interpreter."""


@dataclass(frozen=True, slots=True)
class OpProps:
    """The executors' facts of one opcode.

    Attributes:
        name: the opcode.
        engine: default engine (``ir.opcodes.ENGINES``).
        family: the IR family (``unary``, ``binary``, ``reduce``...).
        lanewise: each output element reads only the same element of each input.
        cross_partition: an output partition reads other input partitions.
        rowwise: a reduction along free axes (``axis`` attribute).
        compiles: the compiled backend lowers it (``False``: :data:`INTERPRETER_ONLY`).
        special: why it has no value rule (``None``: it has one).
    """

    name: str
    engine: str
    family: str
    lanewise: bool
    cross_partition: bool
    rowwise: bool
    compiles: bool
    special: str | None


@functools.cache
def _props(name: str, n_opcodes: int) -> OpProps | None:
    info = OPCODES.get(name)
    if info is None:
        return None
    lanewise = name in LANEWISE or (info.family in ("unary", "binary", "fill")
                                    and name not in CROSS_LANE)
    return OpProps(name, info.engine, info.family, lanewise, name in CROSS_PARTITION,
                   name in ROWWISE, name not in INTERPRETER_ONLY, EXECUTOR_SPECIAL.get(name))


def props(name: str) -> OpProps | None:
    """The :class:`OpProps` of opcode ``name`` (``None`` for a name the IR does not know)."""
    return _props(name, len(OPCODES))


def registry() -> dict[str, OpProps]:
    """Every registered opcode's :class:`OpProps`."""
    return {n: props(n) for n in OPCODES}
