"""Selections and generated tiles of ``nki.isa``.

Selections and generated tiles: ``affine_select``, ``range_select``, ``select_reduce``,
``dropout``, ``iota``, ``memset`` and ``sequence_bounds``.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..ir import Scalar
from ..ir import expr as E
from ..trace.index import IndexExpr
from . import common as K
from .enums import engine as _engine
from .enums import fp32
from .enums import reduce_cmd as _cmd

__all__ = ["affine_select", "range_select", "select_reduce", "dropout", "iota", "memset",
           "sequence_bounds"]

_CMP_OPS = frozenset({"equal", "less", "less_equal", "greater", "greater_equal"})
_FP32_MIN_BITS = 0xFF7FFFFF


def _is_fp32_min(v) -> bool:
    if not isinstance(v, (float, np.floating)):
        return False
    return int(np.array(v, np.float32).view(np.uint32)) == _FP32_MIN_BITS


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    """``out = on_true_tile where pred else on_false_value`` with an affine predicate (GpSimd).

    Args:
        pred: one comparison of affine index expressions, e.g. ``iy < ix`` with
            ``ix, iy = nl.mgrid[0:128, 0:128]``.
        on_true_tile: input tile (float or 8/16-bit integer).
        on_false_value: float32 scalar (e.g. ``nl.fp32.min``).
        mask: compile-time predicate.
        dtype: result dtype (default: ``on_true_tile``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``on_true_tile``.
    """
    api = "nisa.affine_select"
    K.tile(on_true_tile, api, "on_true_tile")
    if not isinstance(pred, IndexExpr) or not isinstance(pred.expr, E.Pred):
        raise K.err("err_unsupported_expression_in_mask", f"{api}: pred must be a comparison "
                    f"of index expressions, got {pred!r}", "e.g. pred=(iy < ix)")
    p = pred.expr
    if p.op not in ("lt", "le", "gt", "ge", "eq", "ne"):
        raise K.err("err_unsupported_expression_in_mask", f"{api}: pred must be a single "
                    "comparison (no &, |, ~)", "fold the conditions into one comparison or "
                    "apply two affine_selects")
    if not E.is_affine(p) or E.dyns(p):
        raise K.err("err_unsupported_expression_in_mask", f"{api}: pred "
                    f"'{E.to_str(p)}' is not affine in compile-time indices")
    try:
        np.broadcast_shapes(E.grid_shape([p]), tuple(on_true_tile.shape))
    except ValueError:
        raise K.err(None, f"{api}: pred grid {list(E.grid_shape([p]))} does not match "
                    f"on_true_tile {list(on_true_tile.shape)}") from None
    dt = D.canonical(dtype) if dtype is not None else on_true_tile.dtype
    for d in (on_true_tile.dtype, dt):
        if D.is_int(d) and D.itemsize(d) > 2 or D.name_of(d) in ("tfloat32", "bool"):
            raise K.err(None, f"{api}: dtype {D.name_of(d)} not supported; use a float or an "
                        "8/16-bit integer dtype")
    if not isinstance(on_false_value, (float, int, np.floating, np.integer)) or \
            isinstance(on_false_value, bool):
        raise K.err(None, f"{api}: on_false_value must be a float32 scalar, got "
                    f"{type(on_false_value).__name__}")
    # why: no PSUM check here: NKI's own SD-attention tutorial applies affine_select directly to
    # a PSUM matmul result (the compiler stages the operand), so real kernels rely on it
    return K.compute("affine_select", [p, on_true_tile, Scalar(float(on_false_value))],
                     on_true_tile.shape, dt, "gpsimd", mask=mask, api=api)


def _range_start(v, api):
    if isinstance(v, IndexExpr):
        if isinstance(v.expr, E.Pred) or E.iotas(v.expr) or E.dyns(v.expr):
            raise K.err(None, f"{api}: range_start must be an int or a loop-variable expression")
        return v.expr
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return E.const(int(v))
    raise K.err(None, f"{api}: range_start must be a compile-time int, got {v!r}")


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=_cmd.idle, reduce_res=None, reduce_op=np.amax, range_start=0,
                 on_false_value=fp32.min, mask=None, dtype=None, **kwargs):
    """Keep elements whose free index lies within two bounds (trn2+, Vector Engine).

    An element is kept when ``range_start + f`` satisfies both bound comparisons, else it becomes
    ``on_false_value``; optional max reduction into the VectorE accumulators.

    Args:
        on_true_tile: float tile.
        comp_op0: comparison (``np.greater_equal``...) of the index with ``bound0``.
        comp_op1: comparison of the index with ``bound1``.
        bound0: float32 ``[P, 1]`` tile.
        bound1: float32 ``[P, 1]`` tile.
        reduce_cmd: a ``nisa.reduce_cmd``.
        reduce_res: optional ``[P, 1]`` tile receiving the accumulators.
        reduce_op: max only.
        range_start: int or loop-variable expression.
        on_false_value: must be ``nl.fp32.min``.
        mask: compile-time predicate.
        dtype: result dtype (default: ``on_true_tile``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``on_true_tile``.
    """
    api = "nisa.range_select"
    tgt = K.target()
    if tgt.nc_version < 3:
        raise K.err("wb_isa_unsupported", f"{api} needs NeuronCore-v3 or later (target "
                    f"{tgt.name})", "use platform_target='trn2'")
    K.tile(on_true_tile, api, "on_true_tile")
    if not D.is_float(on_true_tile.dtype):
        raise K.err(None, f"{api}: on_true_tile must be a float tile, got "
                    f"{D.name_of(on_true_tile.dtype)}")
    c0, c1 = K.alu(comp_op0, api, "comp_op0"), K.alu(comp_op1, api, "comp_op1")
    for c in (c0, c1):
        if c not in _CMP_OPS:
            raise K.err(None, f"{api}: comparison {c} not supported",
                        "use np.equal, np.less, np.less_equal, np.greater or np.greater_equal")
    p = on_true_tile.shape[0]
    b0 = K.scalar_or_vector(bound0, p, api, "bound0", dtypes=("float32",))
    b1 = K.scalar_or_vector(bound1, p, api, "bound1", dtypes=("float32",))
    for b, n in ((b0, "bound0"), (b1, "bound1")):
        if not K.is_tile(b):
            raise K.err(None, f"{api}: {n} must be a float32 [P, 1] tile")
    rn = K.alu(reduce_op, api, "reduce_op")
    if rn != "maximum":
        raise K.err(None, f"{api}: reduce_op must be max, got {rn}")
    if not _is_fp32_min(on_false_value):
        raise K.err(None, f"{api}: on_false_value must be nl.fp32.min, got {on_false_value!r}")
    start = _range_start(range_start, api)
    f = K.free_size(on_true_tile)
    try:
        _, hi = E.bounds(start, {k: v for k, v in K.C.require(api).var_ranges.items()
                                 if v is not None})
        if hi + f - 1 >= 1 << 24:
            raise K.err(None, f"{api}: range_start + index reaches {hi + f - 1}, not below 2**24")
    except (ValueError, KeyError):
        pass
    cmd = K.cmd_name(reduce_cmd, api)
    dt = D.canonical(dtype) if dtype is not None else on_true_tile.dtype
    ins = [on_true_tile, b0, b1, start]
    attrs = {"comp_op0": c0, "comp_op1": c1, "reduce_op": rn, "reduce_cmd": cmd}
    return _with_reduce(api, "range_select", ins, on_true_tile.shape, dt, attrs, reduce_res,
                        mask, p)


def _with_reduce(api, opcode, ins, shape, dt, attrs, reduce_res, mask, p):
    if reduce_res is None:
        return K.compute(opcode, ins, shape, dt, "vector", attrs=attrs, mask=mask, api=api)
    K.reduce_res_tile(reduce_res, p, api)
    if not D.is_float(reduce_res.dtype):
        raise K.err(None, f"{api}: reduce_res must be a float tile")
    out = K.fresh_tile(shape, dt, api)
    attrs.update(dtype=D.name_of(dt), dtypes=(D.name_of(dt), D.name_of(reduce_res.dtype)))
    K.emit(opcode, [out, reduce_res], ins, "vector", attrs=attrs, mask=mask, api=api)
    return out


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None,
                  reduce_cmd=_cmd.idle, reduce_op=np.amax, reverse_pred=False, mask=None,
                  dtype=None, **kwargs):
    """``dst = where(predicate, on_true, on_false)`` on Vector Engine.

    Optionally the per-partition max goes into the VectorE accumulators / ``reduce_res``.

    Args:
        dst: destination tile (written in place).
        predicate: int8/uint8/int16/uint16 tile; non-zero = true.
        on_true: tile shaped like ``dst``.
        on_false: float32 scalar or ``[P, 1]`` tile.
        reduce_res: optional float ``[P, 1]`` tile.
        reduce_cmd: a ``nisa.reduce_cmd``.
        reduce_op: max only.
        reverse_pred: select ``on_true`` where the predicate is false.
        mask: compile-time predicate.
        dtype: result dtype (default: ``dst``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).
    """
    api = "nisa.select_reduce"
    for t, n in ((dst, "dst"), (predicate, "predicate"), (on_true, "on_true")):
        K.tile(t, api, n)
    if not (tuple(dst.shape) == tuple(on_true.shape) == tuple(predicate.shape)):
        K.same_partitions(api, ("dst", dst), ("predicate", predicate), ("on_true", on_true))
        raise K.err(None, f"{api}: dst {list(dst.shape)}, predicate {list(predicate.shape)} "
                    f"and on_true {list(on_true.shape)} must have the same shape")
    if D.name_of(on_true.dtype) in ("tfloat32", "int32", "uint32"):
        raise K.err(None, f"{api}: on_true cannot be {D.name_of(on_true.dtype)}")
    # why: a bool tile is one byte per element like uint8; NKI's own tests pass np.bool_ data
    if D.name_of(predicate.dtype) not in ("bool", "int8", "uint8", "int16", "uint16"):
        raise K.err(None, f"{api}: predicate must be bool/int8/uint8/int16/uint16, got "
                    f"{D.name_of(predicate.dtype)}")
    K.no_both_psum(api, on_true, predicate, "on_true", "predicate")
    p = dst.shape[0]
    if K.is_tile(on_false):
        off = K.scalar_or_vector(on_false, p, api, "on_false")
    elif isinstance(on_false, (float, np.floating)):
        off = Scalar(float(on_false))
    else:
        raise K.err(None, f"{api}: a scalar on_false must be a float32, got {on_false!r}")
    rn = K.alu(reduce_op, api, "reduce_op")
    if rn != "maximum":
        raise K.err(None, f"{api}: reduce_op must be max, got {rn}")
    cmd = K.cmd_name(reduce_cmd, api)
    dt = D.canonical(dtype) if dtype is not None else dst.dtype
    attrs = {"reduce_op": rn, "reduce_cmd": cmd, "reverse_pred": bool(reverse_pred),
             "dtype": D.name_of(dt)}
    outs = [dst]
    if reduce_res is not None:
        K.reduce_res_tile(reduce_res, p, api)
        if not D.is_float(reduce_res.dtype):
            raise K.err(None, f"{api}: reduce_res must be a float tile")
        outs.append(reduce_res)
        attrs["dtypes"] = (D.name_of(dt), D.name_of(reduce_res.dtype))
    K.emit("select_reduce", outs, [predicate, on_true, off], "vector", attrs=attrs, mask=mask,
           api=api)


def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    """Replace each element by 0 with probability ``prob`` (Vector Engine; no rescaling).

    Args:
        data: input tile.
        prob: scalar, or ``[P, 1]`` tile of per-partition probabilities.
        mask: compile-time predicate.
        dtype: result dtype (integer data: must equal ``data``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data``.
    """
    api = "nisa.dropout"
    K.tile(data, api, "data")
    pr = K.scalar_or_vector(prob, data.shape[0], api, "prob")
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    if D.is_int(data.dtype):
        if dt != data.dtype:
            raise K.err(None, f"{api}: for integer data the result dtype must be "
                        f"{D.name_of(data.dtype)}, got {D.name_of(dt)}")
        if K.is_tile(prob) and D.name_of(prob.dtype) != "float32":
            raise K.err(None, f"{api}: for integer data prob must be float32")
    if isinstance(pr, Scalar) and not 0.0 <= float(pr.value) <= 1.0:
        raise K.err(None, f"{api}: prob {pr.value} is not a probability in [0, 1]")
    return K.compute("dropout", [data, pr], data.shape, dt, "vector", mask=mask, api=api)


def iota(expr, dtype, *, mask=None, **kwargs):
    """A constant tile from an affine expression of ``nl.arange`` indices (GpSimd).

    Computed in int32, then cast to ``dtype``; the shape is the broadcast shape of ``expr``.

    Args:
        expr: index expression (``nl.arange(128)[:, None] * 2 + j``) or a loop variable.
        dtype: result dtype (integer or float).
        mask: compile-time predicate.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new SBUF tile.
    """
    api = "nisa.iota"
    if isinstance(expr, (int, np.integer)) and not isinstance(expr, bool):
        e = E.const(int(expr))
    elif isinstance(expr, IndexExpr):
        e = expr.expr
    else:
        raise K.err(None, f"{api}: expr must be an index expression, got {type(expr).__name__}",
                    "build it from nl.arange / nl.mgrid / loop variables")
    if isinstance(e, E.Pred):
        raise K.err(None, f"{api}: expr is a comparison; iota takes an integer expression")
    if E.dyns(e):
        raise K.err(None, f"{api}: expr depends on run-time values")
    if any(io.ndim == 1 for io in E.iotas(e)):
        raise K.err("err_1d_arange_not_supported", f"{api}: expr uses a 1-D nl.arange",
                    "add an axis: nl.arange(n)[:, None] or nl.arange(n)[None, :]")
    dt = D.canonical(dtype)
    if not (D.is_int(dt) or D.is_float(dt)) or D.name_of(dt) == "tfloat32":
        raise K.err(None, f"{api}: dtype {D.name_of(dt)} not supported; use an integer or "
                    "float dtype")
    shape = tuple(E.grid_shape([e]))
    shape = shape + (1,) * (2 - len(shape)) if len(shape) < 2 else shape
    return K.compute("iota", [e], shape, dt, "gpsimd", mask=mask, api=api)


def memset(shape, value, dtype, *, mask=None, engine=_engine.unknown, **kwargs):
    """A new tile of ``shape`` filled with the compile-time ``value`` (Vector or GpSimd).

    Args:
        shape: tile shape; the first dim is the partition dim.
        value: compile-time scalar.
        dtype: tile dtype.
        mask: compile-time predicate.
        engine: ``nisa.vector_engine`` (default) or ``nisa.gpsimd_engine``.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new SBUF tile.
    """
    api = "nisa.memset"
    if not isinstance(value, (int, float, bool, np.generic)):
        raise K.err(None, f"{api}: value must be a compile-time scalar, got "
                    f"{type(value).__name__}")
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    eng = K.pick_engine(api, engine, "vector", {"vector", "gpsimd"})
    v = value.item() if isinstance(value, np.generic) else value
    return K.compute("memset", [v], shape, D.canonical(dtype), eng, mask=mask, api=api)


def sequence_bounds(*, segment_ids, dtype=None):
    """Start and end (exclusive) index of each element's segment (GpSimd).

    Input ``[1, n]`` segment ids (0 = padding); output ``[1, 2, n]``: row 0 starts, row 1 ends.
    Padding elements get start ``n`` and end ``-1``.

    Args:
        segment_ids: ``[1, n]`` float32/int32 tile.
        dtype: float32 or int32 (default: the input's).

    Returns:
        A new ``[1, 2, n]`` tile.
    """
    api = "nisa.sequence_bounds"
    K.tile(segment_ids, api, "segment_ids")
    if segment_ids.shape[0] != 1 or len(segment_ids.shape) != 2:
        raise K.err(None, f"{api}: segment_ids must be [1, n], got {list(segment_ids.shape)}")
    ok = ("float32", "int32")
    if D.name_of(segment_ids.dtype) not in ok:
        raise K.err(None, f"{api}: segment_ids must be float32 or int32")
    dt = D.canonical(dtype) if dtype is not None else segment_ids.dtype
    if D.name_of(dt) not in ok:
        raise K.err(None, f"{api}: dtype must be float32 or int32, got {D.name_of(dt)}")
    K.require_psum_free(api, "gpsimd", segment_ids)
    n = segment_ids.shape[1]
    return K.compute("sequence_bounds", [segment_ids], (1, 2, n), dt, "gpsimd", api=api)
