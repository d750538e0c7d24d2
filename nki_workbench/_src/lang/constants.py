"""``nki.language`` constants: ``tile_size`` (per target), and the dtype helpers re-exported."""

from __future__ import annotations

from ..hw import DEFAULT_TARGET, get_target
from ..trace import context as C
from ..trace.index import mgrid

__all__ = ["tile_size", "TileSize", "gemm_grid", "gemm_stationary_grid"]


class TileSize:
    """Hardware tile-size limits of the target being traced (``nl.tile_size.pmax`` ...).

    Outside a kernel trace the values are those of the default target (trn1).

    Attributes:
        pmax: max partition-dim size of an SBUF/PSUM tile (128).
        psum_fmax: max free size of a PSUM tile in fp32 elements (512 = one 2 KiB bank).
        gemm_stationary_fmax: max free size of the matmul stationary operand (128).
        gemm_moving_fmax: max free size of the matmul moving operand (512).
        bn_stats_fmax: max free size of ``nisa.bn_stats`` input (512).
        psum_min_align: min byte alignment of PSUM free-dim addresses.
        sbuf_min_align: min byte alignment of SBUF free-dim addresses.
        total_available_sbuf_size: usable SBUF bytes per partition.
    """

    _FIELDS = ("pmax", "psum_fmax", "gemm_stationary_fmax", "gemm_moving_fmax", "bn_stats_fmax",
               "psum_min_align", "sbuf_min_align", "total_available_sbuf_size")

    def __getattr__(self, name):
        if name not in self._FIELDS:
            raise AttributeError(f"nl.tile_size has no attribute {name!r}")
        ctx = C.current()
        return getattr(get_target(ctx.target if ctx else DEFAULT_TARGET), name)

    def __dir__(self):
        return list(self._FIELDS)

    def __repr__(self):
        return "nl.tile_size(" + ", ".join(f"{f}={getattr(self, f)}" for f in self._FIELDS) + ")"


tile_size = TileSize()


def gemm_grid():
    """Index grid of a full matmul moving/output tile: ``nl.mgrid[0:pmax, 0:gemm_moving_fmax]``.

    NKI ships this helper undocumented; we define it as the grid of the largest matmul tile.

    Returns:
        MGrid: ``(i_p, i_f)`` index grids.
    """
    return mgrid[0:tile_size.pmax, 0:tile_size.gemm_moving_fmax]


def gemm_stationary_grid():
    """Index grid of a full matmul stationary tile: ``nl.mgrid[0:pmax, 0:gemm_stationary_fmax]``.

    Returns:
        MGrid: ``(i_p, i_f)`` index grids.
    """
    return mgrid[0:tile_size.pmax, 0:tile_size.gemm_stationary_fmax]
