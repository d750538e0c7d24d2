"""Simulator and cost side of the LNC instructions of :mod:`.lnc`.

``lnc_sendrecv`` and ``lnc_core_barrier``: the cores of a ``kernel[2]`` launch run as threads
and meet in the run's ``sim.spmd.Collective`` (its barrier, lock and slots).
"""

from __future__ import annotations

import numpy as np

from ..errors import NkiError
from ..hw.cost import COSTS, CostEntry
from ..ir import expr as E
from ..machine import machine_of
from ..sim.access import CompiledAccess
from ..sim.specials import SPECIAL
from .lnc import CORE_BARRIER, SENDRECV
from .timing import cc_cost

__all__ = ["skipped"]


def skipped(inst, st) -> bool:
    """Whether a body traced for another core guards ``inst`` off on this one (``pid0 == c``)."""
    m = inst.mask
    if m is None or not E.free_vars(m) or not all(v.startswith("pid") for v in E.free_vars(m)):
        return False
    return not bool(np.all(E.evaluate(m, st.env, st.dyn)))


def _flat(pid, program) -> int:
    grid = tuple(program.kernel.grid) or (1,)
    return int(np.ravel_multi_index(tuple(int(x) for x in pid), grid))


def _sendrecv(program, inst):
    loc = inst.loc
    decls = program.decls
    src = CompiledAccess(inst.ins[0], decls[inst.ins[0].tensor].shape, loc)
    out = CompiledAccess(inst.outs[0], decls[inst.outs[0].tensor].shape, loc)
    odecl = decls[inst.outs[0].tensor]
    send_expr, recv_expr = inst.ins[1], inst.ins[2]
    machine = machine_of(program)

    def run(st):
        if skipped(inst, st):
            return
        me = _flat(st.pid, program)
        send_to = int(E.evaluate(send_expr, st.env, st.dyn))
        recv_from = int(E.evaluate(recv_expr, st.env, st.dyn))
        coll = st.collective
        n = coll.n if coll is not None else 1
        for what, peer in (("send_to_rank", send_to), ("recv_from_rank", recv_from)):
            if not 0 <= peer < n or peer == me:
                raise NkiError("wb_collective_args", f"nisa.sendrecv on core {me}: {what}="
                               f"{peer} is not another core of this launch ({n} core(s))", loc,
                               "launch with kernel[2] and exchange with core 1 - program_id")
        v, ok = machine.read(st, src, None, loc)
        if ok is not None:
            machine.report(st, inst, [ok], loc)
        key = ("lnc_sendrecv", inst.attr("pipe_id"))
        try:
            with coll.lock:
                coll.slots[key + (me, send_to)] = np.array(v)
            coll.barrier.wait()
            with coll.lock:
                got = coll.slots.pop(key + (recv_from, me), None)
            coll.barrier.wait()  # why: nobody reuses the slots before every core has taken its own
        except Exception as exc:  # noqa: BLE001 - a broken barrier: another core failed
            coll.abort()
            raise NkiError("wb_collective_deadlock", f"nisa.sendrecv on core {me}: the peer "
                           f"core did not arrive ({type(exc).__name__})", loc) from exc
        if got is None:
            raise NkiError("wb_collective_args", f"nisa.sendrecv on core {me}: core "
                           f"{recv_from} sent nothing to it", loc,
                           "each core sends to the core it receives from")
        binds = out.tensor not in st.bufs
        machine.write(st, out, odecl, got, None, None, binds, loc)
    return run


def _core_barrier(program, inst):
    loc = inst.loc

    def run(st):
        coll = st.collective
        if coll is None or skipped(inst, st):
            return  # why: a single core has nobody to wait for
        try:
            coll.barrier.wait()
        except Exception as exc:  # noqa: BLE001 - a broken barrier: another core failed
            coll.abort()
            raise NkiError("wb_collective_deadlock", "nisa.core_barrier: a core did not "
                           f"arrive ({type(exc).__name__})", loc) from exc
    return run


def _cost(kind):
    def formula(v, t):
        b = sum(o.nbytes for o in v.tiles("ins")) if kind == "send" else 0
        ns, env = cc_cost(kind, 2, b, b, t)
        return ns * t.clock_ghz["sync"], "steps*LATENCY + bytes/LINK_BW", env, \
            "assume:cc_link_bw, assume:cc_step_latency; 2 cores"
    return formula


SPECIAL[SENDRECV] = _sendrecv
SPECIAL[CORE_BARRIER] = _core_barrier
COSTS[SENDRECV] = CostEntry("sync", _cost("send"))
COSTS[CORE_BARRIER] = CostEntry("sync", _cost("send"))
