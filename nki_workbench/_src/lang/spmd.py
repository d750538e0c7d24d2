"""SPMD launch-grid queries.

``program_id``, ``num_programs``, ``program_ndim``, and the grid dimension builders ``nc`` /
``spmd_dim``.
"""

from __future__ import annotations

from ..errors import NkiError, user_location
from ..ir import expr as E
from ..trace import context as C
from ..trace.index import IndexExpr

__all__ = ["program_id", "num_programs", "program_ndim", "nc", "spmd_dim", "GridDim"]


def program_id(axis):
    """Index of this SPMD program along grid ``axis`` (a symbolic integer).

    Args:
        axis: grid axis.

    Returns:
        IndexExpr: usable in index arithmetic and masks (0 for an ungridded kernel).
    """
    ctx = C.require("nl.program_id")
    axis = int(axis)
    if not ctx.grid:
        return IndexExpr(E.const(0))
    if not 0 <= axis < len(ctx.grid):
        raise NkiError(None, f"nl.program_id({axis}): the launch grid {list(ctx.grid)} has "
                       f"{len(ctx.grid)} axes", user_location())
    return IndexExpr(E.as_expr(E.Var(f"pid{axis}")))


def num_programs(axes=None):
    """Grid size along ``axes`` (int or tuple); with no argument the total program count.

    Returns:
        int or tuple of ints.
    """
    ctx = C.require("nl.num_programs")
    grid = ctx.grid or (1,)
    if axes is None:
        n = 1
        for g in grid:
            n *= g
        return n
    if isinstance(axes, (tuple, list)):
        return tuple(grid[int(a)] if int(a) < len(grid) else 1 for a in axes)
    a = int(axes)
    return grid[a] if a < len(grid) else 1


def program_ndim():
    """Number of dimensions of the launch grid.

    Returns:
        int
    """
    return len(C.require("nl.program_ndim").grid)


class GridDim(int):
    """A launch-grid dimension built from sub-dimensions (``nl.nc(2) * 2``); acts as its size.

    Attributes:
        parts: tuple of ``("nc", n)`` / ``("spmd", n)`` sub-dimensions, outermost first.
    """

    parts: tuple

    def __new__(cls, parts):
        size = 1
        for _, n in parts:
            size *= n
        obj = super().__new__(cls, size)
        obj.parts = tuple(parts)
        return obj

    def __mul__(self, other):
        return spmd_dim(self, other)

    def __rmul__(self, other):
        return spmd_dim(other, self)

    def __repr__(self):
        return " * ".join(f"nc({n})" if k == "nc" else str(n) for k, n in self.parts)


def nc(n) -> GridDim:
    """A grid dimension of ``n`` physical NeuronCores (trn2 logical cores).

    Args:
        n: number of cores.

    Returns:
        GridDim
    """
    return GridDim((("nc", int(n)),))


def spmd_dim(*dims) -> GridDim:
    """Combine sub-dimensions into one grid dimension (outermost first).

    Args:
        *dims: ints or ``nl.nc(n)``.

    Returns:
        GridDim
    """
    parts = []
    for d in dims:
        parts.extend(d.parts if isinstance(d, GridDim) else (("spmd", int(d)),))
    return GridDim(tuple(parts))
