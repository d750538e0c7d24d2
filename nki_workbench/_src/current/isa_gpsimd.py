"""GpSimd instructions that only today's ``nki.isa`` has: ``nc_n_gather``, ``nonzero_with_count``.

Each traces to one IR instruction (registered in ``isa/__init__.py``; value rules in
``semantics/isa_gather.py``) writing ``dst``.
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..isa import common as K
from .emit import into, require_dst

__all__ = ["nc_n_gather", "nonzero_with_count"]


def nc_n_gather(dst, data, indices, name=None):
    """``dst[p, j] = data[p, indices[p, j]]`` over the flattened free dims of each partition.

    Args:
        dst: destination tile, the shape of ``indices``.
        data: SBUF source tile.
        indices: uint32 (or int32) SBUF tile of positions in ``[0, data.size / P)``.
        name: instruction name (accepted).
    """
    api = "nisa.nc_n_gather"
    require_dst(dst, api)
    K.tile(data, api, "data")
    K.tile(indices, api, "indices")
    if data.shape[0] != indices.shape[0] or dst.shape[0] != indices.shape[0]:
        raise NkiError("err_num_partition_mismatch", f"{api}: data, indices and dst must have "
                       f"the same partitions, got {data.shape[0]}, {indices.shape[0]} and "
                       f"{dst.shape[0]}", user_location())
    if D.name_of(indices.dtype) not in ("uint32", "int32", "uint16"):
        raise NkiError(None, f"{api}: indices must be uint32, got {D.name_of(indices.dtype)}",
                       user_location())
    K.require_psum_free(api, "gpsimd", data, indices)
    value = K.compute("nc_n_gather", [data, indices], tuple(indices.shape), dst.dtype, "gpsimd",
                      api=api)
    into(dst, value, api)


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """Per partition: non-zero positions (+ ``index_offset``), padding, then the count.

    ``dst`` free size = ``src`` free size + 1; the count is the last element.

    Args:
        dst: int32 destination ``[P, F + 1]``.
        src: float32/int32 source ``[P, F]``.
        index_offset: added to every position.
        padding_val: value after the last position.
        name: instruction name (accepted).
    """
    api = "nisa.nonzero_with_count"
    require_dst(dst, api)
    K.tile(src, api, "src")
    p, f = src.shape[0], K.free_size(src)
    if dst.shape[0] != p or K.free_size(dst) != f + 1:
        raise NkiError(None, f"{api}: dst must be [{p}, {f + 1}] for a [{p}, {f}] src, got "
                       f"{list(dst.shape)}", user_location())
    K.require_psum_free(api, "gpsimd", src)
    attrs = {"index_offset": int(index_offset), "padding_val": int(padding_val)}
    value = K.compute("nonzero_with_count", [src], tuple(dst.shape), dst.dtype, "gpsimd",
                      attrs=attrs, api=api)
    into(dst, value, api)
