"""Value rules of the GpSimd gathers of today's ``nki.isa``: nc_n_gather, nonzero_with_count.

Both work partition by partition over the flattened free dims: ``nc_n_gather`` picks
``data[p, indices[p, j]]``; ``nonzero_with_count`` lists the free positions of the non-zero
elements of each partition (plus ``index_offset``), fills the rest with ``padding_val`` and
puts the count in the last element.
"""

from __future__ import annotations

import numpy as np

from ..errors import NkiError
from .numerics import value_rule

__all__: list = []


@value_rule("nc_n_gather")
def _nc_n_gather(P, ex):
    xp = P.xp
    data, index = xp.asarray(ex.ins[0]), ex.ins[1]
    P.unsupported("nisa.nc_n_gather (indices outside the free size raise)")
    idx = np.asarray(P.concrete(index)).astype(np.int64)
    p = data.shape[0]
    flat = data.reshape(p, -1)
    idx = idx.reshape(p, -1)
    if idx.size and (idx.min() < 0 or idx.max() >= flat.shape[1]):
        raise NkiError("wb_gather_oob", f"nisa.nc_n_gather: index {int(idx.max())} is outside "
                       f"the {flat.shape[1]} elements of a partition (undefined on hardware)",
                       ex.inst.loc, "keep indices in [0, data.size / data.shape[0])")
    return xp.take_along_axis(flat, xp.asarray(idx), axis=1).reshape(ex.out_shape)


@value_rule("nonzero_with_count")
def _nonzero_with_count(P, ex):
    src = np.asarray(P.concrete(ex.ins[0]))
    P.unsupported("nisa.nonzero_with_count (a data-dependent compaction)")
    offset, pad = int(ex.attrs["index_offset"]), int(ex.attrs["padding_val"])
    p = src.shape[0]
    flat = src.reshape(p, -1)
    n = flat.shape[1]
    res = np.full((p, n + 1), pad, dtype=np.int64)
    for r in range(p):
        pos = np.flatnonzero(flat[r] != 0)
        res[r, :pos.size] = pos + offset
        res[r, n] = pos.size
    return P.xp.asarray(res.astype(np.int32)).reshape(ex.out_shape)
