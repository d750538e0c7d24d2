"""What each collective computes, once every member of a replica group has arrived.

A table (:data:`SEMANTICS`) maps a kind to ``fn(group, arrivals, attrs) -> {rank: results}``:
``group`` is the replica group (global ranks, in group order), ``arrivals[rank].vals`` the
member's source values (one array per source, storage dtype), and ``results`` one array per
destination, or ``None`` where the destination is left untouched (a permute target nobody sends
to). Reductions run with the engines' numerics (:meth:`~..semantics.Numerics.alu`: fp32 arithmetic,
raw bits for bitwise ops), in group order; the interpreter then rounds to the instruction's
``dtype`` and the destination's dtype.

Conventions (NCCL semantics on the named dims; nki-api.md §5.4 marks them as inferred):

* ``all_gather``: ``dst = concat(src of member 0, ..., src of member n-1, axis=dim)``.
* ``reduce_scatter``: reduce over the group, split along ``dim`` into ``n`` equal chunks; member
  ``i`` receives chunk ``i``.
* ``all_to_all``: each source is split into ``n`` chunks along ``split_dim``; member ``i``
  receives chunk ``i`` of every member, concatenated in group order along ``concat_dim``.
* ``broadcast``: every member receives the sources of the member at position ``root``.
* ``collective_permute``: explicit ``pairs`` ``(source, target)`` of global ranks, or, without
  pairs, a ring: member ``i`` receives from member ``(i - shift) mod n``.
* ``collective_permute_implicit`` / ``_reduce_implicit``: the ring with ``shift = 1``.
"""

from __future__ import annotations

import numpy as np

from ..errors import NkiError
from ..semantics import NUMPY

__all__ = ["SEMANTICS", "compute"]


def _reduce(group, arrivals, op):
    n_src = len(arrivals[group[0]].vals)
    out = []
    for j in range(n_src):
        acc = np.array(arrivals[group[0]].vals[j])
        for m in group[1:]:
            acc = NUMPY.alu(op, acc, arrivals[m].vals[j])
        out.append(np.asarray(acc))
    return out


def _all_reduce(group, arrivals, attrs):
    res = _reduce(group, arrivals, attrs["op"])
    return {m: [r.copy() for r in res] for m in group}


def _all_gather(group, arrivals, attrs):
    dim = attrs["dim"]
    n_src = len(arrivals[group[0]].vals)
    res = [np.concatenate([arrivals[m].vals[j] for m in group], axis=dim) for j in range(n_src)]
    return {m: [r.copy() for r in res] for m in group}


def _reduce_scatter(group, arrivals, attrs):
    dim, n = attrs["dim"], len(group)
    res = _reduce(group, arrivals, attrs["op"])
    chunks = [np.split(r, n, axis=dim) for r in res]
    return {m: [np.array(c[i]) for c in chunks] for i, m in enumerate(group)}


def _all_to_all(group, arrivals, attrs):
    sd, cd, n = attrs["split_dim"], attrs["concat_dim"], len(group)
    n_src = len(arrivals[group[0]].vals)
    parts = {m: [np.split(arrivals[m].vals[j], n, axis=sd) for j in range(n_src)] for m in group}
    return {m: [np.concatenate([parts[src][j][i] for src in group], axis=cd)
                for j in range(n_src)] for i, m in enumerate(group)}


def _broadcast(group, arrivals, attrs):
    root = attrs.get("root", 0)
    src = group[root]
    return {m: [np.array(v) for v in arrivals[src].vals] for m in group}


def _permute(group, arrivals, attrs):
    pairs = attrs.get("pairs")
    n = len(group)
    if pairs is None:
        shift = attrs.get("shift", 1)
        pairs = tuple((group[i], group[(i + shift) % n]) for i in range(n))
    out = {m: [None] * len(arrivals[m].vals) for m in group}
    for s, t in pairs:
        out[t] = [np.array(v) for v in arrivals[s].vals]
    return out


SEMANTICS = {
    "all_reduce": _all_reduce,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "broadcast": _broadcast,
    "collective_permute": _permute,
    "collective_permute_implicit": _permute,
    "collective_permute_reduce_implicit": _permute,
}


def compute(kind: str, group: tuple, arrivals: dict, attrs: dict, api: str) -> dict:
    """Per-member results of one collective; checks destination shapes against the group size.

    Raises:
        NkiError: a member's destination cannot hold its result (names the rank and line).
    """
    pairs = attrs.get("pairs")
    if pairs is not None:
        outside = [p for p in pairs if p[0] not in group or p[1] not in group]
        if outside:
            a = arrivals[group[0]]
            raise NkiError("wb_collective_rank_not_in_group",
                           f"{api}: source_target_pairs {list(map(list, outside))} name ranks "
                           f"outside the replica group {list(group)}", a.loc,
                           "pairs connect ranks of the same group")
    root = attrs.get("root", 0)
    if kind == "broadcast" and not 0 <= root < len(group):
        raise NkiError("wb_collective_root", f"{api}: root={root} but the replica group "
                       f"{list(group)} has {len(group)} member(s)", arrivals[group[0]].loc,
                       "root is a position within the group")
    for m in group:
        a = arrivals[m]
        if kind in ("reduce_scatter", "all_to_all"):
            dim = attrs["dim"] if kind == "reduce_scatter" else attrs["split_dim"]
            for j, v in enumerate(a.vals):
                if v.shape[dim] % len(group):
                    raise NkiError("wb_collective_shape",
                                   f"{api} at rank {m}: srcs[{j}] of shape {list(v.shape)} "
                                   f"does not split into {len(group)} equal chunks along dim "
                                   f"{dim}", a.loc)
    res = SEMANTICS[kind](group, arrivals, attrs)
    for m in group:
        a = arrivals[m]
        for j, (r, want) in enumerate(zip(res[m], a.out_shapes, strict=True)):
            if r is not None and tuple(r.shape) != tuple(want):
                raise NkiError("wb_collective_shape",
                               f"{api} at rank {m}: dsts[{j}] has shape {list(want)}, but the "
                               f"result over the replica group {list(group)} has shape "
                               f"{list(r.shape)}", a.loc,
                               "size the destination for the group: all_gather multiplies "
                               "the gathered dim by the group size, reduce_scatter divides it")
    return res
