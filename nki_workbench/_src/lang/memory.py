"""``nki.language`` memory operations.

``load``, ``store``, ``load_transpose2d``,
``atomic_rmw``, ``copy`` and ``broadcast_to`` (DMA between HBM and SBUF, on-chip copies).
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..ir import expr as E
from ..trace import emit as M
from .alu import alu_name
from .common import NkiTensor, broadcast

__all__ = ["load", "store", "load_transpose2d", "atomic_rmw", "copy", "broadcast_to"]


def _has_dyn(t: NkiTensor) -> bool:
    return any(E.dyns(e) for e in (t.index or ()))


def load(src, *, mask=None, dtype=None, **kwargs):
    """Copy an HBM tensor (or a slice of it) into a new SBUF tile.

    The first dimension of the accessed region becomes the partition dimension (<= 128).
    The partition index may be an SBUF tile of indices (indirect load).

    Args:
        src: HBM tensor view.
        mask: compile-time predicate over the accessed region.
        dtype: dtype of the tile (default: src dtype).

    Returns:
        A new SBUF tile.
    """
    M.require_hbm(src, "load", "src")
    dt = D.canonical(dtype) if dtype is not None else src.dtype
    return M.compute("load", [src], src.shape, dt, mask=mask, api="nl.load")


def store(dst, value, *, mask=None, **kwargs):
    """Write a tile (or a scalar) into an HBM tensor (slice), converting to dst's dtype.

    Args:
        dst: HBM tensor view.
        value: SBUF/PSUM tile, or scalar to fill with.
        mask: compile-time predicate over dst's region.
    """
    M.require_hbm(dst, "store", "dst")
    if isinstance(value, NkiTensor):
        M.require_tile(value, "store", "value")
        ds, vs = tuple(dst.shape), tuple(value.shape)
        if ds != vs:
            ok = False
            try:
                ok = broadcast("nl.store", ds, vs) == ds
            except NkiError:
                ok = False
            if not ok and not (ds and vs and ds[0] == vs[0] and
                               _prod(ds[1:]) == _prod(vs[1:])):
                if _prod(ds) == _prod(vs) and (len(ds) < 2 or len(vs) < 2):
                    ok = True
                if not ok:
                    raise NkiError("err_store_dst_shape_smaller_than_other_shape"
                                   if _prod(ds) < _prod(vs) else None,
                                   f"nl.store: value of shape {list(vs)} does not fit dst of "
                                   f"shape {list(ds)}", user_location())
    M.emit("store", [dst], [value], attrs={"dtype": D.name_of(dst.dtype)}, mask=mask,
           api="nl.store")


def _prod(s):
    n = 1
    for x in s:
        n *= int(x)
    return n


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs):
    """Load a 2-D HBM region ``[N, M]`` transposed into an SBUF tile ``[M, N]`` (M <= 128).

    Args:
        src: 2-D HBM tensor view.
        mask: compile-time predicate over the source region.
        dtype: tile dtype (default: src dtype).

    Returns:
        A new SBUF tile.
    """
    M.require_hbm(src, "load_transpose2d", "src")
    if _has_dyn(src):
        raise NkiError("err_indirect_indices_are_not_supported_with_nki_api",
                       "nl.load_transpose2d does not take indirect indices", user_location())
    if len(src.shape) != 2:
        raise NkiError("err_exceed_max_supported_dimension", f"nl.load_transpose2d takes a 2-D "
                       f"region, got shape {list(src.shape)}", user_location())
    dt = D.canonical(dtype) if dtype is not None else src.dtype
    n, m = src.shape
    return M.compute("load_transpose2d", [src], (m, n), dt, mask=mask,
                     api="nl.load_transpose2d")


def atomic_rmw(dst, value, op, *, mask=None, **kwargs):
    """``dst = op(dst, value)`` atomically on HBM, with indirect indices on dst.

    Args:
        dst: HBM tensor indexed with an SBUF index tile on its partition dim.
        value: SBUF tile.
        op: ``np.add`` (the only operation NKI supports).
        mask: compile-time predicate.
    """
    M.require_hbm(dst, "atomic_rmw", "dst")
    name = alu_name(op, "nl.atomic_rmw")
    if name != "add":
        raise NkiError(None, f"nl.atomic_rmw supports op=np.add only, got {name}",
                       user_location())
    if not _has_dyn(dst):
        raise NkiError(None, "nl.atomic_rmw needs dst indexed with indirect (SBUF) indices",
                       user_location(), "index dst as dst[indices_tile, i_f]")
    M.require_tile(value, "atomic_rmw", "value")
    M.emit("atomic_rmw", [dst], [value], attrs={"op": name, "dtype": D.name_of(dst.dtype)},
           mask=mask, api="nl.atomic_rmw")


def copy(src, *, mask=None, dtype=None, **kwargs):
    """A copy of a tile (SBUF by default; assign into a PSUM tensor to place it there).

    Args:
        src: SBUF/PSUM tile.
        mask: compile-time predicate.
        dtype: result dtype (default: src dtype).

    Returns:
        A new tile.
    """
    M.require_tile(src, "copy", "src")
    dt = D.canonical(dtype) if dtype is not None else src.dtype
    return M.compute("copy", [src], src.shape, dt, mask=mask, api="nl.copy")


def broadcast_to(src, *, shape, **kwargs):
    """Broadcast a tile to ``shape`` with numpy rules (e.g. ``[1, F] -> [128, F]``).

    Args:
        src: SBUF/PSUM tile.
        shape: target shape.

    Returns:
        ``src`` itself when shapes are equal, else a new SBUF tile.
    """
    M.require_tile(src, "broadcast_to", "src")
    shape = tuple(int(s) for s in shape)
    if tuple(src.shape) == shape:
        return src
    src_shape = tuple(src.shape)
    while len(src_shape) > len(shape) and src_shape[-1] == 1:
        src_shape = src_shape[:-1]  # why: trailing unit dims hold no elements (NKI ignores them)
    if broadcast("nl.broadcast_to", src_shape, shape) != shape:
        raise NkiError(None, f"nl.broadcast_to: cannot broadcast {list(src.shape)} to "
                       f"{list(shape)}", user_location())
    return M.compute("broadcast_to", [src], shape, src.dtype, api="nl.broadcast_to")
