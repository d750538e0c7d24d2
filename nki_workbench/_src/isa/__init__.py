"""The implementation of ``nki.isa``.

The implementation of ``nki.isa``: every NeuronCore instruction traces into one IR
instruction carrying its engine; numerics live in :mod:`..semantics` (``isa_*.py``).
"""

from ..ir.opcodes import register as _register
from .activation import activation, activation_reduce
from .copy import (
    dma_copy,
    dma_transpose,
    tensor_copy,
    tensor_copy_dynamic_dst,
    tensor_copy_dynamic_src,
    tensor_copy_predicated,
)
from .custom import builtin_custom_op, register_custom_op
from .enums import (
    dge_mode,
    dma_engine,
    engine,
    fp32,
    get_nc_version,
    gpsimd_engine,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    sync_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from .matmul import nc_matmul, nc_transpose
from .select import (
    affine_select,
    dropout,
    iota,
    memset,
    range_select,
    select_reduce,
    sequence_bounds,
)
from .stats import (
    bn_aggr,
    bn_stats,
    local_gather,
    max8,
    nc_find_index8,
    nc_match_replace8,
    nc_stream_shuffle,
)
from .tensor_ops import (
    reciprocal,
    scalar_tensor_tensor,
    tensor_partition_reduce,
    tensor_reduce,
    tensor_scalar,
    tensor_scalar_cumulative,
    tensor_scalar_reduce,
    tensor_tensor,
    tensor_tensor_scan,
)

# opcode -> (default engine, family, one line); memset/dropout/reciprocal share nl's opcodes
OPCODES = {
    "nc_matmul": ("tensor", "matmul", "stationary.T @ moving into fp32 PSUM"),
    "nc_transpose": ("tensor", "matmul", "partition <-> free transpose (TensorE or VectorE)"),
    "activation": ("scalar", "isa", "op(data * scale + bias), optional accumulator reduction"),
    "activation_reduce": ("scalar", "isa", "activation + free-axes reduction into reduce_res"),
    "tensor_tensor": ("vector", "binary", "element-wise ALU op of two tiles"),
    "tensor_scalar": ("vector", "binary", "(data op0 operand0) op1 operand1, [P,1] operands"),
    "scalar_tensor_tensor": ("vector", "binary", "(data op0 operand0) op1 tile"),
    "tensor_tensor_scan": ("vector", "isa", "scan along the free dim with two ALU ops"),
    "tensor_scalar_cumulative": ("vector", "isa", "op0 with a scalar, then an op1 scan along the "
                                 "free dim from the accumulator registers"),
    "tensor_reduce": ("vector", "reduce", "ALU reduction along free axes"),
    "tensor_partition_reduce": ("gpsimd", "reduce", "ALU reduction across partitions"),
    "tensor_scalar_reduce": ("vector", "isa", "tensor_scalar + reduction into reduce_res"),
    "tensor_copy": ("vector", "unary", "copy with cast (Vector/Scalar/GpSimd)"),
    "tensor_copy_dynamic_src": ("vector", "unary", "copy from a run-time offset in SBUF/PSUM"),
    "tensor_copy_dynamic_dst": ("vector", "unary", "copy to a run-time offset in SBUF/PSUM"),
    "tensor_copy_predicated": ("vector", "binary", "dst = where(predicate, src, dst)"),
    "iota": ("gpsimd", "fill", "tile from an affine index expression"),
    "affine_select": ("gpsimd", "unary", "select by an affine predicate"),
    "range_select": ("vector", "isa", "select by free-index bounds, max into accumulators"),
    "select_reduce": ("vector", "isa", "dst = where(pred, on_true, on_false), max reduction"),
    "sequence_bounds": ("gpsimd", "isa", "segment start/end indices"),
    "bn_stats": ("vector", "isa", "even/odd count, mean, var*count per partition"),
    "bn_aggr": ("vector", "isa", "aggregate bn_stats into mean, variance"),
    "local_gather": ("gpsimd", "isa", "gather within 16-partition GpSimd core groups"),
    "dma_copy": ("dma", "dma", "DMA copy (indirect HBM indices, oob modes, rmw add)"),
    "dma_transpose": ("dma", "dma", "DMA transpose"),
    "max8": ("vector", "isa", "8 largest values per partition"),
    "nc_find_index8": ("vector", "isa", "indices of 8 values per partition"),
    "nc_match_replace8": ("vector", "isa", "replace 8 values per partition"),
    "nc_stream_shuffle": ("vector", "isa", "partition shuffle within 32-partition quadrants"),
    "builtin_custom_op": ("gpsimd", "isa", "pre-built GpSimd library call"),
    # today's nki.isa only (NKI 0.2+; front end in current/isa_gpsimd.py)
    "nc_n_gather": ("gpsimd", "isa", "per-partition gather over the flattened free dims"),
    "nonzero_with_count": ("gpsimd", "isa", "indices of non-zero elements, padding, count"),
}
for _name, (_eng, _fam, _doc) in OPCODES.items():
    _register(_name, _eng, _fam, _doc)

__all__ = [
    "activation", "activation_reduce", "affine_select", "bn_aggr", "bn_stats",
    "builtin_custom_op", "dma_copy", "dma_transpose", "dropout", "get_nc_version", "iota",
    "local_gather", "max8", "memset", "nc_find_index8", "nc_match_replace8", "nc_matmul",
    "nc_stream_shuffle", "nc_transpose", "range_select", "reciprocal", "scalar_tensor_tensor",
    "select_reduce", "sequence_bounds", "tensor_copy", "tensor_copy_dynamic_dst",
    "tensor_copy_dynamic_src", "tensor_copy_predicated", "tensor_partition_reduce",
    "tensor_reduce", "tensor_scalar", "tensor_scalar_reduce", "tensor_tensor",
    "tensor_tensor_scan", "tensor_scalar_cumulative", "engine", "reduce_cmd", "dge_mode",
    "oob_mode", "nc_version", "fp32",
    "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "unknown_engine",
    "dma_engine", "sync_engine", "register_custom_op", "OPCODES",
]
