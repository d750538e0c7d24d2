"""The one float32 summation order: numpy's pairwise sum, written out so every executor runs it.

``np.add.reduce`` along a contiguous axis (numpy >= 1.9; checked bit for bit against numpy
2.4 by ``tests/sim/test_summation.py``) sums ``n`` float32 values ``x[0:n]`` as
``0.0 + pw(0, n)`` where

* ``pw(lo, m)`` for ``m < 8`` adds the elements one by one onto ``0.0``;
* for ``8 <= m <= 128`` it keeps 8 accumulators ``r[j] = x[lo + j] + x[lo + 8 + j] + ...``
  over the ``m // 8`` whole blocks of 8, combines them as
  ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))`` and then adds the ``m % 8`` remaining
  elements one by one;
* for ``m > 128`` it is ``pw(lo, h) + pw(lo + h, m - h)`` with ``h = m // 2`` rounded down to
  a multiple of 8.

Every step rounds to float32. :func:`pairwise_sum` evaluates that order over any array
namespace with few, batched operations: the leaves of the recursion are gathered into one
``(..., leaves, width)`` array (padded with ``-0.0``, which leaves every float32 unchanged
under addition), summed together, and combined level by level. The interpreter runs numpy's
own reduce instead (:func:`native_sum`) wherever the summed axis is innermost in memory and
:func:`native_matches` has confirmed that the installed numpy follows this order; the
compiled program runs :func:`pairwise_sum`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["pairwise_plan", "pairwise_sum", "native_matches", "native_sum"]

_LEAF = 128  # numpy's PW_BLOCKSIZE
_F32 = np.float32


@dataclass(frozen=True)
class Plan:
    """How ``pw(0, n)`` splits: its leaves in order and the tree that combines them."""

    n: int
    leaves: tuple  # (lo, m) of each leaf, left to right
    blocks: int  # whole blocks of 8 in the widest leaf
    tail: int  # the most remaining elements of a leaf
    tree: object  # a leaf index, or (left, right) subtrees
    depth: int  # the leaves' depth when all are at one depth (a perfect tree), else -1

    @property
    def uniform(self) -> bool:
        """All leaves have one size, so they are consecutive equal slices (a reshape)."""
        return len({m for _, m in self.leaves}) == 1


@functools.lru_cache(maxsize=256)
def pairwise_plan(n: int) -> Plan:
    """The split of ``pw(0, n)`` for ``n >= 8`` (see the module docstring)."""
    if n < 8:
        raise ValueError(f"pairwise_plan needs n >= 8, got {n}")
    leaves, depths = [], []

    def split(lo, m, d):
        if m <= _LEAF:
            leaves.append((lo, m))
            depths.append(d)
            return len(leaves) - 1
        h = m // 2
        h -= h % 8
        return split(lo, h, d + 1), split(lo + h, m - h, d + 1)

    tree = split(0, n, 0)
    blocks = max(m // 8 for _, m in leaves)
    tail = max(m % 8 for _, m in leaves)
    depth = depths[0] if len(set(depths)) == 1 else -1
    return Plan(n, tuple(leaves), blocks, tail, tree, depth)


def _gather(xp, x, plan: Plan):
    """``(..., leaves, 8 * blocks + tail)``: each leaf's blocks, then its tail, ``-0.0`` padded."""
    lead = x.shape[:-1]
    if plan.uniform:
        return x.reshape(lead + (len(plan.leaves), plan.leaves[0][1]))
    pad = xp.full(lead + (1,), _F32(-0.0), x.dtype)
    return xp.take(xp.concatenate([x, pad], axis=-1), _leaf_index(plan.n), axis=-1)


@functools.lru_cache(maxsize=256)
def _leaf_index(n: int):
    # why: built once per length, not on every interpreter call that gathers uneven leaves
    plan = pairwise_plan(n)
    width = 8 * plan.blocks + plan.tail
    idx = np.full((len(plan.leaves), width), n, np.int64)  # n: the padding column
    for k, (lo, m) in enumerate(plan.leaves):
        q, t = m // 8, m % 8
        idx[k, : 8 * q] = np.arange(lo, lo + 8 * q)
        idx[k, 8 * plan.blocks: 8 * plan.blocks + t] = np.arange(lo + 8 * q, lo + m)
    idx.setflags(write=False)
    return idx


def pairwise_sum(P, x, n: int):
    """Sum ``x``'s last axis (extent ``n``, float32) in numpy's pairwise order.

    Args:
        P: the executor's :class:`.Numerics` (its ``xp`` and ``fence``).
        x: float32 values, the summed axis last.
        n: its extent.

    Returns:
        The sums, shape ``x.shape[:-1]``.
    """
    xp, fence = P.xp, P.fence
    zero = _F32(0.0)
    if n < 8:
        s = xp.full(x.shape[:-1], zero, x.dtype)
        for i in range(n):
            s = fence(s + x[..., i])
        # why: a compiler may fold +0.0 + x into x; starting from +0.0 no sum is -0.0
        return xp.where(s == 0, zero, s)
    plan = pairwise_plan(n)
    g = _gather(xp, x, plan)
    q = plan.blocks
    blocks = g[..., : 8 * q].reshape(g.shape[:-1] + (q, 8))
    r = blocks[..., 0, :]
    for j in range(1, q):
        r = fence(r + blocks[..., j, :])
    # why: from here on every step adds sums or a tail's inputs (fenced by the instruction
    # that made them, as every input): nothing a compiler could contract, and none reorders
    # float adds without fast-math, so fences here would only cost compile time (XLA: 40 ms
    # more per sum, measured)
    a = [r[..., j] for j in range(8)]
    # why: the lanes taken one by one; strided halving (r[..., 0::2] + r[..., 1::2]) made XLA
    # fuse the whole sum into one loop over a 2-wide minor axis, 2x slower (measured)
    s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
    for j in range(plan.tail):
        s = s + g[..., 8 * q + j]
    if plan.depth >= 0:
        for _ in range(plan.depth):  # a perfect tree: neighbours pair up, level by level
            s = s[..., 0::2] + s[..., 1::2]
        s = s[..., 0]
    else:
        s = _combine(plan.tree, [s[..., k] for k in range(len(plan.leaves))])
    # why: numpy's reduce starts from the identity +0.0, and +0.0 + x is x except -0.0 -> +0.0
    return xp.where(s == 0, zero, s)


def _combine(tree, sums):
    # why: the rare split whose leaves sit at two depths: one add per inner node, in order
    if isinstance(tree, int):
        return sums[tree]
    return _combine(tree[0], sums) + _combine(tree[1], sums)


# ----------------------------------------------------------------------------- numpy's own
class _Plain:
    # why: the model on plain numpy (fence is the identity there), without importing numerics
    xp = np

    @staticmethod
    def fence(x):
        return x


_PLAIN = _Plain()
_PROBE_NS = (1, 7, 8, 9, 100, 128, 129, 136, 255, 384, 1000, 1024, 4095, 8193)


@functools.lru_cache(maxsize=1)
def native_matches() -> bool:
    """Whether the installed numpy's ``np.add.reduce`` sums in :func:`pairwise_sum`'s order.

    Checked once, on random data at lengths that reach every branch (short rows, one leaf,
    tails, uneven splits, leaves at two depths, long rows), where another order would differ.
    """
    rng = np.random.default_rng(20261205)
    for n in _PROBE_NS:
        x = (rng.standard_normal((3, n)) * 10.0 ** rng.uniform(-4, 4, (3, n))).astype(_F32)
        want = pairwise_sum(_PLAIN, x, n)
        if not np.array_equal(np.add.reduce(x, axis=-1).view(np.int32), want.view(np.int32)):
            return False
    return True


def native_sum(x):
    """The float32 sums of ``x``'s last axis: ``np.add.reduce`` where the layout allows.

    numpy sums pairwise only along the axis its iterator runs innermost (the smallest stride),
    so a view whose last axis is not that (a partition-axis reduction, a transposed tile) runs
    the model on the view instead: a contiguous copy first costs more than the model (a
    transposed 128x1024 tile: 187 us against 49 us, measured).
    """
    row = x.shape[-1] * x.itemsize
    inner = x.strides[-1] == x.itemsize and all(
        e == 1 or abs(s) >= row for e, s in zip(x.shape[:-1], x.strides[:-1], strict=True))
    return np.add.reduce(x, axis=-1) if inner else pairwise_sum(_PLAIN, x, x.shape[-1])
