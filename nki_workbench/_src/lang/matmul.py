"""``nki.language`` TensorE operations: ``matmul`` and ``transpose``."""

from __future__ import annotations

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..hw import get_target
from ..trace import context as C
from ..trace import emit as M

__all__ = ["matmul", "transpose"]


def matmul(x, y, *, transpose_x=False, mask=None, **kwargs):
    """``x @ y`` (or ``x.T @ y`` with ``transpose_x=True``) into a new fp32 PSUM tile.

    The contraction dimension is the partition dimension of ``y`` (and of ``x`` when
    ``transpose_x=True``, the recommended layout). Accumulate over K tiles with
    ``psum_tile += nl.matmul(...)``.

    Args:
        x: SBUF tile ``[M, K]`` (``[K, M]`` with ``transpose_x``), M <= 128.
        y: SBUF tile ``[K, N]``, K <= 128, N <= 512.
        transpose_x: whether ``x`` is already transposed (stationary layout).
        mask: compile-time predicate over the ``[M, N]`` result.

    Returns:
        A new PSUM tile ``[M, N]`` of float32.
    """
    ctx = C.require("nl.matmul")
    tgt = get_target(ctx.target)
    for t, arg in ((x, "x"), (y, "y")):
        M.require_tile(t, "matmul", arg)
        if len(t.shape) != 2:
            raise NkiError("err_exceed_max_supported_dimension",
                           f"nl.matmul operand '{arg}' must be 2-D, got shape {list(t.shape)}",
                           user_location())
    k_x, m = (x.shape if transpose_x else x.shape[::-1])
    k_y, n = y.shape
    if k_x != k_y:
        raise NkiError("err_num_partition_mismatch",
                       f"nl.matmul contraction sizes differ: x{list(x.shape)} "
                       f"(transpose_x={transpose_x}) vs y{list(y.shape)}", user_location(),
                       "the contraction axis must be the partition axis of both operands "
                       "(pass x as [K, M] with transpose_x=True)")
    if m > tgt.gemm_stationary_fmax:
        raise NkiError("err_size_of_dimension_exceed_arch_limit",
                       f"nl.matmul stationary free size {m} exceeds "
                       f"{tgt.gemm_stationary_fmax} (nl.tile_size.gemm_stationary_fmax)",
                       user_location(), "tile M in chunks of 128")
    if n > tgt.gemm_moving_fmax:
        raise NkiError("err_size_of_dimension_exceed_arch_limit",
                       f"nl.matmul moving free size {n} exceeds {tgt.gemm_moving_fmax} "
                       "(nl.tile_size.gemm_moving_fmax)", user_location(),
                       "tile N in chunks of 512")
    if k_x > tgt.pmax:
        raise NkiError("err_num_partition_exceed_arch_limit",
                       f"nl.matmul contraction size {k_x} exceeds {tgt.pmax} partitions",
                       user_location(), "loop over K tiles and accumulate with +=")
    return M.compute("matmul", [x, y], (m, n), D.canonical("float32"), buffer="psum",
                     mask=mask, attrs={"transpose_x": bool(transpose_x)}, api="nl.matmul")


def transpose(x, *, dtype=None, mask=None, **kwargs):
    """2-D partition/free transpose of a tile (``[P, F] -> [F, P]``), both dims <= 128.

    Args:
        x: 2-D SBUF/PSUM tile.
        dtype: result dtype (default x's).
        mask: compile-time predicate.

    Returns:
        A new SBUF tile.
    """
    M.require_tile(x, "transpose", "x")
    if len(x.shape) != 2:
        raise NkiError("err_exceed_max_supported_dimension",
                       f"nl.transpose takes a 2-D tile, got shape {list(x.shape)}",
                       user_location())
    p, f = x.shape
    if f > 128 or p > 128:
        raise NkiError("err_size_of_dimension_exceed_arch_limit",
                       f"nl.transpose of a [{p}, {f}] tile: both dims must be <= 128",
                       user_location(), "transpose 128x128 blocks")
    dt = D.canonical(dtype) if dtype is not None else x.dtype
    return M.compute("transpose", [x], (f, p), dt, mask=mask, api="nl.transpose")
