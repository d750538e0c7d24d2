"""Statistics, top-8 search and cross-partition moves.

Statistics, top-8 search and cross-partition moves: ``bn_stats``, ``bn_aggr``, ``max8``,
``nc_find_index8``, ``nc_match_replace8``, ``nc_stream_shuffle`` and ``local_gather``.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..ir import Scalar
from ..trace.index import IndexExpr
from . import common as K

__all__ = ["bn_stats", "bn_aggr", "max8", "nc_find_index8", "nc_match_replace8",
           "nc_stream_shuffle", "local_gather"]

_FMAX8 = 16384


def _start_rule(api, t, arg):
    """Partition-offset rule: a tile spanning n partitions starts at an allowed partition."""
    start = K.start_partition(t)
    if start is None:
        return
    allowed = K.target().allowed_start_partitions(t.shape[0])
    if start not in allowed:
        raise K.err("wb_partition_start", f"{api}: '{arg}' spans {t.shape[0]} partitions and "
                    f"starts at partition {start}; it must start at one of {list(allowed)}",
                    "align the tile: <= 32 partitions start at 0/32/64/96, <= 64 at 0/64, "
                    "more at 0")

def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    """Per-partition mean/variance statistics (Vector Engine, fp32).

    Six values per partition: ``[count, mean, var*count]`` of the even-position elements, then
    of the odd-position ones. At most 512 elements per partition.

    Args:
        data: input tile.
        mask: compile-time predicate.
        dtype: result dtype (default: ``data``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new ``[P, 6]`` tile.
    """
    api = "nisa.bn_stats"
    K.tile(data, api, "data")
    fmax = K.target().bn_stats_fmax
    if K.free_size(data) > fmax:
        raise K.err("err_size_of_dimension_exceed_arch_limit", f"{api}: {K.free_size(data)} "
                    f"elements per partition exceed {fmax} (nl.tile_size.bn_stats_fmax)",
                    "run bn_stats per 512-element chunk and aggregate with one bn_aggr")
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    return K.compute("bn_stats", [data], (data.shape[0], 6), dt, "vector", mask=mask, api=api)


def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    """Aggregate ``(count, mean, var*count)`` triples into ``[mean, variance]`` per partition.

    Args:
        data: tile of concatenated ``bn_stats`` outputs (multiple of 3 elements per partition).
        mask: compile-time predicate.
        dtype: result dtype (default: ``data``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new ``[P, 2]`` tile (population variance, as ``np.var``).
    """
    api = "nisa.bn_aggr"
    K.tile(data, api, "data")
    if K.free_size(data) % 3:
        raise K.err(None, f"{api}: {K.free_size(data)} elements per partition is not a multiple "
                    "of 3 (count, mean, var*count triples)")
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    return K.compute("bn_aggr", [data], (data.shape[0], 2), dt, "vector", mask=mask, api=api)


def _data8(api, t, arg, max_nd=5):
    K.tile(t, api, arg)
    n = K.free_size(t)
    if len(t.shape) > max_nd or not 8 <= n <= _FMAX8:
        raise K.err("err_size_of_dimension_exceed_arch_limit" if n > _FMAX8 else None,
                    f"{api}: '{arg}' must be at most {max_nd}-D with 8 to {_FMAX8} elements per "
                    f"partition, got shape {list(t.shape)}")
    _start_rule(api, t, arg)


def _vals8(api, vals, data):
    K.tile(vals, api, "vals")
    if len(vals.shape) > 3 or K.free_size(vals) != 8:
        raise K.err(None, f"{api}: 'vals' must hold exactly 8 values per partition (at most "
                    f"3-D), got shape {list(vals.shape)}")
    K.same_partitions(api, ("data", data), ("vals", vals))


def max8(*, src, mask=None, dtype=None, **kwargs):
    """The 8 largest values of each partition, in descending order (Vector Engine).

    Args:
        src: tile with 8 to 16384 elements per partition (at most 5-D).
        mask: compile-time predicate over ``src``.
        dtype: result dtype (default: ``src``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new ``[P, 8]`` tile.
    """
    api = "nisa.max8"
    _data8(api, src, "src")
    dt = D.canonical(dtype) if dtype is not None else src.dtype
    return K.compute("max8", [src], (src.shape[0], 8), dt, "vector", mask=mask, api=api)


def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs):
    """Flattened free index of the first occurrence of each of the 8 ``vals`` per partition.

    Args:
        data: tile with 8 to 16384 elements per partition.
        vals: tile with 8 values per partition.
        mask: compile-time predicate over ``data``.
        dtype: ``uint32`` (default) or ``uint16``.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new ``[P, 8]`` tile of indices.
    """
    api = "nisa.nc_find_index8"
    _data8(api, data, "data")
    _vals8(api, vals, data)
    dt = D.canonical(dtype) if dtype is not None else D.canonical("uint32")
    if D.name_of(dt) not in ("uint32", "uint16"):
        raise K.err(None, f"{api}: dtype must be uint32 or uint16, got {D.name_of(dt)}")
    return K.compute("nc_find_index8", [data, vals], (data.shape[0], 8), dt, "vector",
                     mask=mask, api=api)


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    """Replace the first occurrence of each of the 8 ``vals`` per partition with ``imm``.

    Values are processed in order; each search skips slots already replaced.

    Args:
        data: tile with at most 16384 elements per partition.
        vals: tile with 8 values per partition.
        imm: float32 replacement value.
        dst_idx: optional ``[P, 8]`` tile receiving the flattened indices of the matches.
        mask: compile-time predicate over ``data``.
        dtype: result dtype (default: ``data``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``data``.
    """
    api = "nisa.nc_match_replace8"
    _data8(api, data, "data")
    _vals8(api, vals, data)
    # why: NKI's own tests pass imm=np.float32(...); any real numpy scalar is a compile-time float
    if isinstance(imm, (bool, np.bool_)) or not isinstance(imm, (int, float, np.integer,
                                                                 np.floating)):
        raise K.err(None, f"{api}: imm must be a float32 scalar, got {imm!r}")
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    ins = [data, vals, Scalar(float(imm))]
    if dst_idx is None:
        return K.compute("nc_match_replace8", ins, data.shape, dt, "vector", mask=mask, api=api)
    K.tile(dst_idx, api, "dst_idx")
    if dst_idx.shape[0] != data.shape[0] or K.free_size(dst_idx) != 8:
        raise K.err(None, f"{api}: dst_idx must be [P, 8] with the data's partitions, got "
                    f"{list(dst_idx.shape)}")
    out = K.fresh_tile(data.shape, dt, api)
    K.emit("nc_match_replace8", [out, dst_idx], ins, "vector", mask=mask, api=api,
           attrs={"dtype": D.name_of(dt), "dtypes": (D.name_of(dt), D.name_of(dst_idx.dtype))})
    return out

def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    """Move partitions within each 32-partition quadrant (Vector Engine).

    ``dst[q*32 + i] = src[q*32 + shuffle_mask[i]]``; ``255`` leaves ``dst[q*32 + i]`` unchanged.

    Args:
        src: source tile.
        dst: destination tile (written in place; may be ``src``).
        shuffle_mask: 32 ints (or index expressions) in 0..31, or 255.
        dtype: must equal the tiles' dtype if given.
        mask: compile-time predicate over ``dst``.
        **kwargs: other NKI keyword arguments (accepted and ignored).
    """
    api = "nisa.nc_stream_shuffle"
    K.tile(src, api, "src")
    K.tile(dst, api, "dst")
    if src.dtype != dst.dtype or (dtype is not None and D.canonical(dtype) != dst.dtype):
        raise K.err(None, f"{api}: src and dst must have the same dtype")
    K.same_free_size(api, ("src", src), ("dst", dst))
    sm = list(shuffle_mask)
    if len(sm) != 32:
        raise K.err(None, f"{api}: shuffle_mask must have 32 entries, got {len(sm)}")
    static, dyn = [], []
    for i, v in enumerate(sm):
        if isinstance(v, IndexExpr):
            static.append(-1)
            dyn.append(v.expr)
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not (0 <= v < 32 or v == 255):
            raise K.err(None, f"{api}: shuffle_mask[{i}] = {v!r} must be in 0..31 or 255")
        if v != 255 and v >= src.shape[0]:
            raise K.err(None, f"{api}: shuffle_mask[{i}] = {v} reads partition {v} of a "
                        f"{src.shape[0]}-partition src")
        static.append(v)
    for t, n in ((src, "src"), (dst, "dst")):
        _start_rule(api, t, n)
    # why: dst is read only when some partitions keep their old value (255 / run-time mask)
    keep = 255 in static or bool(dyn)
    old = [dst] if keep else []
    K.emit("nc_stream_shuffle", [dst], [src, *old, *dyn], "vector", mask=mask, api=api,
           attrs={"dtype": D.name_of(dst.dtype), "shuffle_mask": tuple(static),
                  "reads_dst": bool(keep)})


_ELEMS_PER_IDX = (1, 2, 4, 8, 16, 32)


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None):
    """GpSimd gather within each group of 16 partitions (one GpSimd core each).

    For core ``c`` the indices ``index[16c:16c+16]`` are read partition-first; each of the first
    ``num_valid_indices`` selects ``num_elem_per_idx`` contiguous elements (starting at that
    element offset of the flattened free data) from each of the core's 16 partitions.

    Args:
        src_buffer: SBUF tile, partitions a multiple of 16.
        index: uint16 tile with the same partitions.
        num_elem_per_idx: 1, 2, 4, 8, 16 or 32.
        num_valid_indices: indices used per core (default: all).
        mask: compile-time predicate.

    Returns:
        A new ``[P, num_valid_indices, num_elem_per_idx]`` tile of ``src_buffer``'s dtype.
    """
    api = "nisa.local_gather"
    K.tile(src_buffer, api, "src_buffer")
    K.tile(index, api, "index")
    K.same_partitions(api, ("src_buffer", src_buffer), ("index", index))
    p = src_buffer.shape[0]
    if p % 16:
        raise K.err(None, f"{api}: partitions ({p}) must be a multiple of 16")
    if D.name_of(index.dtype) != "uint16":
        raise K.err(None, f"{api}: index must be uint16, got {D.name_of(index.dtype)}")
    if num_elem_per_idx not in _ELEMS_PER_IDX:
        raise K.err(None, f"{api}: num_elem_per_idx must be one of {_ELEMS_PER_IDX}")
    per_core = 16 * K.free_size(index)
    nv = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 0 < nv <= min(per_core, 4096):
        raise K.err(None, f"{api}: num_valid_indices {nv} must be in 1..{min(per_core, 4096)}")
    K.require_psum_free(api, "gpsimd", src_buffer, index)
    return K.compute("local_gather", [src_buffer, index], (p, nv, num_elem_per_idx),
                     src_buffer.dtype, "gpsimd", mask=mask, api=api,
                     attrs={"num_elem_per_idx": int(num_elem_per_idx),
                            "num_valid_indices": nv})
