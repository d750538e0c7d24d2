"""``nki.distributed``: group-aware collectives over the tensor-parallel group.

The group-aware layer of NKI's collectives (``neuronxcc.nki.distributed``, also imported as
``neuronxcc.nki.distributed.collectives``). NKI does not document it; the signatures follow
public reverse-engineering notes (``shared/reference/nki-api.md`` §5.4) and are partly inferred:

* Sources come first: ``all_reduce(srcs, dsts, op)``, ``all_gather(srcs, dsts, op,
  all_gather_dim)``, ``reduce_scatter(srcs, dsts, op, dim)``, ``all_to_all(srcs, dsts, op,
  split_dim, concat_dim)``, ``broadcast(srcs, dsts, op, root)``, ``collective_permute(srcs, dsts,
  source_target_pairs)``.
* The group is the tensor-parallel group of the launch: these calls carry no replica groups and
  trace to ``<kind>_cc`` instructions, whose group the runtime supplies. In simulation that is
  the ``replica_groups`` passed to :func:`nki_workbench.simulate_ranks` (default: all ranks in
  one group). A ``replica_groups=`` keyword overrides it (tracing to ``<kind>_cc_raw``).
* ``broadcast``'s ``root`` is a position within the group (NKI's ``broadcast_sizes`` argument,
  whose meaning is unknown, is not supported).
* ``collective_permute`` without ``source_target_pairs`` is a ring shift within the group:
  member ``i`` receives from member ``i - shift``.
* Data semantics are the same as :mod:`nki_workbench.nki.nccl` (see there).
"""

from __future__ import annotations

import sys

import numpy as np

from .._src.collectives.trace import any_op, emit_collective, int_arg, reduce_op
from .nccl import pairs_of

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
           "collective_permute"]


def all_reduce(srcs, dsts, op=np.add, *, replica_groups=None, dtype=None, mask=None):
    """Reduce ``srcs`` over the tensor-parallel group into every member's ``dsts``.

    Args:
        srcs: source tensors (HBM or SBUF).
        dsts: destination tensors, same shapes (may be the sources).
        op: reduction operator (default ``np.add``).
        replica_groups: override the launch topology's groups.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("all_reduce", "distributed.all_reduce", srcs=srcs, dsts=dsts,
                    attrs={"op": reduce_op(op, "distributed.all_reduce")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def all_gather(srcs, dsts, op=None, all_gather_dim=0, *, replica_groups=None, dtype=None,
               mask=None):
    """Concatenate every member's ``srcs`` along ``all_gather_dim`` (group order).

    Args:
        srcs: source tensors.
        dsts: destinations: ``all_gather_dim`` is the group size times the source's.
        op: recorded only.
        all_gather_dim: dimension to concatenate along.
        replica_groups: override the launch topology's groups.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("all_gather", "distributed.all_gather", srcs=srcs, dsts=dsts,
                    attrs={"dim": all_gather_dim, "op": any_op(op, "distributed.all_gather")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def reduce_scatter(srcs, dsts, op=np.add, dim=0, *, replica_groups=None, dtype=None, mask=None):
    """Reduce over the group; member ``i`` receives chunk ``i`` along ``dim``.

    Args:
        srcs: source tensors.
        dsts: destinations: ``dim`` is the source's divided by the group size.
        op: reduction operator (default ``np.add``).
        dim: dimension that is scattered.
        replica_groups: override the launch topology's groups.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("reduce_scatter", "distributed.reduce_scatter", srcs=srcs, dsts=dsts,
                    attrs={"dim": dim, "op": reduce_op(op, "distributed.reduce_scatter")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def all_to_all(srcs, dsts, op=None, split_dim=0, concat_dim=0, *, replica_groups=None,
               dtype=None, mask=None):
    """Split along ``split_dim``, chunk ``j`` to member ``j``, concatenate along ``concat_dim``.

    Args:
        srcs: source tensors.
        dsts: destinations.
        op: recorded only.
        split_dim: dimension the sources are split along.
        concat_dim: dimension the received chunks are concatenated along.
        replica_groups: override the launch topology's groups.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("all_to_all", "distributed.all_to_all", srcs=srcs, dsts=dsts,
                    attrs={"split_dim": split_dim, "concat_dim": concat_dim,
                           "op": any_op(op, "distributed.all_to_all")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def broadcast(srcs, dsts, op=None, root=0, *, replica_groups=None, dtype=None, mask=None):
    """Every member receives the ``srcs`` of the member at position ``root`` of the group.

    Args:
        srcs: source tensors.
        dsts: destinations, same shapes.
        op: recorded only.
        root: position of the sender within the group.
        replica_groups: override the launch topology's groups.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("broadcast", "distributed.broadcast", srcs=srcs, dsts=dsts,
                    attrs={"root": int_arg(root, "root"),
                           "op": any_op(op, "distributed.broadcast")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def collective_permute(srcs, dsts, source_target_pairs=None, *, shift=1, replica_groups=None,
                       dtype=None, mask=None):
    """Permute data between ranks: explicit ``(source, target)`` pairs or a ring shift.

    Args:
        srcs: source tensors.
        dsts: destination tensors, same shapes.
        source_target_pairs: global-rank pairs; ``None``: member ``i`` of each group receives
            from member ``i - shift``.
        shift: ring distance when no pairs are given.
        replica_groups: override the launch topology's groups.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    api = "distributed.collective_permute"
    attrs = {"pairs": None if source_target_pairs is None else
             pairs_of(source_target_pairs, api), "shift": int_arg(shift, "shift")}
    emit_collective("collective_permute", api, srcs=srcs, dsts=dsts, attrs=attrs,
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


collectives = sys.modules[__name__]
sys.modules[__name__ + ".collectives"] = collectives
