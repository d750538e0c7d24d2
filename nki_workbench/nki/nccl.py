"""``nki.nccl``: collective communication between ranks (``neuronxcc.nki.nccl``).

NKI ships this module undocumented; the signatures below follow its usage in Neuron-team kernels
and public reverse-engineering notes (``shared/reference/nki-api.md`` §5.4). What is inferred
rather than documented:

* Argument names and order: ``all_reduce(op, srcs, dsts, replica_groups, ...)``, likewise
  ``all_gather`` (``all_gather_dim``), ``reduce_scatter`` (``reduce_scatter_dim``),
  ``all_to_all`` (``split_dim``, ``concat_dim``, positional use
  ``all_to_all(np.add, [send], [recv], [[...]], 1, 1)``), ``collective_permute(dst, src,
  source_target_pairs)``, ``collective_permute_implicit(dst, src, replica_groups, channel_id,
  num_channels, mask)``, ``send(srcs, op, peer_id)``, ``recv(dsts, op, peer_id,
  replica_groups)``. ``srcs``/``dsts`` are lists of HBM or SBUF tensors (a single tensor is
  accepted too); source ``i`` pairs with destination ``i``.
* ``replica_groups``: a list of rank lists (``[[0, 1, 2, 3]]``; a flat list is one group); ranks
  are global rank ids. ``None`` means the launch topology's groups (the ``replica_groups`` of
  :func:`nki_workbench.simulate_ranks`, default: all ranks). Calls with explicit groups trace to
  ``<kind>_cc_raw`` instructions, the others to ``<kind>_cc`` (NKI's two builder tiers).
* Semantics are NCCL's on the named dims (see :mod:`nki_workbench._src.collectives.semantics`):
  member order within a group is the order of the list; ``op`` is a numpy reduction
  (``np.add``, ``np.maximum``, ...); ``all_gather``/``all_to_all``/``broadcast`` accept ``op``
  (NKI's calls pass one) and record it, but nothing is reduced.
* ``send`` is buffered and returns at once; ``recv`` takes the oldest unreceived message from
  ``peer_id`` (a global rank). ``recv(op=None)`` overwrites the destinations; with an ``op`` it
  reduces into them (``dst = op(dst, data)``). ``send``'s ``op`` is recorded only. With
  ``replica_groups``, sender and receiver must share a group.
* ``collective_permute_implicit``: each replica group is a ring; member ``i`` receives the
  sources of member ``i - 1``. ``collective_permute_reduce_implicit`` reduces what it receives
  into the destinations. ``channel_id``/``num_channels`` select the communication channel on
  hardware; they are recorded and checked (``0 <= channel_id < num_channels``), the data moved is
  the same. ``mask`` is NKI's compile-time predicate over the accessed elements.
* ``collective_permute``: a rank that is no pair's target keeps its destination unchanged (XLA
  writes zeros there; the workbench does not invent values).
* ``broadcast(op, srcs, dsts, replica_groups, root)``: ``root`` is a position in the group.
  NKI's ``broadcast_sizes`` argument (meaning unknown) is not supported.

Every call sets ``has_collectives`` on the kernel (it reaches the backend_config), and
``nki.benchmark`` refuses such kernels as NKI does. ``nki.simulate_kernel`` runs them as a single
rank (groups of one); :func:`nki_workbench.simulate_ranks` runs several.
"""

from __future__ import annotations

import sys

from .._src.collectives.trace import any_op, emit_collective, int_arg, reduce_op

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
           "collective_permute", "collective_permute_implicit",
           "collective_permute_reduce_implicit", "send", "recv"]


def all_reduce(op, srcs, dsts, replica_groups=None, *, dtype=None, mask=None):
    """Reduce ``srcs`` over each replica group; every member receives the result in ``dsts``.

    Args:
        op: reduction (``np.add``, ``np.maximum``, ``np.minimum``, ``np.multiply``...).
        srcs: source tensors (HBM or SBUF).
        dsts: destination tensors, same shapes as the sources (may be the sources).
        replica_groups: rank groups, e.g. ``[[0, 1, 2, 3]]`` (``None``: the launch topology).
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("all_reduce", "nccl.all_reduce", srcs=srcs, dsts=dsts,
                    attrs={"op": reduce_op(op, "nccl.all_reduce")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def all_gather(op, srcs, dsts, replica_groups=None, all_gather_dim=0, *, dtype=None, mask=None):
    """Concatenate every member's ``srcs`` along ``all_gather_dim`` into ``dsts``.

    Args:
        op: recorded (NKI passes one); nothing is reduced.
        srcs: source tensors.
        dsts: destinations: the sources' shape with ``all_gather_dim`` times the group size.
        replica_groups: rank groups (``None``: the launch topology).
        all_gather_dim: the dimension to concatenate along.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("all_gather", "nccl.all_gather", srcs=srcs, dsts=dsts,
                    attrs={"dim": all_gather_dim, "op": any_op(op, "nccl.all_gather")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def reduce_scatter(op, srcs, dsts, replica_groups=None, reduce_scatter_dim=0, *, dtype=None,
                   mask=None):
    """Reduce over the group; member ``i`` receives chunk ``i`` along ``reduce_scatter_dim``.

    Args:
        op: reduction operator.
        srcs: source tensors.
        dsts: destinations: the sources' shape with ``reduce_scatter_dim`` divided by the group
            size.
        replica_groups: rank groups (``None``: the launch topology).
        reduce_scatter_dim: the dimension that is scattered.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("reduce_scatter", "nccl.reduce_scatter", srcs=srcs, dsts=dsts,
                    attrs={"dim": reduce_scatter_dim, "op": reduce_op(op, "nccl.reduce_scatter")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def all_to_all(op, srcs, dsts, replica_groups=None, split_dim=0, concat_dim=0, *, dtype=None,
               mask=None):
    """Split along ``split_dim``, send chunk ``j`` to member ``j``, concat along ``concat_dim``.

    Args:
        op: recorded (NKI passes one); nothing is reduced.
        srcs: source tensors.
        dsts: destinations.
        replica_groups: rank groups (``None``: the launch topology).
        split_dim: dimension the sources are split along (into group-size chunks).
        concat_dim: dimension the received chunks are concatenated along (group order).
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("all_to_all", "nccl.all_to_all", srcs=srcs, dsts=dsts,
                    attrs={"split_dim": split_dim, "concat_dim": concat_dim,
                           "op": any_op(op, "nccl.all_to_all")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def broadcast(op, srcs, dsts, replica_groups=None, root=0, *, dtype=None, mask=None):
    """Every member receives the ``srcs`` of the group member at position ``root``.

    Args:
        op: recorded; nothing is reduced (``None`` allowed).
        srcs: source tensors (read on every member; only the root's are sent).
        dsts: destinations, same shapes as the sources.
        replica_groups: rank groups (``None``: the launch topology).
        root: position of the sending member within its group.
        dtype: dtype the result is rounded to before the destination's.
        mask: compile-time predicate on the elements.
    """
    emit_collective("broadcast", "nccl.broadcast", srcs=srcs, dsts=dsts,
                    attrs={"root": int_arg(root, "root"), "op": any_op(op, "nccl.broadcast")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def collective_permute(dst, src, source_target_pairs, *, replica_groups=None, mask=None,
                       dtype=None):
    """Send ``src`` of rank ``s`` to ``dst`` of rank ``t`` for every pair ``(s, t)``.

    Args:
        dst: destination tensor (or list).
        src: source tensor (or list).
        source_target_pairs: ``[(source_rank, target_rank), ...]``, global ranks; a rank is at
            most once a source and once a target.
        replica_groups: rank groups (``None``: the launch topology); pairs stay within a group.
        mask: compile-time predicate on the elements.
        dtype: dtype the result is rounded to before the destination's.
    """
    emit_collective("collective_permute", "nccl.collective_permute", srcs=src, dsts=dst,
                    attrs={"pairs": pairs_of(source_target_pairs, "nccl.collective_permute")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def collective_permute_implicit(dst, src, replica_groups=None, channel_id=0, num_channels=1,
                                mask=None, dtype=None):
    """Ring permute within each replica group: member ``i`` receives member ``i - 1``'s ``src``.

    Args:
        dst: destination tensor (or list).
        src: source tensor (or list).
        replica_groups: the rings (``None``: the launch topology).
        channel_id: communication channel (``0 <= channel_id < num_channels``).
        num_channels: channels in use.
        mask: compile-time predicate on the elements.
        dtype: dtype the result is rounded to before the destination's.
    """
    emit_collective("collective_permute_implicit", "nccl.collective_permute_implicit",
                    srcs=src, dsts=dst, attrs=channels(channel_id, num_channels,
                                                       "nccl.collective_permute_implicit"),
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def collective_permute_reduce_implicit(dst, src, op=None, replica_groups=None, channel_id=0,
                                       num_channels=1, mask=None, dtype=None):
    """Ring permute that reduces into ``dst``: ``dst = op(dst, src of member i - 1)``.

    Args:
        dst: destination tensor (or list); must hold data (it is an operand of ``op``).
        src: source tensor (or list).
        op: reduction operator (default ``np.add``).
        replica_groups: the rings (``None``: the launch topology).
        channel_id: communication channel (``0 <= channel_id < num_channels``).
        num_channels: channels in use.
        mask: compile-time predicate on the elements.
        dtype: dtype the result is rounded to before the destination's.
    """
    api = "nccl.collective_permute_reduce_implicit"
    attrs = channels(channel_id, num_channels, api)
    attrs["op"] = reduce_op("add" if op is None else op, api)
    emit_collective("collective_permute_reduce_implicit", api, srcs=src, dsts=dst, attrs=attrs,
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


def send(srcs, op=None, peer_id=None, replica_groups=None, *, mask=None):
    """Send ``srcs`` to rank ``peer_id`` (buffered: returns at once).

    Args:
        srcs: source tensors.
        op: recorded only (the receiver's ``op`` decides how data is combined).
        peer_id: global rank of the receiver.
        replica_groups: when given, both ranks must share a group.
        mask: compile-time predicate on the elements.
    """
    emit_collective("send", "nccl.send", srcs=srcs,
                    attrs={"peer_id": int_arg(peer_id, "peer_id"), "op": any_op(op, "nccl.send")},
                    replica_groups=replica_groups, mask=mask)


def recv(dsts, op=None, peer_id=None, replica_groups=None, *, mask=None, dtype=None):
    """Receive the oldest unreceived message from rank ``peer_id`` into ``dsts``.

    Args:
        dsts: destination tensors (same shapes as the sender's sources).
        op: ``None`` overwrites; a reduction operator combines: ``dst = op(dst, data)``.
        peer_id: global rank of the sender.
        replica_groups: when given, both ranks must share a group.
        mask: compile-time predicate on the elements.
        dtype: dtype the result is rounded to before the destination's.
    """
    emit_collective("recv", "nccl.recv", dsts=dsts,
                    attrs={"peer_id": int_arg(peer_id, "peer_id"),
                           "op": None if op is None else reduce_op(op, "nccl.recv")},
                    replica_groups=replica_groups, dtype=dtype, mask=mask)


# ----------------------------------------------------------------------------- helpers


def pairs_of(pairs, api) -> tuple:
    """``source_target_pairs`` as a tuple of ``(source, target)`` int pairs, checked."""
    from .._src.errors import NkiError, user_location
    try:
        out = tuple((int(s), int(t)) for s, t in pairs)
    except (TypeError, ValueError):
        raise NkiError("wb_collective_args", f"{api}: source_target_pairs must be a list of "
                       f"(source, target) rank pairs, got {pairs!r}", user_location()) from None
    for role, idx in (("source", 0), ("target", 1)):
        ranks = [p[idx] for p in out]
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        if dup:
            raise NkiError("wb_collective_args", f"{api}: rank {dup[0]} is the {role} of more "
                           "than one pair", user_location(),
                           "each rank sends at most once and receives at most once")
    if any(r < 0 for p in out for r in p):
        raise NkiError("wb_collective_args", f"{api}: negative rank in {list(out)}",
                       user_location())
    return out


def channels(channel_id, num_channels, api) -> dict:
    """Checked ``channel_id`` / ``num_channels`` attributes."""
    from .._src.errors import NkiError, user_location
    cid, n = int_arg(channel_id, "channel_id"), int_arg(num_channels, "num_channels")
    if n < 1 or not 0 <= cid < n:
        raise NkiError("wb_collective_args", f"{api}: channel_id={cid} must be in "
                       f"[0, num_channels={n})", user_location())
    return {"channel_id": cid, "num_channels": n}


# ``neuronxcc.nki.nccl.collectives`` is the same API (seen in Neuron-team kernels)
collectives = sys.modules[__name__]
sys.modules[__name__ + ".collectives"] = collectives
