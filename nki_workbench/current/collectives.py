"""``nki.collectives`` of today's ``import nki`` (NKI 0.2.0 / SDK 2.28+).

Over the workbench's collectives: the same ``<kind>_cc_raw`` IR instructions as ``nki.nccl`` /
``nki.distributed``.
Sources and destinations are lists (``srcs=[t]``, ``dsts=[t]``), the group is a
:class:`ReplicaGroup`, and ``op`` is an ``nl`` operator. Multi-rank runs go through
:func:`nki_workbench.simulate_ranks` (AWS's CPU simulator does not implement these); alone, a
kernel is rank 0 of a world of one. ``priority=`` and ``name=`` are accepted (scheduling hints).

Example:
    >>> import nki_workbench.current.collectives as ncc
    >>> ncc.ReplicaGroup([[0, 1]]).replica_groups
    ((0, 1),)
"""

from __future__ import annotations

from dataclasses import dataclass

from .._src.collectives.rank_ctx import current_rank
from .._src.collectives.trace import emit_collective, int_arg, reduce_op
from .._src.current.registers import VirtualRegister
from .._src.errors import NkiError, user_location
from ..nki.nccl import channels, pairs_of

__all__ = ["ReplicaGroup", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
           "collective_permute", "collective_permute_implicit",
           "collective_permute_implicit_reduce", "rank_id",
           "collective_permute_implicit_current_processing_rank_id", "all_to_all_v",
           "all_gather_v"]


@dataclass
class ReplicaGroup:
    """Non-overlapping groups of global rank ids, e.g. ``ReplicaGroup([[0, 1, 2, 3]])``.

    Attributes:
        replica_groups: the groups as a tuple of tuples of ints.
    """

    replica_groups: tuple

    def __post_init__(self):
        groups = self.replica_groups
        if isinstance(groups, ReplicaGroup):
            groups = groups.replica_groups
        self.replica_groups = tuple(tuple(int(r) for r in g) for g in groups)


def _groups(replica_group, api):
    if replica_group is None:
        return None
    if isinstance(replica_group, ReplicaGroup):
        return replica_group.replica_groups
    if isinstance(replica_group, (list, tuple)):
        return ReplicaGroup(replica_group).replica_groups
    raise NkiError("wb_collective_args", f"{api}: replica_group must be a "
                   f"nki.collectives.ReplicaGroup, got {type(replica_group).__name__}",
                   user_location(), "write ReplicaGroup([[0, 1, ...]])")


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """Reduce ``srcs`` with ``op`` over the group; every member's ``dsts`` get the result."""
    api = "nki.collectives.all_reduce"
    emit_collective("all_reduce", api, srcs=srcs, dsts=dsts, attrs={"op": reduce_op(op, api)},
                    replica_groups=_groups(replica_group, api))


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Concatenate every member's ``srcs`` along ``collective_dim`` in group order."""
    api = "nki.collectives.all_gather"
    emit_collective("all_gather", api, srcs=srcs, dsts=dsts,
                    attrs={"dim": int_arg(collective_dim, "collective_dim")},
                    replica_groups=_groups(replica_group, api))


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None):
    """Reduce over the group; member ``i`` keeps chunk ``i`` along ``collective_dim``."""
    api = "nki.collectives.reduce_scatter"
    emit_collective("reduce_scatter", api, srcs=srcs, dsts=dsts,
                    attrs={"op": reduce_op(op, api),
                           "dim": int_arg(collective_dim, "collective_dim")},
                    replica_groups=_groups(replica_group, api))


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Split along ``collective_dim``; chunk ``j`` goes to member ``j`` (concatenated there)."""
    api = "nki.collectives.all_to_all"
    dim = int_arg(collective_dim, "collective_dim")
    emit_collective("all_to_all", api, srcs=srcs, dsts=dsts,
                    attrs={"split_dim": dim, "concat_dim": dim},
                    replica_groups=_groups(replica_group, api))


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """Send ``srcs`` of rank ``s`` to ``dsts`` of rank ``t`` for every pair ``(s, t)``."""
    api = "nki.collectives.collective_permute"
    emit_collective("collective_permute", api, srcs=srcs, dsts=dsts,
                    attrs={"pairs": pairs_of(source_target_pairs, api)})


def _by_channel(lists, api, arg):
    if not isinstance(lists, (list, tuple)) or not lists:
        raise NkiError("wb_collective_operands", f"{api}: {arg} must be a non-empty list of "
                       "tensor lists, one per channel", user_location())
    return [list(x) if isinstance(x, (list, tuple)) else [x] for x in lists]


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group,
                                channel_ids=(0,), priority=None, name=None):
    """Ring permute per channel: member ``i`` receives member ``i - 1``'s tensors."""
    api = "nki.collectives.collective_permute_implicit"
    srcs = _by_channel(srcs_by_channel, api, "srcs_by_channel")
    dsts = _by_channel(dsts_by_channel, api, "dsts_by_channel")
    ids = list(channel_ids)
    if not len(srcs) == len(dsts) == len(ids):
        raise NkiError("wb_collective_operands", f"{api}: {len(srcs)} source list(s), "
                       f"{len(dsts)} destination list(s) and {len(ids)} channel id(s) differ",
                       user_location())
    for s, d, c in zip(srcs, dsts, ids, strict=True):
        emit_collective("collective_permute_implicit", api, srcs=s, dsts=d,
                        attrs=channels(c, max(len(ids), int(c) + 1), api),
                        replica_groups=_groups(replica_group, api))


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel,
                                       replica_group, op, channel_ids=(0,), priority=None,
                                       name=None):
    """Ring permute that reduces: ``dst = op(srcs0, srcs1 of member i - 1)`` (not modelled)."""
    raise NkiError("wb_unsupported", "nki.collectives.collective_permute_implicit_reduce "
                   "(two source lists) is not modelled by the workbench", user_location(),
                   "use collective_permute_implicit and a tensor_tensor reduction")


def rank_id(name=None):
    """This rank's id, as the register the device loads it into.

    Under :func:`nki_workbench.simulate_ranks` each rank is traced with its own id; a kernel
    run alone is rank 0 of a world of one.

    Returns:
        VirtualRegister: holding the rank id (an int while tracing).
    """
    return VirtualRegister(current_rank())


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group,
                                                           channel_id=0, name=None):
    """The rank whose data arrives at ring step ``iteration_id`` (a run-time register)."""
    raise NkiError("wb_unsupported", "nki.collectives.collective_permute_implicit_current_"
                   "processing_rank_id returns a run-time register, which the workbench does "
                   "not model", user_location())


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False,
                 has_rdispls=False, priority=None, name=None):
    """Variable-size all-to-all driven by a metadata tensor (not modelled)."""
    raise NkiError("wb_unsupported", "nki.collectives.all_to_all_v is not modelled by the "
                   "workbench", user_location())


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False,
                 has_rdispls=False, priority=None, name=None):
    """Variable-size all-gather driven by a metadata tensor (not modelled)."""
    raise NkiError("wb_unsupported", "nki.collectives.all_gather_v is not modelled by the "
                   "workbench", user_location())
