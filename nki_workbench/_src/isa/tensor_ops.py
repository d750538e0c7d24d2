"""Vector/GpSimd/Scalar ALU instructions of ``nki.isa``.

Vector/GpSimd/Scalar ALU instructions: ``tensor_tensor``, ``tensor_scalar``,
``scalar_tensor_tensor``, ``tensor_tensor_scan``, ``tensor_reduce``,
``tensor_partition_reduce``, ``tensor_scalar_reduce`` and ``reciprocal`` (nki-api.md §4.3).
"""

from __future__ import annotations

from .. import dtypes as D
from ..ir import Scalar
from ..lang.alu import REDUCIBLE
from ..lang.common import axes_of
from . import common as K
from .enums import reduce_cmd as _cmd

__all__ = ["tensor_tensor", "tensor_scalar", "scalar_tensor_tensor", "tensor_tensor_scan",
           "tensor_reduce", "tensor_partition_reduce", "tensor_scalar_reduce", "reciprocal"]

_GPSIMD_INT = frozenset({"add", "subtract", "multiply"})
_TS_SCALAR_PAIRS = {("multiply", "add"), ("multiply", None), ("add", None)}


def _ints(*ts) -> bool:
    return all(D.is_int(t.dtype) for t in ts if K.is_tile(t))


def _check_bitvec(api, ops, *operands):
    kinds = {o in K.BITVEC for o in ops if o is not None}
    if len(kinds) > 1:
        raise K.err(None, f"{api}: operators {[o for o in ops if o]} mix bitvec and arithmetic "
                    "operations", "use two bitvec or two arithmetic operators")
    if True in kinds:
        bad = [D.name_of(K.M.dtype_of(x)) for x in operands
               if x is not None and not (D.is_int(K.M.dtype_of(x)) or D.is_bool(K.M.dtype_of(x)))]
        if bad:
            raise K.err(None, f"{api}: bitvec operators {[o for o in ops if o]} take integer "
                        f"operands, got {bad}", "cast to an integer dtype or use an arithmetic "
                        "operator")


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=0, **kwargs):
    """Element-wise ``op(data1, data2)`` of two tiles on Vector (or GpSimd) Engine.

    Arithmetic operators compute in float32; bitvec operators work on the integer bits.
    ``power`` and integer add/subtract/multiply run on GpSimd (exact 32-bit integer math).

    Args:
        data1: tile ``[P, ...]`` (SBUF or PSUM).
        data2: tile with the same partition size and elements per partition.
        op: ALU operator (``np.add``, ``nl.maximum``...).
        dtype: result dtype (default: promotion of the inputs).
        mask: compile-time predicate.
        engine: ``nisa.vector_engine``/``nisa.gpsimd_engine`` (default: chosen by op/dtype).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data1``.
    """
    api = "nisa.tensor_tensor"
    K.tile(data1, api, "data1")
    K.tile(data2, api, "data2")
    name = K.alu(op, api)
    K.same_partitions(api, ("data1", data1), ("data2", data2))
    K.same_free_size(api, ("data1", data1), ("data2", data2))
    K.no_both_psum(api, data1, data2, "data1", "data2")
    _check_bitvec(api, [name], data1, data2)
    psum_in = any(t.buffer == "psum" for t in (data1, data2))
    gp = name == "power" or (name in _GPSIMD_INT and _ints(data1, data2) and not psum_in)
    eng = K.pick_engine(api, engine, "gpsimd" if gp else "vector", {"vector", "gpsimd"})
    K.require_psum_free(api, eng, data1, data2)
    dt = K.out_dtype(dtype, data1, data2)
    return K.compute("tensor_tensor", [data1, data2], data1.shape, dt, eng,
                     attrs={"op": name}, mask=mask, api=api)


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  *, dtype=None, mask=None, engine=0, **kwargs):
    """``(data <op0> operand0) <op1> operand1`` with scalar or per-partition ``[P, 1]`` operands.

    Args:
        data: input tile.
        op0: first ALU operator.
        operand0: compile-time scalar or ``[P, 1]`` tile.
        reverse0: compute ``operand0 <op0> data`` instead.
        op1: optional second operator (with ``operand1``).
        operand1: scalar or ``[P, 1]`` tile for ``op1``.
        reverse1: compute ``operand1 <op1> tmp`` instead.
        dtype: result dtype (default: promotion of the operands).
        mask: compile-time predicate.
        engine: Vector (default), Scalar (NeuronCore-v3+: multiply/add only) or GpSimd
            (``rsqrt`` only; the default for it).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data``.
    """
    api = "nisa.tensor_scalar"
    K.tile(data, api, "data")
    n0 = K.alu(op0, api, "op0")
    if (op1 is None) != (operand1 is None):
        raise K.err(None, f"{api}: op1 and operand1 must both be given or both be None")
    n1 = K.alu(op1, api, "op1") if op1 is not None else None
    p = data.shape[0]
    o0 = K.scalar_or_vector(operand0, p, api, "operand0")
    o1 = K.scalar_or_vector(operand1, p, api, "operand1") if operand1 is not None else Scalar(0)
    _check_bitvec(api, [n0, n1], data, operand0, operand1)
    default = "gpsimd" if "rsqrt" in (n0, n1) else "vector"
    eng = K.pick_engine(api, engine, default, {"vector", "scalar", "gpsimd"})
    if eng == "gpsimd" and {n0, n1} - {"rsqrt", None}:
        raise K.err("wb_isa_engine_unsupported", f"{api}: GpSimd Engine only runs rsqrt here, "
                    f"got ({n0}, {n1})", "leave engine unset for Vector Engine")
    if eng == "scalar":
        if K.target().nc_version < 3 or (n0, n1) not in _TS_SCALAR_PAIRS:
            raise K.err("wb_isa_engine_unsupported",
                        f"{api}: Scalar Engine supports (multiply, add), (multiply, None) and "
                        f"(add, None) from NeuronCore-v3 on; got ({n0}, {n1}) on "
                        f"{K.target().name}", "use the default Vector Engine")
    K.require_psum_free(api, eng, data)
    dt = K.out_dtype(dtype, data, operand0, operand1)
    return K.compute("tensor_scalar", [data, o0, o1], data.shape, dt, eng, mask=mask, api=api,
                     attrs={"op0": n0, "op1": n1, "reverse0": bool(reverse0),
                            "reverse1": bool(reverse1)})


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         dtype=None, mask=None, **kwargs):
    """``(data <op0> operand0) <op1> operand1`` where ``operand1`` is a full tile (Vector Engine).

    Args:
        data: input tile.
        op0: ALU operator applied with ``operand0``.
        operand0: scalar or ``[P, 1]`` tile.
        op1: ALU operator applied with ``operand1``.
        operand1: tile with ``data``'s partitions and elements per partition.
        reverse0: ``operand0 <op0> data`` instead.
        reverse1: ``operand1 <op1> tmp`` instead.
        dtype: result dtype.
        mask: compile-time predicate.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data``.
    """
    api = "nisa.scalar_tensor_tensor"
    K.tile(data, api, "data")
    K.tile(operand1, api, "operand1")
    n0, n1 = K.alu(op0, api, "op0"), K.alu(op1, api, "op1")
    o0 = K.scalar_or_vector(operand0, data.shape[0], api, "operand0")
    K.same_partitions(api, ("data", data), ("operand1", operand1))
    K.same_free_size(api, ("data", data), ("operand1", operand1))
    K.no_both_psum(api, data, operand1, "data", "operand1")
    _check_bitvec(api, [n0, n1], data, operand0, operand1)
    dt = K.out_dtype(dtype, data, operand0, operand1)
    return K.compute("scalar_tensor_tensor", [data, o0, operand1], data.shape, dt, "vector",
                     mask=mask, api=api, attrs={"op0": n0, "op1": n1, "reverse0": bool(reverse0),
                                                "reverse1": bool(reverse1)})


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *,
                       dtype=None, mask=None, **kwargs):
    """Scan along the free dim: ``res[:, i] = op1(op0(data0[:, i], res[:, i-1]), data1[:, i])``.

    Args:
        data0: tile ``[P, F]``.
        data1: tile of the same shape.
        initial: scalar or ``[P, 1]`` tile standing for ``res[:, -1]``.
        op0: operator combining ``data0`` with the running result.
        op1: operator combining that with ``data1``.
        reverse0: ``op0(res[:, i-1], data0[:, i])`` instead.
        reverse1: ``op1(data1[:, i], tmp)`` instead.
        dtype: result dtype (default: promotion of the inputs).
        mask: compile-time predicate.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data0``.
    """
    api = "nisa.tensor_tensor_scan"
    K.tile(data0, api, "data0")
    K.tile(data1, api, "data1")
    n0, n1 = K.alu(op0, api, "op0"), K.alu(op1, api, "op1")
    if tuple(data0.shape) != tuple(data1.shape):
        K.same_partitions(api, ("data0", data0), ("data1", data1))
        raise K.err(None, f"{api}: data0 {list(data0.shape)} and data1 {list(data1.shape)} "
                    "must have the same shape")
    K.no_both_psum(api, data0, data1, "data0", "data1")
    init = K.scalar_or_vector(initial, data0.shape[0], api, "initial")
    dt = K.out_dtype(dtype, data0, data1)
    return K.compute("tensor_tensor_scan", [data0, data1, init], data0.shape, dt, "vector",
                     mask=mask, api=api, attrs={"op0": n0, "op1": n1, "reverse0": bool(reverse0),
                                                "reverse1": bool(reverse1)})


_SCAN_OPS = frozenset({"add", "subtract", "multiply", "maximum", "minimum"})


def tensor_scalar_cumulative(src, dst, op0, op1, imm0, imm1=None, reduce_cmd=_cmd.reset_reduce,
                             *, mask=None, **kwargs):
    """``dst[:, j] = op1(acc, src[:, j] <op0> imm0)`` accumulated along the free dim (VectorE).

    The accumulator (one per partition, the Vector Engine's registers) starts by ``reduce_cmd``:
    ``reset_reduce``/``reset``/``idle`` at ``op1``'s identity, ``load_reduce`` at ``imm1``,
    ``reduce`` where the previous cumulative instruction left it; it ends as the last column.

    Args:
        src: input tile ``[P, F...]``.
        dst: destination tile with ``src``'s partitions and elements per partition.
        op0: ALU operator applied with ``imm0``.
        op1: the scan operator: add, subtract, multiply, max or min.
        imm0: scalar or ``[P, 1]`` tile.
        imm1: scalar or ``[P, 1]`` tile, the initial accumulator of ``load_reduce``.
        reduce_cmd: a ``nisa.reduce_cmd``.
        mask: compile-time predicate.
        **kwargs: other NKI keyword arguments (accepted and ignored).
    """
    api = "nisa.tensor_scalar_cumulative"
    K.tile(src, api, "src")
    K.tile(dst, api, "dst")
    if dst.shape[0] != src.shape[0] or K.free_size(dst) != K.free_size(src):
        raise K.err(None, f"{api}: dst {list(dst.shape)} must have src's partitions and "
                    f"elements per partition ({list(src.shape)})")
    n0, n1 = K.alu(op0, api, "op0"), K.alu(op1, api, "op1")
    if n1 not in _SCAN_OPS:
        raise K.err(None, f"{api}: op1 must be add, subtract, multiply, max or min, got {n1}")
    cmd = K.cmd_name(reduce_cmd, api)
    if cmd == "load_reduce" and imm1 is None:
        raise K.err(None, f"{api}: reduce_cmd=load_reduce loads the accumulator from imm1, "
                    "which is None", "pass imm1 (a scalar or a [P, 1] tile)")
    p = src.shape[0]
    o0 = K.scalar_or_vector(imm0, p, api, "imm0")
    o1 = K.scalar_or_vector(imm1, p, api, "imm1") if imm1 is not None else Scalar(0.0)
    K.emit("tensor_scalar_cumulative", [dst], [src, o0, o1], "vector", mask=mask, api=api,
           attrs={"op0": n0, "op1": n1, "reduce_cmd": cmd, "dtype": D.name_of(dst.dtype)})


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False,
                  **kwargs):
    """Reduce ``data`` along free axes with an ALU operator (Vector Engine).

    Args:
        op: reducible ALU operator (add, subtract, multiply, max, min, bitwise/logical and/or/xor).
        data: input tile.
        axis: int or tuple of free axes (never 0, the partition axis).
        mask: compile-time predicate over ``data``'s elements.
        dtype: result dtype (default: ``data``'s).
        negate: negate the result.
        keepdims: keep reduced axes as size 1.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile.
    """
    api = "nisa.tensor_reduce"
    K.tile(data, api, "data")
    name = K.alu(op, api)
    if name not in REDUCIBLE:
        raise K.err(None, f"{api}: '{name}' is not a reduction operator",
                    f"use one of {', '.join(sorted(REDUCIBLE))}")
    _check_bitvec(api, [name], data)
    axes = axes_of(api, axis, data.ndim)
    shape = tuple((1 if k in axes else s) for k, s in enumerate(data.shape)
                  if keepdims or k not in axes)
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    return K.compute("tensor_reduce", [data], shape or (data.shape[0],), dt, "vector",
                     mask=mask, api=api, attrs={"op": name, "axis": axes,
                                                "keepdims": bool(keepdims),
                                                "negate": bool(negate)})


_PARTITION_OPS = {"add", "maximum", "bitwise_or", "bitwise_and"}


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    """Reduce across the partition axis on GpSimd: ``[P, ...] -> [1, ...]``.

    Args:
        op: ``np.add``, ``np.maximum``, ``np.bitwise_or`` or ``np.bitwise_and``.
        data: input tile (SBUF).
        mask: compile-time predicate.
        dtype: result dtype (default: ``data``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new ``[1, ...]`` tile.
    """
    api = "nisa.tensor_partition_reduce"
    K.tile(data, api, "data")
    name = K.alu(op, api)
    if name not in _PARTITION_OPS:
        raise K.err(None, f"{api}: op must be add, max, bitwise_or or bitwise_and, got {name}")
    _check_bitvec(api, [name], data)
    K.require_psum_free(api, "gpsimd", data)
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    return K.compute("tensor_partition_reduce", [data], (1,) + tuple(data.shape[1:]), dt,
                     "gpsimd", mask=mask, api=api, attrs={"op": name})


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False,
                         dtype=None, mask=None, **kwargs):
    """``data <op0> operand0`` plus its reduction along all free axes (Vector Engine).

    Returns ``res = data <op0> operand0`` and writes ``reduce_res[:, 0] = reduce_op(res)``.

    Args:
        data: input tile.
        op0: arithmetic ALU operator.
        operand0: scalar or ``[P, 1]`` tile.
        reduce_op: add, subtract, multiply, max or min.
        reduce_res: ``[P, 1]`` tile written in place.
        reverse0: documented as not supported yet by NKI (refused).
        dtype: result dtype.
        mask: compile-time predicate.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data``.
    """
    api = "nisa.tensor_scalar_reduce"
    K.tile(data, api, "data")
    n0, rn = K.alu(op0, api, "op0"), K.alu(reduce_op, api, "reduce_op")
    if n0 in K.BITVEC:
        raise K.err(None, f"{api}: op0 must be an arithmetic operator, got {n0}")
    if rn not in K.ARITH_REDUCE:
        raise K.err(None, f"{api}: reduce_op must be add, subtract, multiply, max or min, "
                    f"got {rn}")
    if reverse0:
        raise K.err("wb_isa_unsupported", f"{api}: reverse0=True is documented as not "
                    "supported yet", "use nisa.tensor_scalar(reverse0=True) then reduce")
    p = data.shape[0]
    o0 = K.scalar_or_vector(operand0, p, api, "operand0")
    K.reduce_res_tile(reduce_res, p, api)
    dt = K.out_dtype(dtype, data, operand0)
    out = K.fresh_tile(data.shape, dt, api)
    K.emit("tensor_scalar_reduce", [out, reduce_res], [data, o0], "vector", mask=mask, api=api,
           attrs={"op0": n0, "reduce_op": rn, "dtype": D.name_of(dt),
                  "dtypes": (D.name_of(dt), D.name_of(reduce_res.dtype))})
    return out


def reciprocal(data, *, dtype=None, mask=None, **kwargs):
    """Element-wise ``1 / data`` on Vector Engine (more precise than ScalarE's activation).

    Args:
        data: input tile.
        dtype: result dtype (default: ``data``'s).
        mask: compile-time predicate.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile.
    """
    api = "nisa.reciprocal"
    K.tile(data, api, "data")
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    return K.compute("reciprocal", [data], data.shape, dt, "vector", mask=mask, api=api)
