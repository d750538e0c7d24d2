"""``simulate_ranks``: run one kernel instance per rank, exchanging data at every collective."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from ..caching import lru_get, lru_put
from ..dispatch import kernel_launch
from ..encode import hardware_target
from ..errors import NkiError
from ..execution import package_outputs, run
from ..options import SimParams, legacy_target
from ..runtime import bind_inputs, get_traced
from .kinds import normalize_groups
from .rank_ctx import tracing_rank
from .sim import RankParams
from .timing import timelines_of_ranks
from .world import Aborted, World

__all__ = ["simulate_ranks", "prepare_ranks", "rank_timelines"]

_RANKS_KEY = ("simulate_ranks traces",)


def _kernel_parts(kernel, grid, platform_target):
    func, kgrid, ktarget, cache = kernel_launch(kernel)
    if grid is not None:
        kgrid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    target = hardware_target(platform_target) if platform_target else ktarget
    return func, tuple(kgrid), target, cache


def _args_kwargs(item, r):
    if isinstance(item, dict):
        return (), dict(item)
    if isinstance(item, (tuple, list)):
        return tuple(item), {}
    if isinstance(item, np.ndarray):
        return (item,), {}
    raise TypeError(f"simulate_ranks: rank_args[{r}] must be a tuple of kernel arguments (or a "
                    f"dict of keyword arguments), got {type(item).__name__}")


def prepare_ranks(kernel, rank_args, *, replica_groups=None, grid=None, platform_target=None):
    """Trace the kernel for every rank.

    Returns:
        ``(func, grid, groups, per_rank)`` with ``per_rank[r] = (traced, args, kwargs)``.
    """
    func, grid, target, cache = _kernel_parts(kernel, grid, platform_target)
    if not isinstance(rank_args, (list, tuple)) or not rank_args:
        raise TypeError("simulate_ranks: rank_args must be a non-empty list with one argument "
                        "tuple per rank")
    groups = normalize_groups(replica_groups, "simulate_ranks")
    n = len(rank_args)
    if groups is not None:
        bad = sorted(r for g in groups for r in g if r >= n)
        if bad:
            raise NkiError("wb_collective_rank_out_of_range",
                           f"simulate_ranks: replica_groups {[list(g) for g in groups]} name rank "
                           f"{bad[0]}, but rank_args has {n} rank(s)",
                           hint="give one argument tuple per rank")
    cache = {} if cache is None else cache
    # why: traces made under a rank probe live apart, so "reads its rank" is known for each
    sub = lru_get(cache, _RANKS_KEY)
    sub = lru_put(cache, _RANKS_KEY, {}) if sub is None else sub
    per_rank = []
    for r, item in enumerate(rank_args):
        args, kwargs = _args_kwargs(item, r)
        with tracing_rank(r) as probe:
            traced = get_traced(func, args, kwargs, grid=grid, target=target, cache=sub)
        if probe.read:
            traced._wb_reads_rank = r
        if getattr(traced, "_wb_reads_rank", r) != r:
            # why: rank_id() was read while tracing another rank; this rank needs its own trace
            with tracing_rank(r):
                traced = get_traced(func, args, kwargs, grid=grid, target=target)
        per_rank.append((traced, args, kwargs))
    return func, grid, groups, per_rank


def simulate_ranks(kernel, rank_args, *, replica_groups=None, grid=None,
                   params: SimParams | None = None, platform_target=None, target=None) -> list:
    """Simulate a kernel with collectives on several ranks at once.

    Every rank runs its own instance of the kernel (its own arguments, its own HBM) in its own
    thread; at each ``nki.nccl`` / ``nki.distributed`` collective the ranks of a replica group
    meet and exchange data (see :mod:`nki_workbench.nki.nccl` for the semantics). Waits are
    bounded: a collective some rank never reaches, a ``send`` nobody receives, a rank outside
    its replica group, or ranks passing different shapes raise :class:`NkiError` naming the
    ranks and the kernel line.

    Args:
        kernel: an ``@nki.jit`` kernel or a kernel function.
        rank_args: one entry per rank: a tuple of the kernel's arguments (or a dict of keyword
            arguments). The number of entries is the number of ranks.
        replica_groups: the launch topology's groups (used by ``nki.distributed`` and by
            ``nki.nccl`` calls without ``replica_groups``), e.g. ``[[0, 1], [2, 3]]``; default:
            all ranks in one group.
        grid: SPMD launch grid of every rank (default: the kernel's). Program ``p`` of one rank
            exchanges with program ``p`` of the others.
        params: :class:`SimParams` (``collective_timeout`` bounds every wait).
        platform_target: target (default: the kernel's).
        target: deprecated spelling of ``platform_target``.

    Returns:
        list: the outputs of each rank, in rank order, in the kernel's calling convention.

    Example:
        >>> outs = nki_workbench.simulate_ranks(tp_kernel, [(x, w[r]) for r in range(4)])
    """
    platform_target = legacy_target(platform_target, target, "simulate_ranks")
    func, grid, groups, per_rank = prepare_ranks(kernel, rank_args,
                                                 replica_groups=replica_groups, grid=grid,
                                                 platform_target=platform_target)
    params = params or SimParams()
    base = {f.name: getattr(params, f.name) for f in dataclasses.fields(SimParams)}
    pids = list(np.ndindex(*(grid or (1,))))
    world = World(len(per_rank), groups, pids, params.collective_timeout)
    results: list = [None] * len(per_rank)
    errors: dict = {}

    def worker(r):
        traced, args, kwargs = per_rank[r]
        try:
            arrays = bind_inputs(traced, func, args, kwargs)
            k = traced.kernel
            inputs = {d.name: a for d, a in zip(k.params, arrays, strict=True)}
            # why: no simulation hooks, one rank's kernel cannot re-run alone (collectives)
            outs = run(traced, inputs, RankParams(**base, world=world, rank=r), hooks=False)
            results[r] = package_outputs(k, outs, arrays)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors[r] = exc
            world.fail(exc)
        finally:
            world.mark_done(r)

    threads = [threading.Thread(target=worker, args=(r,), name=f"nki-rank-{r}", daemon=True)
               for r in range(len(per_rank))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        first = world.failed
        if first is None or isinstance(first, Aborted):
            first = next((e for e in errors.values() if not isinstance(e, Aborted)),
                         next(iter(errors.values())))
        raise first
    world.check_finished()
    return results


def rank_timelines(kernel, rank_args, *, replica_groups=None, grid=None, platform_target=None,
                   cores=None, target=None) -> list:
    """Estimated per-rank timelines of a collective kernel, with ranks in lock-step.

    Args:
        kernel: an ``@nki.jit`` kernel or a kernel function.
        rank_args: one argument tuple per rank (as for :func:`simulate_ranks`).
        replica_groups: the launch topology's groups (default: all ranks).
        grid: SPMD launch grid (default: the kernel's).
        platform_target: target (default: the kernel's).
        cores: physical cores per rank (default as :func:`~..sim.timing.timeline`).
        target: deprecated spelling of ``platform_target``.

    Returns:
        list of :class:`~..sim.timing.Timeline`, one per rank; collective events sit on the
        ``CC`` row, and ``event.issue_ns`` is when the rank arrived at the collective.
    """
    platform_target = legacy_target(platform_target, target, "rank_timelines")
    _, grid, groups, per_rank = prepare_ranks(kernel, rank_args, replica_groups=replica_groups,
                                              grid=grid, platform_target=platform_target)
    hw = hardware_target(platform_target) if platform_target else None
    return timelines_of_ranks(per_rank, groups, target=hw, cores=cores)
