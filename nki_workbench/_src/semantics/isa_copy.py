"""``nki.isa`` copies, transposes and generated tiles, written once over ``P``.

tensor_copy (+ dynamic src/dst), tensor_copy_predicated, dma_transpose, affine_select, iota,
sequence_bounds. (``dma_copy`` with indirect indices and ``builtin_custom_op`` move memory only:
they are executor specials of the interpreter, :mod:`..sim.isa_exec`.)
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..ir import Scalar
from .isa_alu import align, like, out
from .numerics import value_rule

__all__: list = []


@value_rule("tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst")
def _tensor_copy(P, ex):
    x = P.xp.asarray(ex.ins[0])
    if ex.attrs.get("via_fp32") or P.storage(ex.attrs["dtype"]) != x.dtype:
        x = P.f32(x)  # why: a dtype change (and NC-v2 ScalarE copies) goes through fp32
    return out(P, like(P, x, ex.out_shape), ex.out_shape)


@value_rule("tensor_copy_predicated")
def _tensor_copy_predicated(P, ex):
    xp = P.xp
    src, pred, old = ex.ins
    old = xp.asarray(old)
    shape = old.shape
    cond = (like(P, pred, shape) != 0) ^ bool(ex.attrs["reverse_pred"])
    name = D.name_of(old.dtype)
    if isinstance(ex.inst.ins[0], Scalar):
        # why: a scalar src is an fp32 immediate (integer tiles take an integer one exactly)
        v = xp.asarray(src)
        v = v if old.dtype.kind in "biu" and v.dtype.kind in "biu" else xp.asarray(P.f32(v))
        src = P.cast(v.reshape(1), name).reshape(())
    else:
        src = like(P, src, shape)
        src = src if src.dtype == old.dtype else P.cast(src, name)
    return out(P, xp.where(cond, src, old), shape)


@value_rule("dma_transpose")
def _dma_transpose(P, ex):
    return P.xp.transpose(P.xp.asarray(ex.ins[0]), tuple(ex.attrs["axes"]))


@value_rule("affine_select")
def _affine_select(P, ex):
    xp = P.xp
    pred, x, off = ex.ins
    cond = xp.broadcast_to(align(xp.asarray(pred).astype(bool), len(ex.out_shape)),
                           ex.out_shape)
    return xp.where(cond, P.f32(x), P.f32(off))


@value_rule("iota")
def _iota(P, ex):
    v = P.xp.asarray(ex.ins[0]).astype(np.int32)  # why: GpSimd evaluates in int32 (wraps)
    return out(P, align(v, len(ex.out_shape)), ex.out_shape)


@value_rule("sequence_bounds")
def _sequence_bounds(P, ex):
    xp = P.xp
    ids = P.f32(ex.ins[0]).reshape(-1)
    n = ids.shape[0]
    idx = xp.arange(n, dtype=np.int32)
    new = xp.concatenate([xp.ones(1, bool), ids[1:] != ids[:-1]])
    # why: a run starts at the last new segment at or before i and ends at the next after i
    starts = xp.maximum.accumulate(xp.where(new, idx, 0))
    nxt = xp.flip(xp.minimum.accumulate(xp.flip(xp.where(new, idx, n))))
    ends = xp.concatenate([nxt[1:], xp.full(1, n, np.int32)])
    pad = ids == 0
    starts = xp.where(pad, n, starts).astype(np.float32)
    ends = xp.where(pad, -1, ends).astype(np.float32)
    return xp.stack([starts, ends])[None]
