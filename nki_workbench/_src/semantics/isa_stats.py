"""``nki.isa`` statistics and search, written once over ``P``.

bn_stats, bn_aggr, max8, nc_find_index8, nc_match_replace8, nc_stream_shuffle, local_gather.
Sums are :meth:`.Numerics.sum` (the one tree order), divisions :meth:`.Numerics.div`. Results the
hardware leaves undefined (a value ``nc_find_index8`` cannot find, a ``local_gather`` outside the
partition) warn or raise on the data, through ``P.concrete``: the compiled backend hands such
kernels to the interpreter.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import IsaHintWarning, NkiError, warn
from ..ir import expr as E
from .isa_alu import out_sel, sel_like
from .numerics import value_rule

__all__: list = []


def _masked_free(P, ex, x):
    xp = P.xp
    x = xp.asarray(x)
    p = x.shape[0]
    w = xp.ones(x.shape, bool) if ex.mask is None else sel_like(P, ex.mask, x.shape)
    if ex.mask is not None:
        ex.out_sel = out_sel(P, ex.mask, ex.out_shape)
    return P.f32(x).reshape(p, -1), w.reshape(p, -1)


def _moments(P, x, w):
    xp = P.xp
    c = xp.sum(w, axis=1, dtype=np.int32).astype(np.float32)
    s = P.sum(xp.where(w, x, np.float32(0)), 1)
    mean = xp.where(c > 0, P.div(s, xp.maximum(c, np.float32(1))), np.float32(0))
    d = P.fence(x - mean[:, None])
    m2 = P.sum(xp.where(w, P.fence(d * d), np.float32(0)), 1)
    return c, mean, m2


@value_rule("bn_stats")
def _bn_stats(P, ex):
    x, w = _masked_free(P, ex, ex.ins[0])
    cols = [v for k in (0, 1) for v in _moments(P, x[:, k::2], w[:, k::2])]
    return P.xp.stack(cols, axis=1)


@value_rule("bn_aggr")
def _bn_aggr(P, ex):
    x, _ = _masked_free(P, ex, ex.ins[0])
    t = x.reshape(x.shape[0], -1, 3)
    c, m, v = t[..., 0], t[..., 1], t[..., 2]
    n = P.sum(c, 1)
    mean = P.div(P.sum(P.fence(c * m), 1), n)
    d = P.fence(m - mean[:, None])
    sq = P.fence(c * P.fence(d * d))
    var = P.div(P.sum(P.fence(v + sq), 1), n)
    return P.xp.stack([mean, var], axis=1)


@value_rule("max8")
def _max8(P, ex):
    # why: the 8 largest values per partition, NaNs ranked below every number (NaN slots last)
    xp = P.xp
    x, w = _masked_free(P, ex, ex.ins[0])
    x = xp.where(w, x, -np.inf)
    nan = xp.isnan(x)
    top = -xp.sort(-xp.where(nan, -np.inf, x), axis=1)[:, :8]
    real = xp.sum(~nan, axis=1, keepdims=True)
    return xp.where(xp.arange(8) < real, top, np.float32(np.nan))


def _find(P, ex, x, w, vals, used=None):
    """Index of the first match of each of the 8 values per partition (-1: none)."""
    xp = P.xp
    P.unsupported(f"nisa.{ex.inst.op} (a value absent from the data warns)")
    cols = xp.arange(x.shape[1])[None, :]
    idxs = []
    for k in range(8):
        eq = (x == vals[:, k:k + 1]) & w
        if used is not None:
            eq = eq & ~used
        hit = xp.any(eq, axis=1)
        idx = xp.argmax(eq, axis=1)
        idxs.append(xp.where(hit, idx, -1))
        if used is not None:
            used = used | ((cols == idx[:, None]) & hit[:, None])
    res = xp.stack(idxs, axis=1).astype(np.int64)
    missing = int((P.concrete(res) < 0).sum())
    if missing:
        warn(IsaHintWarning, f"nisa.{ex.inst.op}: {missing} of the 8 values per partition do "
             "not occur in the data (undefined on hardware); their index is reported as the "
             "dtype's maximum", ex.inst.loc)
    return res, used


@value_rule("nc_find_index8")
def _nc_find_index8(P, ex):
    x, w = _masked_free(P, ex, ex.ins[0])
    ex.out_sel = None if ex.mask is None else out_sel(P, ex.mask, ex.out_shape)
    idx, _ = _find(P, ex, x, w, P.f32(ex.ins[1]).reshape(x.shape[0], 8))
    top = np.iinfo(D.storage_dtype(D.from_name(ex.attrs["dtype"]))).max
    return P.xp.where(idx < 0, top, idx).astype(np.int64)


@value_rule("nc_match_replace8")
def _nc_match_replace8(P, ex):
    xp = P.xp
    data, vals, imm = ex.ins
    shape = np.shape(data)
    p = shape[0]
    x = P.f32(data).reshape(p, -1)
    w = xp.ones(x.shape, bool) if ex.mask is None else \
        sel_like(P, ex.mask, shape).reshape(p, -1)
    idx, used = _find(P, ex, x, w, P.f32(vals).reshape(p, 8), xp.zeros(x.shape, bool))
    res = xp.where(used, P.f32(imm), x).reshape(shape)
    return res, xp.where(idx < 0, np.iinfo(np.uint32).max, idx).astype(np.int64)


def _shuffle_mask(P, ex, reads):
    """The 32 mask entries (run-time entries read from their operands)."""
    first = 2 if reads else 1
    dyn = []
    for k, o in enumerate(ex.inst.ins[first:]):
        c = E.const_value(o) if isinstance(o, E.Affine) else None
        if c is None:
            P.unsupported("nc_stream_shuffle with run-time shuffle_mask entries")
            c = int(P.concrete(ex.ins[first + k]))
        dyn.append(int(c))
    dyn = iter(dyn)
    return [next(dyn) if m < 0 else m for m in ex.attrs["shuffle_mask"]]


@value_rule("nc_stream_shuffle")
def _nc_stream_shuffle(P, ex):
    xp = P.xp
    src = xp.asarray(ex.ins[0])
    reads = ex.attrs["reads_dst"]
    sm = _shuffle_mask(P, ex, reads)
    pd, ps = ex.out_shape[0], src.shape[0]
    rows = []
    for d in range(pd):
        m = sm[d % 32]
        k = (d // 32) * 32 + m
        if m != 255 and (not 0 <= m < 32 or k >= ps):
            raise NkiError(None, f"nisa.nc_stream_shuffle: shuffle_mask[{d % 32}] = {m} reads "
                           f"partition {k} of a {ps}-partition src", ex.inst.loc)
        rows.append(-1 if m == 255 else k)
    rows = np.array(rows)
    s = xp.take(src.reshape(ps, -1), np.maximum(rows, 0), axis=0)
    old = xp.asarray(ex.ins[1]) if reads else xp.zeros(ex.out_shape, src.dtype)
    s = s if s.dtype == old.dtype else P.cast(s, D.name_of(old.dtype))
    res = xp.where(xp.asarray(rows >= 0)[:, None], s, old.reshape(pd, -1))
    return res.reshape(ex.out_shape)


@value_rule("local_gather")
def _local_gather(P, ex):
    xp = P.xp
    src, index = xp.asarray(ex.ins[0]), ex.ins[1]
    e, nv = ex.attrs["num_elem_per_idx"], ex.attrs["num_valid_indices"]
    P.unsupported("nisa.local_gather (indices outside the partition raise)")
    index = P.concrete(index)
    p = src.shape[0]
    flat = src.reshape(p, -1)
    parts = []
    for c in range(p // 16):
        rows = slice(16 * c, 16 * c + 16)
        idx = index[rows].reshape(16, -1).flatten(order="F")[:nv].astype(np.int64)
        cols = idx[:, None] + np.arange(e)[None, :]
        if cols.size and (cols.min() < 0 or cols.max() >= flat.shape[1]):
            raise NkiError("wb_local_gather_oob", f"nisa.local_gather: core {c} gathers element "
                           f"{int(cols.max())} of {flat.shape[1]} per partition (undefined on "
                           "hardware)", ex.inst.loc, "keep index + num_elem_per_idx within the "
                           "free size")
        parts.append(flat[rows][:, cols])
    return xp.concatenate(parts, axis=0).reshape(ex.out_shape)
