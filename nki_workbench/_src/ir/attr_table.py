"""The IR's attribute table (read by :mod:`.validate`).

Which attributes each opcode's instructions, kernels and loops may carry, and the Python types
of their values.

An element-wise opcode (registry family ``unary``/``binary``) needs no entry here; any other
opcode's front end lists what it emits in ``_EXTRA``.
"""

from __future__ import annotations

from . import expr as E
from .opcodes import OPCODES

__all__ = ["ATTRIBUTES", "ATTR_TYPES", "KERNEL_ATTRS", "LOOP_ATTRS", "COMMON"]

# why: compute() records the result dtype on every instruction, and `dst += f(x)` fuses the
# accumulation mode `acc` into whatever instruction produced f(x)
COMMON = ("dtype", "acc")
"""Attributes any instruction may carry (its result dtype and fused accumulation mode)."""
_ISA = ("engine",)  # nki.isa records the engine on every instruction
# why: an element-wise opcode's registry entry (family unary/binary) is all it needs here, so
# adding one touches no table in this file
# (entries of _EXTRA below override it for the unary/binary opcodes that carry attributes)
_ELEMENTWISE = [op for op, info in OPCODES.items() if info.family in ("unary", "binary")]
_REDUCE = ("axis", "keepdims")
_ALU2 = ("op0", "op1", "reverse0", "reverse1")
_WITH_RES = ("op", "reduce_op", "reduce_cmd", "dtypes")
# collective kind -> its attributes (nki/nccl.py, nki/distributed.py, lang.highlevel)
_CC_EXTRA = {
    "all_reduce": ("op",), "all_gather": ("dim", "op"), "reduce_scatter": ("dim", "op"),
    "all_to_all": ("split_dim", "concat_dim", "op"), "broadcast": ("root", "op"),
    "collective_permute": ("pairs", "shift"),
    "collective_permute_implicit": ("channel_id", "num_channels"),
    "collective_permute_reduce_implicit": ("channel_id", "num_channels", "op"),
    "send": ("peer_id", "op"), "recv": ("peer_id", "op"),
}

# opcode -> attribute names beyond COMMON (what lang/, isa/, collectives/ and trace/emit.py emit)
_EXTRA: dict[str, tuple] = {
    **{op: () for op in _ELEMENTWISE},
    # nki.language
    "load": (), "store": (), "load_transpose2d": (), "atomic_rmw": ("op",), "copy": (),
    "broadcast_to": (), "memset": _ISA, "rand": (), "random_seed": (),
    **{op: _REDUCE for op in ("sum", "prod", "max", "min", "mean", "all", "var")},
    "loop_reduce": (), "matmul": ("transpose_x",), "transpose": (), "softmax": ("axis",),
    "rms_norm": ("axis", "n", "epsilon"), "dropout": _ISA, "gather_flattened": (),
    "all_reduce": ("op", "program_axes"), "device_print": ("prefix",),
    "reciprocal": _ISA,
    # nki.isa
    "nc_matmul": _ISA + ("is_moving_onezero", "is_stationary_onezero", "is_transpose",
                         "perf_mode", "tile_col", "tile_row", "tile_size"),
    "nc_transpose": _ISA + ("via_matmul",),
    "activation": _ISA + _WITH_RES, "activation_reduce": _ISA + _WITH_RES,
    "tensor_tensor": _ISA + ("op",), "tensor_scalar": _ISA + _ALU2,
    "scalar_tensor_tensor": _ISA + _ALU2, "tensor_tensor_scan": _ISA + _ALU2,
    "tensor_scalar_cumulative": _ISA + ("op0", "op1", "reduce_cmd"),
    "tensor_reduce": _ISA + _REDUCE + ("op", "negate"), "tensor_partition_reduce": _ISA + ("op",),
    "tensor_scalar_reduce": _ISA + ("op0", "reduce_op", "dtypes"),
    "tensor_copy": _ISA + ("via_fp32",), "tensor_copy_dynamic_src": _ISA,
    "tensor_copy_dynamic_dst": _ISA, "tensor_copy_predicated": _ISA + ("reverse_pred",),
    "iota": _ISA, "affine_select": _ISA,
    "range_select": _ISA + ("comp_op0", "comp_op1", "reduce_op", "reduce_cmd", "dtypes"),
    "select_reduce": _ISA + ("reduce_op", "reduce_cmd", "reverse_pred", "dtypes"),
    "sequence_bounds": _ISA, "bn_stats": _ISA, "bn_aggr": _ISA, "nc_n_gather": _ISA,
    "nonzero_with_count": _ISA + ("index_offset", "padding_val"),
    "local_gather": _ISA + ("num_elem_per_idx", "num_valid_indices"),
    "dma_copy": _ISA + ("oob_mode", "dge_mode", "dst_rmw_op"), "dma_transpose": _ISA + ("axes",),
    "max8": _ISA, "nc_find_index8": _ISA, "nc_match_replace8": _ISA + ("dtypes",),
    "nc_stream_shuffle": _ISA + ("shuffle_mask", "reads_dst"),
    "builtin_custom_op": _ISA + ("function_name", "lib_file_name", "ulib_to_isa_version",
                                 "ulib_to_ucode_version", "dtypes"),
    # collectives: <kind>_cc (launch topology) and <kind>_cc_raw (explicit replica_groups)
    **{f"{k}_cc": v for k, v in _CC_EXTRA.items()},
    **{f"{k}_cc_raw": v + ("replica_groups",) for k, v in _CC_EXTRA.items()},
    # LNC instructions between the cores of one launch (collectives/lnc.py)
    "lnc_sendrecv": ("pipe_id",), "lnc_core_barrier": ("cores",),
}

ATTRIBUTES: dict[str, frozenset] = {op: frozenset(COMMON + x) for op, x in _EXTRA.items()}
"""Opcode -> the attribute names an instruction of it may carry."""

_INT = (int,)
_STR = (str,)
_BOOL = (bool,)
_TUPLE = (tuple,)
_OPT_STR = (str, type(None))
ATTR_TYPES: dict[str, tuple] = {
    "dtype": _STR, "acc": _STR, "engine": _STR, "dtypes": _TUPLE, "axis": _TUPLE,
    "axes": _TUPLE, "keepdims": _BOOL, "transpose_x": _BOOL, "n": _INT, "epsilon": (float, int),
    "op": _OPT_STR, "op0": _STR, "op1": _OPT_STR, "reduce_op": _OPT_STR, "reduce_cmd": _STR,
    "reverse0": _BOOL, "reverse1": _BOOL, "reverse_pred": _BOOL, "negate": _BOOL,
    "comp_op0": _STR, "comp_op1": _STR, "via_fp32": _BOOL, "via_matmul": _BOOL,
    "is_moving_onezero": _BOOL, "is_stationary_onezero": _BOOL, "is_transpose": _BOOL,
    "perf_mode": _OPT_STR, "tile_size": _TUPLE, "tile_row": (int, E.Affine),
    "tile_col": (int, E.Affine), "num_elem_per_idx": _INT, "num_valid_indices": _INT,
    "oob_mode": _STR, "dge_mode": _STR, "dst_rmw_op": _OPT_STR, "shuffle_mask": _TUPLE,
    "reads_dst": _BOOL, "function_name": _STR, "lib_file_name": _STR,
    "ulib_to_isa_version": _STR, "ulib_to_ucode_version": _STR, "program_axes": _TUPLE,
    "prefix": _STR, "dim": _INT, "split_dim": _INT, "concat_dim": _INT, "root": _INT,
    "pairs": (tuple, type(None)), "shift": _INT, "channel_id": _INT, "num_channels": _INT,
    "peer_id": _INT, "replica_groups": _TUPLE, "pipe_id": _INT, "cores": _TUPLE,
    "index_offset": _INT, "padding_val": _INT,
}
"""Attribute name -> the Python types its value may have (bool is never an int here)."""

KERNEL_ATTRS = frozenset({"returns", "constants", "has_collectives", "compile_opts",
                          "allocator", "directive_scopes", "output_shapes"})
"""Kernel-level attribute names (trace/kernel.py and the allocation surface)."""
LOOP_ATTRS = frozenset({"directives", "bound", "cond", "core"})
"""Loop attribute names (allocation directives; a dynamic loop's register tensor and the LNC
core whose per-core body it is in)."""
