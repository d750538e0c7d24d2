"""Today's ``nki.isa`` data movement, fills and selections (destination first).

``dma_copy``/``dma_transpose``/``dma_compute``, ``tensor_copy`` (a view with a run-time offset
becomes the legacy dynamic copy), ``memset``, ``iota`` and ``affine_select`` (the NKI 0.2
``pattern`` + ``offset`` + ``channel_multiplier`` form, traced to the legacy index expression
``offset + p * channel_multiplier + sum(i_k * step_k)``), ``range_select``, ``select_reduce``,
``tensor_copy_predicated``, ``dropout``, ``nc_stream_shuffle``, ``local_gather``,
``sequence_bounds``.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import isa as L
from ..errors import NkiError, user_location
from ..ir import expr as E
from ..lang.alu import alu_name
from ..trace.index import IndexExpr
from ..trace.tensor import NkiTensor
from . import enums as N
from .emit import into, require_dst

__all__ = ["dma_copy", "dma_transpose", "dma_compute", "tensor_copy", "tensor_copy_predicated",
           "memset", "iota", "affine_select", "range_select", "select_reduce", "dropout",
           "nc_stream_shuffle", "local_gather", "sequence_bounds", "sendrecv", "core_barrier",
           "FP32_MIN"]

FP32_MIN = float(np.finfo(np.float32).min)
_CMP = {"equal": "eq", "not_equal": "ne", "greater": "gt", "greater_equal": "ge",
        "less": "lt", "less_equal": "le"}


def _has_dyn(t) -> bool:
    return isinstance(t, NkiTensor) and any(E.dyns(e) for e in (t.index or ()))


def dma_copy(dst, src, priority=None, oob_mode=N.oob_mode.error, dge_mode=N.dge_mode.unknown,
             engine=N.engine.unknown, name=None, **kwargs):
    """DMA ``src`` into ``dst`` (HBM/SBUF either side; not PSUM), casting between dtypes.

    Args:
        dst: destination view (may carry ``.ap(vector_offset=/scalar_offset=)``).
        src: source view.
        priority: DMA priority (gen4; accepted).
        oob_mode: ``nisa.oob_mode``.
        dge_mode: ``nisa.dge_mode``.
        engine: issuing engine with ``hwdge`` (accepted).
        name: instruction name (ignored).
        **kwargs: 0.2 keywords ``dst_rmw_op`` (now ``dma_compute``) accepted.
    """
    api = "nisa.dma_copy"
    require_dst(dst, api, onchip=False)
    L.dma_copy(dst=dst, src=src, oob_mode=L.oob_mode[N.enum_member(
        N.oob_mode, oob_mode, api, "oob_mode").name], dge_mode=N.legacy_dge(dge_mode, api),
        dst_rmw_op=kwargs.get("dst_rmw_op"))


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=N.dge_mode.unknown,
                  oob_mode=N.oob_mode.error, name=None):
    """Transpose ``src`` (HBM/SBUF) into the SBUF tile ``dst`` with the DMA engine."""
    api = "nisa.dma_transpose"
    require_dst(dst, api)
    into(dst, L.dma_transpose(src, axes=axes, dtype=dst.dtype), api)


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True,
                oob_mode=N.oob_mode.error, name=None):
    """``dst = srcs[0] + srcs[1] + ...`` on the DMA engine (NKI 0.3+; ``reduce_op=nl.add``).

    Traced as a DMA copy of the first source and read-modify-write adds of the others (the
    legacy ``dma_copy(dst_rmw_op=np.add)``); when ``dst`` is one of the sources it is the
    accumulator.
    """
    api = "nisa.dma_compute"
    require_dst(dst, api, onchip=False)
    if alu_name(reduce_op, f"{api} reduce_op") != "add":
        raise NkiError(None, f"{api}: reduce_op must be nl.add", user_location())
    if scales is not None and any(float(s) != 1.0 for s in scales):
        raise NkiError(None, f"{api}: scales must all be 1.0", user_location())
    srcs = list(srcs)
    if not 1 <= len(srcs) <= 16:
        raise NkiError(None, f"{api}: takes 1 to 16 sources, got {len(srcs)}", user_location())
    own = [s for s in srcs if isinstance(s, NkiTensor) and s.access() == dst.access()]
    rest = [s for s in srcs if not (isinstance(s, NkiTensor) and s.access() == dst.access())]
    if not own:
        L.dma_copy(dst=dst, src=rest.pop(0))
    for s in rest:
        L.dma_copy(dst=dst, src=s, dst_rmw_op=np.add)


def tensor_copy(dst, src, engine=N.engine.unknown, name=None, dtype=None):
    """Copy ``src`` into ``dst`` (Vector/Scalar/GpSimd; the way out of PSUM), casting.

    A view with a run-time offset (``.ap(scalar_offset=...)``) on either side is the legacy
    dynamic copy. ``dtype=`` (passed by NKI 0.2.0-era kernels) is accepted; the result has
    ``dst``'s dtype, as in NKI 0.2+.
    """
    api = "nisa.tensor_copy"
    require_dst(dst, api)
    eng = L.engine[N.enum_member(N.engine, engine, api, "engine").name]
    if _has_dyn(dst):
        L.tensor_copy_dynamic_dst(dst=dst, src=src, engine=eng)
        return
    if _has_dyn(src):
        into(dst, L.tensor_copy_dynamic_src(src, dtype=dst.dtype, engine=eng), api)
        return
    into(dst, L.tensor_copy(src, dtype=dst.dtype, engine=eng), api)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """``dst = where(predicate, src, dst)`` on Vector Engine."""
    require_dst(dst, "nisa.tensor_copy_predicated")
    L.tensor_copy_predicated(src=src, dst=dst, predicate=predicate, reverse_pred=reverse_pred)


def memset(dst, value, engine=N.engine.unknown, name=None):
    """Fill ``dst`` with the compile-time ``value`` (its type must match ``dst``'s dtype)."""
    api = "nisa.memset"
    require_dst(dst, api)
    if D.is_int(dst.dtype) and isinstance(value, (float, np.floating)) and \
            float(value) != int(value):
        raise NkiError(None, f"{api}: value {value!r} does not fit the integer dtype "
                       f"{D.name_of(dst.dtype)} of 'dst'", user_location(),
                       "since NKI 0.3 the value's type must match the destination's dtype")
    eng = L.engine[N.enum_member(N.engine, engine, api, "engine").name]
    into(dst, L.memset(tuple(dst.shape), value, dst.dtype, engine=eng), api)


def _pattern_expr(api, dst, pattern, offset, channel_multiplier):
    try:
        pairs = [(int(s), int(n)) for s, n in pattern]
    except (TypeError, ValueError):
        raise NkiError(None, f"{api}: pattern must be [[step, num], ...], got {pattern!r}",
                       user_location()) from None
    nd = 1 + len(pairs)
    e = E.add(E.const(int(offset)),
              E.mul(E.as_expr(E.Iota(int(dst.shape[0]), 0, nd)), int(channel_multiplier)))
    for k, (step, num) in enumerate(pairs):
        e = E.add(e, E.mul(E.as_expr(E.Iota(num, k + 1, nd)), step))
    total = int(np.prod([n for _, n in pairs]))
    free = int(np.prod(dst.shape[1:])) if len(dst.shape) > 1 else 1
    if total != free:
        raise NkiError(None, f"{api}: pattern {pattern!r} covers {total} elements per partition, "
                       f"'dst' holds {free}", user_location(),
                       "the pattern's nums multiply to dst's elements per partition")
    return e


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """``dst = offset + p * channel_multiplier + sum(i_k * step_k)`` (int32, GpSimd)."""
    api = "nisa.iota"
    require_dst(dst, api)
    e = _pattern_expr(api, dst, pattern, offset, channel_multiplier)
    into(dst, L.iota(IndexExpr(e), dst.dtype), api)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value,
                  cmp_op=None, offset=0, name=None):
    """``dst = on_true_tile where cmp_op(offset + p*cm + sum(i_k*step_k), 0), else on_false``."""
    api = "nisa.affine_select"
    require_dst(dst, api)
    op = "equal" if cmp_op is None else alu_name(cmp_op, f"{api} cmp_op")
    if op not in _CMP:
        raise NkiError(None, f"{api}: cmp_op must be a comparison (nl.equal, nl.greater_equal"
                       f"...), got {op}", user_location())
    e = _pattern_expr(api, dst, pattern, offset, channel_multiplier)
    pred = IndexExpr(E.compare(_CMP[op], e, E.const(0)))
    src = on_true_tile
    if tuple(on_true_tile.shape) != tuple(E.grid_shape([e])):
        src = on_true_tile.reshape(tuple(E.grid_shape([e])))
    into(dst, L.affine_select(pred, src, on_false_value, dtype=dst.dtype), api)


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=N.reduce_cmd.reset_reduce, reduce_res=None, reduce_op=None,
                 range_start=0, on_false_value=FP32_MIN, name=None):
    """Keep elements whose free index lies in the bounds, max-reduce into ``reduce_res``."""
    api = "nisa.range_select"
    require_dst(dst, api)
    value = L.range_select(on_true_tile=on_true_tile, comp_op0=comp_op0, comp_op1=comp_op1,
                           bound0=bound0, bound1=bound1,
                           reduce_cmd=N.legacy_cmd(reduce_cmd, api), reduce_res=reduce_res,
                           reduce_op=np.amax if reduce_op is None else reduce_op,
                           range_start=range_start, on_false_value=on_false_value,
                           dtype=dst.dtype)
    into(dst, value, api, extra=(reduce_res,))


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None,
                  reduce_cmd=N.reduce_cmd.idle, reduce_op=None, reverse_pred=False, name=None):
    """``dst = where(predicate, on_true, on_false)``, optional max-reduction."""
    api = "nisa.select_reduce"
    require_dst(dst, api)
    L.select_reduce(dst=dst, predicate=predicate, on_true=on_true, on_false=on_false,
                    reduce_res=reduce_res, reduce_cmd=N.legacy_cmd(reduce_cmd, api),
                    reduce_op=np.amax if reduce_op is None else reduce_op,
                    reverse_pred=reverse_pred)


def dropout(dst, data, prob, name=None):
    """Zero elements of ``data`` with probability ``prob`` into ``dst``."""
    api = "nisa.dropout"
    require_dst(dst, api)
    into(dst, L.dropout(data, prob, dtype=dst.dtype), api)


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """``dst[q*32 + i] = src[q*32 + shuffle_mask[i]]`` per 32-partition quadrant."""
    require_dst(dst, "nisa.nc_stream_shuffle")
    L.nc_stream_shuffle(src, dst, shuffle_mask)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Gather within each 16-partition GpSimd core group."""
    api = "nisa.local_gather"
    require_dst(dst, api)
    into(dst, L.local_gather(src_buffer, index, num_elem_per_idx, num_valid_indices), api)


def sequence_bounds(dst, segment_ids, name=None):
    """Start and end index of each element's segment."""
    api = "nisa.sequence_bounds"
    require_dst(dst, api)
    into(dst, L.sequence_bounds(segment_ids=segment_ids, dtype=dst.dtype), api)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=None, name=None):
    """Send ``src`` to core ``send_to_rank``; ``dst`` receives ``src`` of ``recv_from_rank``.

    Between the cores of one ``kernel[2]`` launch (ranks 0 and 1); both cores call it.
    """
    from ..collectives.lnc import emit_sendrecv
    emit_sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id)


def core_barrier(data, cores, engine=None, name=None):
    """Every core in ``cores`` (``(0, 1)``) waits until all have reached the barrier."""
    from ..collectives.lnc import emit_core_barrier
    emit_core_barrier(data, cores)

