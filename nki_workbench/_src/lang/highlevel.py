"""Higher-level ``nki.language`` ops.

``softmax``, ``rms_norm``, ``dropout``,
``gather_flattened``, ``expand_dims``, ``all_reduce`` and ``device_print``.
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..trace import context as C
from ..trace import emit as M
from .alu import REDUCIBLE, alu_name
from .common import NkiTensor, axes_of

__all__ = ["softmax", "rms_norm", "dropout", "gather_flattened", "expand_dims", "all_reduce",
           "device_print"]


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """Softmax along free axes: ``exp(x - max) / sum(exp(x - max))``.

    Args:
        x: input tile.
        axis: free axis or axes.
        dtype: output dtype (default x's).
        compute_dtype: NKI treats it like ``dtype``.
        mask: compile-time predicate.

    Returns:
        A new SBUF tile.
    """
    M.require_tile(x, "softmax", "x")
    axes = axes_of("nl.softmax", axis, x.ndim)
    dt = D.canonical(dtype or compute_dtype) if (dtype or compute_dtype) is not None else x.dtype
    return M.compute("softmax", [x], x.shape, dt, mask=mask, attrs={"axis": axes},
                     api="nl.softmax")


def rms_norm(x, w, axis, n, epsilon=1e-06, *, dtype=None, compute_dtype=None, mask=None,
             **kwargs):
    """``x / sqrt(sum(x**2, axis) / n + epsilon) * w``.

    Args:
        x: input tile.
        w: weight tile broadcastable to x.
        axis: free axis or axes of the RMS.
        n: element count the mean divides by.
        epsilon: added to the mean square.
        dtype: output dtype.
        compute_dtype: NKI treats it like ``dtype``.
        mask: compile-time predicate.

    Returns:
        A new SBUF tile.
    """
    M.require_tile(x, "rms_norm", "x")
    M.require_tile(w, "rms_norm", "w")
    axes = axes_of("nl.rms_norm", axis, x.ndim)
    dt = D.canonical(dtype or compute_dtype) if (dtype or compute_dtype) is not None else x.dtype
    return M.compute("rms_norm", [x, w], x.shape, dt, mask=mask,
                     attrs={"axis": axes, "n": int(n), "epsilon": float(epsilon)},
                     api="nl.rms_norm")


def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    """Zero each element with probability ``rate``; kept elements are not rescaled.

    Args:
        x: input tile.
        rate: scalar probability, or a ``[P, 1]`` tile of per-partition probabilities.
        dtype: output dtype.
        mask: compile-time predicate.

    Returns:
        A new SBUF tile.
    """
    ctx = C.require("nl.dropout")
    ctx.rng_used = True
    M.require_tile(x, "dropout", "x")
    dt = D.canonical(dtype) if dtype is not None else x.dtype
    return M.compute("dropout", [x, rate], x.shape, dt, mask=mask, api="nl.dropout")


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs):
    """Per partition, gather ``data_flat[p, indices_flat[p, k]]`` (free dims flattened).

    Args:
        data: 2- to 4-D tile.
        indices: uint32 tile with the same partition count; its shape is the result's.
        mask: compile-time predicate.
        dtype: result dtype (default data's).

    Returns:
        A new SBUF tile shaped like ``indices``.
    """
    M.require_tile(data, "gather_flattened", "data")
    M.require_tile(indices, "gather_flattened", "indices")
    if data.shape[0] != indices.shape[0]:
        raise NkiError("err_num_partition_mismatch", f"nl.gather_flattened: data has "
                       f"{data.shape[0]} partitions, indices {indices.shape[0]}",
                       user_location())
    if not D.is_int(indices.dtype):
        raise NkiError(None, f"nl.gather_flattened: indices must be integers (uint32), got "
                       f"{D.name_of(indices.dtype)}", user_location())
    dt = D.canonical(dtype) if dtype is not None else data.dtype
    return M.compute("gather_flattened", [data, indices], indices.shape, dt, mask=mask,
                     api="nl.gather_flattened")


def expand_dims(data, axis):
    """A view of ``data`` with size-1 dims inserted at ``axis``.

    Args:
        data: tensor.
        axis: int or tuple of positions (free axes).

    Returns:
        The view.
    """
    return data.expand_dims(axis)


def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True,
               asynchronous=False, **kwargs):
    """Reduce a tile across the SPMD programs along ``program_axes``.

    Every program receives the result. In simulation the programs of the grid run as concurrent
    threads that meet at each all-reduce.

    Args:
        x: input tile (same shape in every program).
        op: reduction operator (``np.add``, ``np.maximum``...).
        program_axes: grid axis or axes to reduce over.
        dtype: result dtype.
        mask: compile-time predicate.
        parallel_reduce: accepted for compatibility (a performance choice).
        asynchronous: accepted for compatibility (results are available at return).

    Returns:
        A new SBUF tile.
    """
    ctx = C.require("nl.all_reduce")
    M.require_tile(x, "all_reduce", "x")
    name = alu_name(op, "nl.all_reduce")
    if name not in REDUCIBLE:
        raise NkiError(None, f"nl.all_reduce: {name} is not a reduction operator",
                       user_location())
    axes = program_axes if isinstance(program_axes, (tuple, list)) else (program_axes,)
    axes = tuple(int(a) for a in axes)
    for a in axes:
        if not 0 <= a < max(len(ctx.grid), 1):
            raise NkiError(None, f"nl.all_reduce: program axis {a} is outside the launch grid "
                           f"{list(ctx.grid)}", user_location())
    ctx.attrs["has_collectives"] = True
    dt = D.canonical(dtype) if dtype is not None else x.dtype
    return M.compute("all_reduce", [x], x.shape, dt, mask=mask,
                     attrs={"op": name, "program_axes": axes}, api="nl.all_reduce")


def device_print(prefix, x, *, mask=None, **kwargs):
    """Print ``prefix`` and the value of ``x`` during simulation (no effect on hardware).

    Args:
        prefix: text printed before the value.
        x: tile or HBM tensor.
        mask: compile-time predicate.
    """
    C.require("nl.device_print")
    if not isinstance(x, NkiTensor):
        raise NkiError(None, f"nl.device_print prints tensors, got {type(x).__name__}",
                       user_location())
    M.emit("device_print", [], [x], attrs={"prefix": str(prefix)}, mask=mask,
           api="nl.device_print")
