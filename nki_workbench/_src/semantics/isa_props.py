"""Per-opcode properties of the ``nki.isa`` instructions that the executors need.

The opcode registry (:mod:`.registry`) reads these; nothing here computes a value.
"""

from __future__ import annotations

__all__ = ["INTERPRETER_ONLY", "EXECUTOR_SPECIAL", "COMPILED_SPECIAL", "LOWERED_SPECIAL",
           "CROSS_PARTITION",
           "VALID_RANGE"]

INTERPRETER_ONLY = {
    "tensor_scalar_reduce": "two destinations (the data and reduce_res)",
    "range_select": "the VectorE accumulator registers (reduce_cmd) and a second destination",
    "select_reduce": "the VectorE accumulator registers (reduce_cmd) and a second destination",
    "tensor_scalar_cumulative": "the VectorE accumulator registers carry the scan between "
                                "instructions (reduce_cmd=reduce)",
    "nc_match_replace8": "two destinations; a value absent from the data warns (data-dependent)",
    "nc_find_index8": "a value absent from the data warns (data-dependent)",
    "local_gather": "an index outside the partition raises (data-dependent)",
    "builtin_custom_op": "runs a registered Python reference on host arrays",
    "nc_n_gather": "an index outside the partition raises (data-dependent)",
    "nonzero_with_count": "a data-dependent compaction of each partition",
}
"""nki.isa opcodes only the interpreter runs, with the reason (the compiled backend hands a
kernel using one to the interpreter)."""

EXECUTOR_SPECIAL = {
    "dma_copy": "an indirect copy / scatter-add: memory movement (sim/isa_exec.py)",
    "builtin_custom_op": "calls the registered Python reference (sim/isa_exec.py)",
}
"""nki.isa opcodes without a value rule: the interpreter runs them itself."""

LOWERED_SPECIAL = {
    "dma_copy": "its static form (no run-time indices, mask or dst_rmw_op) is lowered by "
                "sim/jax_dma.py; the rest runs in the interpreter",
}
"""Opcodes without a value rule that the compiled backend lowers itself (``sim/jax_dma.py``
``LOWERINGS`` must name each), with which forms lower."""

COMPILED_SPECIAL = frozenset({"activation", "activation_reduce"})
"""Opcodes the interpreter runs through a special path (registers) that the compiled backend
lowers through their value rule: the plain form and ``reset_reduce`` (a fresh register chain,
which ``activation_reduce`` always is); the variants that read earlier register state fall back
at lowering."""

CROSS_PARTITION = frozenset({"nc_matmul", "nc_transpose", "tensor_partition_reduce",
                             "nc_stream_shuffle", "local_gather", "dma_transpose", "iota",
                             "sequence_bounds"})
"""nki.isa opcodes whose output partition reads more than the same input partition."""


def _valid_range():
    from ..isa.activation import VALID_RANGE as table
    return table


VALID_RANGE = _valid_range()
"""Activation function -> documented valid input range ((lo, hi) or (lo, hi, "abs")), or None."""
