"""The collective instruction kinds: IR opcodes, replica groups, and how a kind is displayed.

Every collective call traces to one IR instruction whose opcode is ``<kind>_cc`` or
``<kind>_cc_raw``, following the two tiers of NKI's collective builders:

* ``<kind>_cc``: the group comes from the launch topology (``nki.distributed`` and ``nki.nccl``
  calls without ``replica_groups``). In simulation that is the ``replica_groups`` given to
  :func:`~nki_workbench.simulate_ranks` (default: all ranks in one group).
* ``<kind>_cc_raw``: the caller gave ``replica_groups`` explicitly; the instruction carries them
  as the attribute ``replica_groups`` (a tuple of tuples of global rank ids).

Outputs (``outs``) are the destination tensors, inputs (``ins``) the sources. Attributes are IR
literals only, so the printer/parser round trip holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import NkiError
from ..ir.opcodes import register

__all__ = ["Kind", "KINDS", "OPCODE_KIND", "opcode", "kind_of", "normalize_groups",
           "group_of", "is_collective"]


@dataclass(frozen=True)
class Kind:
    """One collective kind.

    Attributes:
        name: the kind (``all_reduce``, ``send``...).
        doc: one line for the opcode table.
        reads_dst: whether the destination's old value takes part (``dst = op(dst, recv)``).
        p2p: point-to-point (send/recv) rather than a group collective.
    """

    name: str
    doc: str
    reads_dst: bool = False
    p2p: bool = False


_KIND_LIST = (
    Kind("all_reduce", "reduce srcs over the replica group; every member receives the result"),
    Kind("all_gather", "concatenate every member's srcs along a dim, in group order"),
    Kind("reduce_scatter", "reduce over the group, member i keeps chunk i along a dim"),
    Kind("all_to_all", "split along split_dim, chunk j goes to member j, concat along concat_dim"),
    Kind("broadcast", "every member receives the srcs of the group member at position root"),
    Kind("collective_permute", "send srcs along source->target pairs (or a ring shift)"),
    Kind("collective_permute_implicit", "ring permute: member i receives from member i-1"),
    Kind("collective_permute_reduce_implicit", "ring permute, reducing into dst: "
         "dst = op(dst, data of member i-1)", reads_dst=True),
    Kind("send", "send srcs to rank peer_id (buffered)", p2p=True),
    Kind("recv", "receive from rank peer_id into dsts (dst = op(dst, data) when op is given)",
         reads_dst=True, p2p=True),
)
KINDS: dict[str, Kind] = {k.name: k for k in _KIND_LIST}

# opcode -> (kind, raw)
OPCODE_KIND: dict[str, tuple[Kind, bool]] = {}
for _k in _KIND_LIST:
    for _raw, _tier in ((False, "launch-topology group"), (True, "explicit replica_groups")):
        _op = f"{_k.name}_cc_raw" if _raw else f"{_k.name}_cc"
        register(_op, "sync", "composite", f"collective ({_tier}): {_k.doc}")
        OPCODE_KIND[_op] = (_k, _raw)


def opcode(kind: str, raw: bool) -> str:
    """The IR opcode of ``kind`` (``raw``: explicit replica groups)."""
    return f"{kind}_cc_raw" if raw else f"{kind}_cc"


def kind_of(op: str) -> Kind:
    """The :class:`Kind` of an opcode."""
    return OPCODE_KIND[op][0]


def is_collective(op: str) -> bool:
    """Whether ``op`` is one of the collective opcodes defined here."""
    return op in OPCODE_KIND


def normalize_groups(groups, api: str, loc=None) -> tuple | None:
    """``replica_groups`` as a tuple of tuples of distinct non-negative ints.

    A flat list of ranks (``[0, 1, 2, 3]``) is one group. ``None`` stays ``None`` (the launch
    topology's groups).
    """
    if groups is None:
        return None
    if hasattr(groups, "tolist"):
        groups = groups.tolist()
    if not isinstance(groups, (list, tuple)) or not groups:
        raise NkiError("wb_collective_replica_groups", f"{api}: replica_groups must be a "
                       f"non-empty list of rank lists, got {groups!r}", loc,
                       "write replica_groups=[[0, 1, 2, 3]] (or [[0, 1], [2, 3]] to split)")
    if all(isinstance(r, int) or hasattr(r, "__index__") and not isinstance(r, (list, tuple))
           for r in groups):
        groups = [groups]
    out, seen = [], set()
    for g in groups:
        if hasattr(g, "tolist"):
            g = g.tolist()
        if not isinstance(g, (list, tuple)) or not g:
            raise NkiError("wb_collective_replica_groups", f"{api}: replica group {g!r} is not "
                           "a non-empty list of ranks", loc)
        grp = []
        for r in g:
            if isinstance(r, bool) or not hasattr(r, "__index__") or int(r) < 0:
                raise NkiError("wb_collective_replica_groups", f"{api}: rank {r!r} in replica "
                               f"group {list(g)} is not a non-negative integer", loc)
            r = int(r)
            if r in seen:
                raise NkiError("wb_collective_replica_groups", f"{api}: rank {r} appears twice "
                               f"in replica_groups {_show(groups)}", loc,
                               "each rank belongs to at most one replica group")
            seen.add(r)
            grp.append(r)
        out.append(tuple(grp))
    return tuple(out)


def group_of(rank: int, groups: tuple, api: str, loc, nranks: int) -> tuple:
    """The replica group holding ``rank``; errors name the rank, the groups and the line."""
    for g in groups:
        bad = [r for r in g if r >= nranks]
        if bad:
            raise NkiError("wb_collective_rank_out_of_range",
                           f"{api}: replica_groups {_show(groups)} name rank {bad[0]}, but only "
                           f"{nranks} rank(s) are simulated (ranks 0..{nranks - 1})", loc,
                           "simulate more ranks with nki_workbench.simulate_ranks, or fix the "
                           "groups")
    for g in groups:
        if rank in g:
            return g
    raise NkiError("wb_collective_rank_not_in_group",
                   f"{api}: rank {rank} is not in any replica group of {_show(groups)}", loc,
                   "every rank that executes a collective must belong to one of its replica "
                   "groups")


def _show(groups) -> str:
    return str([list(g) for g in groups])
