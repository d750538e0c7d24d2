"""Copy instructions of ``nki.isa``.

Copies: ``tensor_copy``, ``tensor_copy_dynamic_src/dst`` (run-time offsets into SBUF),
``tensor_copy_predicated``, ``dma_copy`` (indirect HBM indices, OOB modes, read-modify-write)
and ``dma_transpose``.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..ir import expr as E
from ..trace import emit as M
from . import common as K
from .enums import dge_mode as _dge
from .enums import engine as _engine
from .enums import oob_mode as _oob

__all__ = ["tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst",
           "tensor_copy_predicated", "dma_copy", "dma_transpose"]

M.DYNAMIC_ONCHIP_OPS.update({"tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"})
_PRED_DTYPES = ("uint8", "uint16", "uint32", "int8", "int16", "int32", "bool")
_COPY_ENGINES = frozenset({"vector", "scalar", "gpsimd"})


def _dyn_atoms(t):
    return [d for e in (t.index or ()) for d in E.dyns(e)]


def tensor_copy(src, *, mask=None, dtype=None, engine=_engine.unknown, **kwargs):
    """Copy a tile (casting to ``dtype``) on Vector (default), Scalar or GpSimd Engine.

    Vector/GpSimd copies are bit-exact when the dtype is unchanged; ScalarE on NeuronCore-v2
    always goes through float32 (lossy for large int32 values).

    Args:
        src: SBUF/PSUM tile.
        mask: compile-time predicate.
        dtype: result dtype (default: ``src``'s).
        engine: ``nisa.vector_engine``, ``nisa.scalar_engine`` or ``nisa.gpsimd_engine``.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new SBUF tile (assign into a PSUM tensor to place it there).
    """
    api = "nisa.tensor_copy"
    K.tile(src, api, "src")
    eng = K.pick_engine(api, engine, "vector", _COPY_ENGINES)
    K.require_psum_free(api, eng, src)
    dt = D.canonical(dtype) if dtype is not None else src.dtype
    via_f32 = eng == "scalar" and K.target().nc_version < 3
    return K.compute("tensor_copy", [src], src.shape, dt, eng, mask=mask, api=api,
                     attrs={"via_fp32": via_f32})


def _one_offset(api, t, arg):
    atoms = _dyn_atoms(t)
    for d in atoms:
        if int(np.prod(d.shape)) != 1:
            raise K.err("err_indirect_indices_free_dim", f"{api}: the run-time offset of '{arg}' "
                        f"must be a single value, got an index tile of shape {list(d.shape)}",
                        "one dynamic offset per instruction: loop over the offsets")
    return atoms


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=_engine.unknown, **kwargs):
    """Copy from an SBUF/PSUM tile addressed with a run-time offset read from SBUF.

    Example: ``out[ix, i] = nisa.tensor_copy_dynamic_src(src[ix, offsets[0, i] + iy])``.

    Args:
        src: on-chip tile view indexed with one run-time scalar offset.
        mask: compile-time predicate.
        dtype: result dtype.
        engine: Vector (default), GpSimd or Scalar Engine.
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new tile shaped like ``src``.
    """
    api = "nisa.tensor_copy_dynamic_src"
    K.tile(src, api, "src")
    _one_offset(api, src, "src")
    eng = K.pick_engine(api, engine, "vector", _COPY_ENGINES)
    K.require_psum_free(api, eng, src)
    dt = D.canonical(dtype) if dtype is not None else src.dtype
    return K.compute("tensor_copy_dynamic_src", [src], src.shape, dt, eng, mask=mask, api=api)


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=_engine.unknown,
                            **kwargs):
    """Copy a tile into an SBUF/PSUM destination addressed with a run-time offset.

    Args:
        dst: on-chip tile view indexed with one run-time scalar offset (written in place).
        src: source tile (same partitions and elements per partition).
        mask: compile-time predicate.
        dtype: intermediate dtype (default: ``dst``'s).
        engine: Vector (default), GpSimd or Scalar Engine.
        **kwargs: other NKI keyword arguments (accepted and ignored).
    """
    api = "nisa.tensor_copy_dynamic_dst"
    K.tile(dst, api, "dst")
    K.tile(src, api, "src")
    _one_offset(api, dst, "dst")
    K.same_partitions(api, ("dst", dst), ("src", src))
    K.same_free_size(api, ("dst", dst), ("src", src))
    eng = K.pick_engine(api, engine, "vector", _COPY_ENGINES)
    K.require_psum_free(api, eng, src, dst)
    dt = D.canonical(dtype) if dtype is not None else dst.dtype
    K.emit("tensor_copy_dynamic_dst", [dst], [src], eng, mask=mask, api=api,
           attrs={"dtype": D.name_of(dt)})


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None,
                           **kwargs):
    """``dst = where(predicate, src, dst)`` on Vector Engine (``reverse_pred`` inverts it).

    Args:
        src: tile (or scalar) copied where the predicate holds.
        dst: destination tile, unchanged elsewhere.
        predicate: integer/bool tile; non-zero = true.
        reverse_pred: copy where the predicate is false instead.
        mask: compile-time predicate.
        dtype: ignored beyond validation (``src`` and ``dst`` share a dtype).
        **kwargs: other NKI keyword arguments (accepted and ignored).
    """
    api = "nisa.tensor_copy_predicated"
    K.tile(dst, api, "dst")
    K.tile(predicate, api, "predicate")
    if K.is_tile(src):
        K.tile(src, api, "src")
        if src.dtype != dst.dtype:
            raise K.err(None, f"{api}: src ({D.name_of(src.dtype)}) and dst "
                        f"({D.name_of(dst.dtype)}) must have the same dtype",
                        "cast src first with nisa.tensor_copy(dtype=...)")
    elif not isinstance(src, (int, float, np.integer, np.floating)):
        raise K.err(None, f"{api}: src must be a tile or a scalar, got {type(src).__name__}")
    if D.name_of(predicate.dtype) not in _PRED_DTYPES:
        raise K.err(None, f"{api}: predicate must be an integer (uint8/uint16/uint32) tile, got "
                    f"{D.name_of(predicate.dtype)}")
    named = [("src", src), ("dst", dst), ("predicate", predicate)]
    K.same_partitions(api, *named)
    K.same_free_size(api, *named)
    K.no_both_psum(api, src, predicate, "src", "predicate")
    K.emit("tensor_copy_predicated", [dst], [src, predicate, dst], "vector", mask=mask, api=api,
           attrs={"dtype": D.name_of(dst.dtype), "reverse_pred": bool(reverse_pred)})


def _enum_name(enum, v, api, arg):
    try:
        return enum(int(v)).name
    except (ValueError, TypeError):
        raise K.err(None, f"{api}: {arg} must be a nisa.{enum.__name__} value, got "
                    f"{v!r}") from None


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=_oob.error,
             dge_mode=_dge.unknown):
    """DMA copy between HBM and SBUF (casting when dtypes differ).

    HBM sides may carry indirect (SBUF) row indices. ``oob_mode.skip`` drops rows whose
    indirect index is out of bounds; ``oob_mode.error`` raises ``IndexError``.
    ``dst_rmw_op=np.add`` accumulates into ``dst`` (duplicate indices are serialised).

    Args:
        dst: destination tensor (view).
        src: source tensor (view).
        mask: compile-time predicate.
        dst_rmw_op: ``None`` or ``np.add``.
        oob_mode: ``nisa.oob_mode.error`` (default) or ``skip``.
        dge_mode: ``nisa.dge_mode`` (``hwdge`` needs NeuronCore-v3+).
    """
    api = "nisa.dma_copy"
    for t, arg in ((dst, "dst"), (src, "src")):
        if not K.is_tile(t):
            raise K.err(None, f"{api}: '{arg}' must be a tensor, got {type(t).__name__}")
        t.check_live(api)
        if t.buffer == "psum":
            raise K.err("err_unsupported_memory", f"{api}: '{arg}' is in PSUM; DMA moves data "
                        "between HBM and SBUF", "copy PSUM to SBUF with nisa.tensor_copy")
    oob = _enum_name(_oob, oob_mode, api, "oob_mode")
    dge = _enum_name(_dge, dge_mode, api, "dge_mode")
    if dge == "hwdge" and not K.target().has_hwdge:
        raise K.err("wb_isa_unsupported", f"{api}: dge_mode.hwdge needs NeuronCore-v3 or later "
                    f"(target {K.target().name})", "use dge_mode.unknown or swdge")
    rmw = None
    if dst_rmw_op is not None:
        rmw = K.alu(dst_rmw_op, api, "dst_rmw_op")
        if rmw != "add":
            raise K.err(None, f"{api}: dst_rmw_op supports np.add only, got {rmw}")
        if oob != "error":
            raise K.err(None, f"{api}: dst_rmw_op requires oob_mode=nisa.oob_mode.error")
    ds, ss = tuple(dst.shape), tuple(src.shape)
    if int(np.prod(ds)) != int(np.prod(ss)) or (ds and ss and ds[0] != ss[0] and
                                               len(ds) > 1 and len(ss) > 1):
        raise K.err("err_store_dst_shape_smaller_than_other_shape" if np.prod(ds) < np.prod(ss)
                    else None, f"{api}: src of shape {list(ss)} does not match dst of shape "
                    f"{list(ds)}", "copy regions with the same partition size and elements")
    K.emit("dma_copy", [dst], [src], "dma", mask=mask, api=api,
           attrs={"dtype": D.name_of(dst.dtype), "oob_mode": oob, "dge_mode": dge,
                  "dst_rmw_op": rmw})


_PERMS = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs):
    """Transpose an HBM or SBUF tile with the DMA engine into a new SBUF tile.

    Default permutation: 2-D ``(1, 0)``, 3-D ``(2, 1, 0)``, 4-D ``(3, 1, 2, 0)``.

    Args:
        src: HBM tensor view or SBUF tile (no indirect indices).
        axes: one of the permutations above.
        mask: compile-time predicate.
        dtype: result dtype (default: ``src``'s).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Returns:
        A new SBUF tile.
    """
    api = "nisa.dma_transpose"
    if not K.is_tile(src):
        raise K.err(None, f"{api}: src must be a tensor, got {type(src).__name__}")
    src.check_live(api)
    if src.buffer == "psum":
        raise K.err("err_unsupported_memory", f"{api}: src must be in HBM or SBUF, not PSUM")
    if _dyn_atoms(src):
        raise K.err("err_indirect_indices_are_not_supported_with_nki_api",
                    f"{api} does not take indirect indices", "load with indirect indices first")
    nd = len(src.shape)
    if nd not in _PERMS:
        raise K.err("err_exceed_max_supported_dimension", f"{api}: src must be 2-D to 4-D, got "
                    f"shape {list(src.shape)}")
    perm = _PERMS[nd] if axes is None else tuple(int(a) for a in axes)
    if perm != _PERMS[nd]:
        raise K.err(None, f"{api}: axes {perm} not supported for a {nd}-D tile",
                    f"use {_PERMS[nd]}")
    shape = tuple(src.shape[a] for a in perm)
    dt = D.canonical(dtype) if dtype is not None else src.dtype
    return K.compute("dma_transpose", [src], shape, dt, "dma", mask=mask, api=api,
                     attrs={"axes": perm})
