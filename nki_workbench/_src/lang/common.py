"""Shared helpers of the ``nki.language`` implementation: buffers, argument checks, docs."""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..trace import context as C
from ..trace.buffers import Buffer, hbm, private_hbm, psum, sbuf, shared_hbm
from ..trace.emit import dtype_of
from ..trace.tensor import NkiTensor

__all__ = ["Buffer", "sbuf", "psum", "hbm", "private_hbm", "shared_hbm", "buffer_of", "tiles_in",
           "broadcast", "out_dtype", "axes_of", "NkiTensor"]


def buffer_of(buffer, api: str) -> Buffer:
    """Normalise a ``buffer=`` argument (``None`` → SBUF)."""
    if buffer is None:
        return sbuf
    if isinstance(buffer, Buffer):
        return buffer
    to = getattr(buffer, "as_buffer", None)
    if to is not None:
        return to()
    raise NkiError(None, f"{api}: buffer must be nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or an "
                   f"ncc allocation, got {buffer!r}", user_location())


def tiles_in(args) -> list:
    """The tensor operands among ``args``."""
    return [a for a in args if isinstance(a, NkiTensor)]


def pad_tile_shape(shape, ndim: int) -> tuple:
    """A tile shape with unit free dims appended up to ``ndim`` (dim 0 stays the partition)."""
    shape = tuple(shape)
    return shape + (1,) * (ndim - len(shape)) if shape else (1,) * ndim


def broadcast(api: str, *shapes) -> tuple:
    """Broadcast of tile shapes.

    Partition dims align (shorter shapes get unit free dims appended, so a ``[P]`` reduction
    result broadcasts like ``[P, 1]``), then numpy rules apply.
    """
    nd = max((len(s) for s in shapes), default=0)
    try:
        return tuple(np.broadcast_shapes(*[pad_tile_shape(s, nd) for s in shapes]))
    except ValueError:
        code = "err_num_partition_mismatch" if len({s[0] for s in shapes if s}) > 1 else None
        raise NkiError(code, f"{api}: operand shapes {[list(s) for s in shapes]} do not "
                       "broadcast", user_location(),
                       "partition sizes must match or be 1 (use nl.broadcast_to)") from None


def out_dtype(dtype, *operands):
    """Explicit ``dtype=`` or the NKI promotion of the operands."""
    if dtype is not None:
        return D.canonical(dtype)
    return D.result_type(*[dtype_of(o) for o in operands])


def axes_of(api: str, axis, ndim: int) -> tuple:
    """Normalise a reduction ``axis`` argument; the partition axis (0) is refused."""
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise NkiError(None, f"{api}: axis {a} out of range for a {ndim}-D tile",
                           user_location())
        out.append(a % ndim)
    if 0 in out:
        raise NkiError("wb_partition_axis_reduction",
                       f"{api} reduces along axis 0, the partition dimension", user_location(),
                       "reduce along free axes (1..); for a partition reduction transpose first, "
                       "matmul with a ones vector, or use nisa.tensor_partition_reduce")
    return tuple(sorted(set(out)))


def ctx(api: str):
    """The current trace context (error outside kernels)."""
    return C.require(api)
