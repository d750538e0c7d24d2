"""Static work budget for IR that is about to be simulated.

:func:`estimate_work` sums, over loop trips and SPMD programs, the instruction executions and the
elements they touch, plus the bytes of all declared tensors; :func:`over_budget` refuses an
estimate above a :class:`Budget` with ``wb_invalid_ir``. ``simulate_backend_config`` runs both
before it builds anything, so a mutated trip count or shape fails in microseconds instead of
running for minutes or allocating without bound. Run it on validated IR (it trusts the structure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import dtypes as D
from . import expr as E
from .nodes import Access, Inst, Kernel, Loop, Scalar
from .validate import InvalidIRError

__all__ = ["Budget", "DEFAULT_BUDGET", "estimate_work", "over_budget", "check_budget"]


@dataclass(frozen=True)
class Budget:
    """Static limits on the work one simulation of an IR may do (``None`` = unlimited).

    Attributes:
        steps: instruction executions, summed over loop trips and SPMD programs.
        elements: tensor elements the instructions touch, summed the same way.
        bytes: bytes of all declared tensors together.
    """

    steps: int | None = 1_000_000
    elements: int | None = 2_000_000_000
    bytes: int | None = 1 << 30


DEFAULT_BUDGET = Budget()
"""What :func:`~nki_workbench.simulate_backend_config` allows unless told otherwise: a guard
against runaway IR (no hang, nothing over 1 GiB without being asked), not a speed promise — the
interpreter runs roughly 10^3..10^4 instruction executions per second."""


def _grid_size(a: Access, decls) -> int:
    decl = decls.get(a.tensor)
    whole = math.prod(decl.shape) if decl is not None else 1
    grid = whole if a.index is None else math.prod(E.grid_shape(a.index))
    # why: the executors build the index grid even when a shape override narrows the value
    return max(grid, math.prod(a.shape)) if a.shape is not None else grid


def _expr_size(e) -> int:
    return math.prod(E.grid_shape([e]))


def _trips(loop: Loop) -> int:
    # why: len(range(...)) overflows a C ssize_t for the huge bounds a mutated IR may hold
    if loop.step > 0:
        return max(0, (loop.stop - loop.start + loop.step - 1) // loop.step)
    return max(0, (loop.start - loop.stop - loop.step - 1) // -loop.step)


def estimate_work(kernel: Kernel) -> dict:
    """Static work estimate of one simulation of a (validated) kernel.

    Returns:
        ``{"steps": ..., "elements": ..., "bytes": ...}``: instruction executions and elements
        touched (summed over loop trips and SPMD programs), bytes of all declared tensors.
    """
    decls = kernel.decls()
    steps = elements = 0

    def walk(body, mult):
        nonlocal steps, elements
        for s in body:
            if isinstance(s, Loop):
                walk(s.body, mult * _trips(s))
            elif isinstance(s, Inst):
                steps += mult
                sizes = [_grid_size(a, decls) if isinstance(a, Access) else _expr_size(a)
                         for a in s.outs + s.ins if not isinstance(a, Scalar)]
                if s.mask is not None:
                    sizes.append(_expr_size(s.mask))  # why: the mask is evaluated on its grid
                elements += mult * max(sizes, default=1)
    walk(kernel.body, math.prod(kernel.grid))
    nbytes = sum(math.prod(d.shape) * D.itemsize(D.from_name(d.dtype))
                 for d in decls.values() if d.base is None)
    return {"steps": steps, "elements": elements, "bytes": nbytes}


def over_budget(kernel: Kernel, estimate: dict, budget: Budget) -> None:
    """Raise ``wb_invalid_ir`` when an :func:`estimate_work` result exceeds ``budget``."""
    for key, got in estimate.items():
        limit = getattr(budget, key)
        if limit is not None and got > limit:
            raise InvalidIRError(f"simulating kernel '{kernel.name}' would take {got:,} {key}, "
                                 f"over the budget of {limit:,} (raise it with "
                                 f"budget=Budget({key}=...))")


def check_budget(kernel: Kernel, budget: Budget = DEFAULT_BUDGET) -> dict:
    """Estimate the work of simulating ``kernel`` and refuse it when over ``budget``.

    Run it after :func:`validate` (it trusts the structure).

    Returns:
        The :func:`estimate_work` result.

    Raises:
        InvalidIRError: ``wb_invalid_ir`` naming the limit and the estimate.
    """
    est = estimate_work(kernel)
    over_budget(kernel, est, budget)
    return est
