"""Simulator side: the collective opcodes as ``sim.specials.SPECIAL`` factories.

Each factory compiles one collective instruction into ``run(state)``: read the sources (with
the instruction's mask), hand them to the rank's :class:`~.world.World`, and write what comes
back into the destinations (reduce-into-destination kinds combine with the old value first).

Which rank a program belongs to travels in the simulation parameters: :class:`RankParams` is a
:class:`~..options.SimParams` with the rank's ``world`` and ``rank`` (``Program.run`` hands
its params to every program's state as ``state.params``). Under plain ``SimParams`` (e.g.
``nki.simulate_kernel``) a kernel is one rank in a world of one: collectives over the group
``[0]`` return the rank's own data, and replica groups naming other ranks are an error that
points to :func:`~nki_workbench.simulate_ranks`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import NkiError
from ..ir import Access
from ..ir import expr as E
from ..machine import machine_of
from ..options import SimParams
from ..semantics import NUMPY
from ..sim.access import CompiledAccess
from ..sim.specials import SPECIAL
from .kinds import OPCODE_KIND
from .lnc_sim import skipped
from .world import Arrival, World

__all__ = ["RankParams", "rank_of"]


@dataclass(frozen=True, kw_only=True)
class RankParams(SimParams):
    """:class:`SimParams` of one rank of a multi-rank simulation.

    Attributes:
        world: the :class:`~.world.World` the ranks meet in.
        rank: this rank's global id.
    """

    world: object = field(default=None, compare=False, repr=False)
    rank: int = 0


_SOLO_LOCK = threading.Lock()


def rank_of(st, program) -> tuple[World, int]:
    """The world and rank a program state belongs to (a world of one without RankParams)."""
    p = st.params
    if isinstance(p, RankParams) and p.world is not None:
        return p.world, p.rank
    with _SOLO_LOCK:  # why: the SPMD programs of one run are threads sharing ``st.shared``
        w = st.shared.get("__cc_world__")
        if w is None:
            grid = tuple(program.kernel.grid) or (1,)
            w = World(1, None, list(np.ndindex(*grid)), p.collective_timeout)
            st.shared["__cc_world__"] = w
    return w, 0


def _factory(program, inst):
    kind, _ = OPCODE_KIND[inst.op]
    loc = inst.loc
    attrs = dict(inst.attrs)
    groups = attrs.get("replica_groups")
    dtype = attrs.get("dtype")
    api = kind.name
    decls = program.decls
    srcs = [CompiledAccess(a, decls[a.tensor].shape, loc) for a in inst.ins
            if isinstance(a, Access)]
    dsts = [(CompiledAccess(o, decls[o.tensor].shape, loc), decls[o.tensor]) for o in inst.outs]
    out_shapes = [ca.shape for ca, _ in dsts]
    mask = inst.mask
    op = attrs.get("op")
    machine = machine_of(program)
    if kind.reads_dst and kind.name != "recv" and op is None:
        raise NkiError("wb_collective_op", f"{inst.op} needs an 'op' attribute", loc)

    def run(st):
        if skipped(inst, st):
            return  # why: a body traced for another LNC core; this core does not take part
        sel = None
        if mask is not None:
            sel = np.asarray(E.evaluate(mask, st.env, st.dyn), dtype=bool)
            if sel.all():
                sel = None
        vals = []
        for ca in srcs:
            v, ok = machine.read(st, ca, sel, loc)
            if ok is not None:
                machine.report(st, inst, [ok], loc)
            vals.append(np.array(v))
        world, rank = rank_of(st, program)
        arr = Arrival(rank, tuple(int(x) for x in st.pid), inst.op, api, attrs, loc, vals,
                      out_shapes)
        if kind.name == "send":
            world.send(arr, attrs.get("peer_id"), groups)
            return
        if kind.name == "recv":
            res = world.recv(arr, attrs.get("peer_id"), groups)
        else:
            res = world.collective(arr, groups)
        for (ca, decl), r in zip(dsts, res, strict=True):
            if r is None:
                continue  # why: a permute target nobody sends to keeps its old contents
            binds = ca.tensor not in st.bufs  # why: the allocation was folded into this write
            if kind.reads_dst and op is not None:
                if binds:
                    raise NkiError("wb_uninitialized_read", f"{api} reduces into '{ca.tensor}' "
                                   "before anything was written to it", loc)
                old, ok = machine.read(st, ca, sel, loc)
                if ok is not None:
                    machine.report(st, inst, [ok], loc)
                r = NUMPY.alu(op, old, r.reshape(old.shape))
            machine.write(st, ca, decl, r, dtype, sel, binds, loc)
    return run


for _op in OPCODE_KIND:
    SPECIAL[_op] = _factory
