"""TensorE instructions: ``nc_matmul`` and ``nc_transpose``.

TensorE instructions: ``nc_matmul`` (stationary/moving, PE tiling, fp8 double-row mode) and
``nc_transpose`` (TensorE or VectorE).
"""

from __future__ import annotations

from .. import dtypes as D
from ..ir import expr as E
from ..trace import context as C
from ..trace.index import IndexExpr
from . import common as K
from .enums import engine as _engine

__all__ = ["nc_matmul", "nc_transpose"]

_MM_DTYPES = frozenset({"float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32",
                        "float32"})
_FP8 = frozenset({"float8_e4m3", "float8_e5m2"})
_PE = 128  # the PE array is 128 x 128


def _tile_arg(v, api, what):
    """A ``tile_position``/``tile_size`` entry: int or affine index expression."""
    if isinstance(v, IndexExpr):
        c = E.const_value(v.expr) if not isinstance(v.expr, E.Pred) else None
        return v.expr if c is None else c
    if isinstance(v, int) and not isinstance(v, bool):
        return int(v)
    raise K.err("wb_nc_matmul_tiling", f"{api}: {what} entries must be ints or index "
                f"expressions, got {v!r}")


def _check_tiling(api, tile_position, tile_size, k, m):
    tile_position, tile_size = tuple(tile_position or ()), tuple(tile_size or ())
    if not tile_position and not tile_size:
        return None, None
    if len(tile_position) != 2 or len(tile_size) != 2:
        raise K.err("wb_nc_matmul_tiling", f"{api}: tile_position and tile_size must both be "
                    f"given as (row, col) pairs, got {tile_position} and {tile_size}",
                    "e.g. tile_position=(0, 64), tile_size=(64, 64)")
    pos = tuple(_tile_arg(v, api, "tile_position") for v in tile_position)
    size = tuple(_tile_arg(v, api, "tile_size") for v in tile_size)
    if not all(isinstance(s, int) for s in size):
        raise K.err("wb_nc_matmul_tiling", f"{api}: tile_size must be compile-time ints")
    ranges = {n: r for n, r in C.require(api).var_ranges.items() if r is not None}
    for s, acc, what in ((size[0], k, "rows (contraction / partitions)"),
                         (size[1], m, "columns (stationary free size)")):
        if s % 32 or not 32 <= s <= _PE:
            raise K.err("wb_nc_matmul_tiling", f"{api}: tile_size {what} {s} must be a "
                        "multiple of 32 in [32, 128]")
        if s < acc:
            raise K.err("wb_nc_matmul_tiling", f"{api}: tile_size {what} {s} is smaller than "
                        f"the accessed stationary size {acc}")
    if size == (32, 32) and K.target().nc_version < 3:
        raise K.err("wb_nc_matmul_tiling", f"{api}: on NeuronCore-v2 tile_size rows and "
                    "columns cannot both be 32")
    for p, s in zip(pos, size, strict=True):
        if isinstance(p, int):
            vals = {p}
        else:
            try:
                lo, hi = E.bounds(p, ranges)
            except (ValueError, KeyError):
                continue
            vals = {lo, hi}
        for v in vals:
            if v % 32 or v < 0 or v + s > _PE:
                raise K.err("wb_nc_matmul_tiling", f"{api}: tile_position {v} with tile_size "
                            f"{s} leaves the 128x128 PE array or is not a multiple of 32")
    return pos, size


def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=(), tile_size=(), mask=None, **kwargs):
    """``stationary.T @ moving`` on Tensor Engine into a new fp32 PSUM tile.

    Accumulate over K tiles with ``psum[...] += nisa.nc_matmul(...)``.

    Args:
        stationary: SBUF tile ``[K, M]``, K <= 128, M <= 128.
        moving: SBUF tile ``[K, N]``, N <= 512.
        is_stationary_onezero: hint that ``stationary`` holds only 0/1 (checked in simulation).
        is_moving_onezero: hint that ``moving`` holds only 0/1 (checked in simulation).
        is_transpose: hint that this is a transpose (``moving`` is an identity matrix).
        tile_position: ``(row, col)`` offset in the PE array (multiples of 32; ints or index
            expressions); needs ``tile_size``.
        tile_size: ``(rows, cols)`` of the PE tile (multiples of 32, >= the operand sizes).
        mask: compile-time predicate over the ``[M, N]`` result.
        **kwargs: ``perf_mode='double_row_gen3'`` (trn2+, fp8 ``[K, 2, M]``/``[K, 2, N]``
            operands, result ``einsum('kli,klj->ij')``).

    Returns:
        A new ``[M, N]`` float32 PSUM tile.
    """
    api = "nisa.nc_matmul"
    tgt = K.target()
    stationary, moving = _from_transpose(stationary), _from_transpose(moving)
    for t, arg in ((stationary, "stationary"), (moving, "moving")):
        K.tile(t, api, arg)
        if t.buffer != "sbuf":
            raise K.err("err_unsupported_memory", f"{api}: '{arg}' must be in SBUF, got "
                        f"{t.buffer}", "copy PSUM results to SBUF (nisa.tensor_copy) first")
        if D.name_of(t.dtype) not in _MM_DTYPES:
            raise K.err(None, f"{api}: '{arg}' has dtype {D.name_of(t.dtype)}; TensorE takes "
                        f"{', '.join(sorted(_MM_DTYPES))}", "cast with nisa.tensor_copy(dtype=)")
    perf = kwargs.get("perf_mode")
    rank = 3 if perf == "double_row_gen3" else 2
    if perf not in (None, "none", "double_row_gen3"):
        raise K.err("wb_isa_unsupported", f"{api}: perf_mode {perf!r} is not supported",
                    "perf_mode='double_row_gen3' is the documented value")
    for t, arg in ((stationary, "stationary"), (moving, "moving")):
        if len(t.shape) != rank:
            raise K.err("err_exceed_max_supported_dimension", f"{api}: '{arg}' must be "
                        f"{rank}-D{' [K, 2, X]' if rank == 3 else ''}, got {list(t.shape)}")
    if rank == 3:
        if tgt.nc_version < 3:
            raise K.err("wb_isa_unsupported", f"{api}: perf_mode='double_row_gen3' needs "
                        f"NeuronCore-v3 or later (target {tgt.name})", "use platform_target='trn2'")
        if stationary.shape[1] != 2 or moving.shape[1] != 2:
            raise K.err(None, f"{api}: double_row_gen3 operands are [K, 2, X], got "
                        f"{list(stationary.shape)} and {list(moving.shape)}")
        if not {D.name_of(stationary.dtype), D.name_of(moving.dtype)} <= _FP8:
            raise K.err(None, f"{api}: double_row_gen3 needs fp8 operands")
    k, m, n = stationary.shape[0], stationary.shape[-1], moving.shape[-1]
    K.same_partitions(api, ("stationary", stationary), ("moving", moving))
    if m > tgt.gemm_stationary_fmax:
        raise K.err("err_size_of_dimension_exceed_arch_limit", f"{api}: stationary free size "
                    f"{m} exceeds {tgt.gemm_stationary_fmax} (tile_size.gemm_stationary_fmax)")
    if n > tgt.gemm_moving_fmax:
        raise K.err("err_size_of_dimension_exceed_arch_limit", f"{api}: moving free size {n} "
                    f"exceeds {tgt.gemm_moving_fmax} (tile_size.gemm_moving_fmax)")
    if is_transpose and (k != n or rank == 3):
        raise K.err(None, f"{api}: is_transpose=True needs a square identity 'moving' [K, K], "
                    f"got {list(moving.shape)}")
    pos, size = _check_tiling(api, tile_position, tile_size, k, m)
    attrs = {"perf_mode": perf if rank == 3 else None,
             "is_stationary_onezero": bool(is_stationary_onezero),
             "is_moving_onezero": bool(is_moving_onezero), "is_transpose": bool(is_transpose)}
    if pos is not None:
        # why: a position may be an index expression, which an attribute holds alone
        attrs["tile_size"] = size
        attrs["tile_row"], attrs["tile_col"] = pos
    return K.compute("nc_matmul", [stationary, moving], (m, n), "float32", "tensor",
                     attrs=attrs, mask=mask, buffer="psum", api=api)


def nc_transpose(data, *, mask=None, dtype=None, engine=_engine.unknown, **kwargs):
    """Partition/free transpose ``[P, F] -> [F, P]`` (several free axes are collapsed first).

    Tensor Engine handles up to ``[128, 128]`` (SBUF in, PSUM out); Vector Engine up to
    ``[32, 32]``. The default engine is Vector when the tile fits it, else Tensor.

    Args:
        data: input tile.
        mask: compile-time predicate over the result.
        dtype: result dtype (default: ``data``'s).
        engine: ``nisa.tensor_engine`` or ``nisa.vector_engine``.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile (PSUM for Tensor Engine, SBUF for Vector Engine).
    """
    api = "nisa.nc_transpose"
    K.tile(data, api, "data")
    p, f = K.flat_free(data.shape)
    default = "vector" if p <= 32 and f <= 32 else "tensor"
    eng = K.pick_engine(api, engine, default, {"tensor", "vector"})
    limit = 32 if eng == "vector" else 128
    if p > limit or f > limit:
        raise K.err("err_size_of_dimension_exceed_arch_limit", f"{api}: a [{p}, {f}] tile does "
                    f"not fit the {eng} engine transpose (at most [{limit}, {limit}])",
                    "transpose in 32x32 (VectorE) or 128x128 (TensorE) blocks")
    if eng == "tensor" and data.buffer != "sbuf":
        raise K.err("err_unsupported_memory", f"{api}: Tensor Engine transposes read SBUF, "
                    f"'data' is in {data.buffer}", "use engine=nisa.vector_engine")
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    # why: TensorE transposes by a matmul with identity; on NC-v2 that is not bit-exact for
    # NaN/Inf (0 * NaN poisons the column), which the simulator reproduces
    via_mm = eng == "tensor" and K.target().nc_version < 3
    out = K.compute("nc_transpose", [data], (f, p), dt, eng, mask=mask, api=api,
                    buffer="psum" if eng == "tensor" else "sbuf", attrs={"via_matmul": via_mm})
    if eng == "tensor":
        ctx = C.require(api)
        ctx.psum_transposes = getattr(ctx, "psum_transposes", set()) | {out._name}
    return out


def _from_transpose(t):
    """A TensorE transpose result (PSUM) fed to ``nc_matmul``: copied to SBUF first.

    NKI 2.x kernels (the nki-samples flash-attention backward) pass ``nc_transpose``'s PSUM
    tile straight to ``nc_matmul``, and NKI's compiler moves it to SBUF; the IR gets that copy
    as a visible ``tensor_copy``. Any other PSUM operand stays an error.
    """
    from .copy import tensor_copy
    ctx = C.current()
    if ctx is None or getattr(t, "buffer", None) != "psum" or not hasattr(t, "_name"):
        return t
    if ctx.root(t._name) not in getattr(ctx, "psum_transposes", ()):
        return t
    return tensor_copy(t)
