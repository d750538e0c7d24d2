"""The two LNC instructions between the cores of one ``kernel[2]`` launch: sendrecv, core_barrier.

``nisa.sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id)`` exchanges an SBUF tile with
the peer core (each core sends ``src`` and receives the peer's into ``dst``);
``nisa.core_barrier(data, cores)`` makes every core wait until all have arrived (``data``, in
shared HBM, is what the barrier orders). Each traces to one IR instruction (``lnc_sendrecv``,
``lnc_core_barrier``) and sets ``has_collectives``, so the SPMD programs run side by side as
threads (``sim.spmd.Collective``) and meet at these instructions (:mod:`.lnc_sim`; registered
as collectives, so the interpreter runs them and the compiled backend hands such kernels over;
the cost entry uses the collectives' link model).
"""

from __future__ import annotations

from ..errors import NkiError, user_location
from ..ir import expr as E
from ..ir.opcodes import register
from ..trace import context as C
from ..trace import emit as M
from ..trace.index import IndexExpr
from .trace import tensor_list

__all__ = ["emit_sendrecv", "emit_core_barrier", "SENDRECV", "CORE_BARRIER"]

SENDRECV = "lnc_sendrecv"
CORE_BARRIER = "lnc_core_barrier"
register(SENDRECV, "sync", "composite",
         "collective (LNC cores): dst receives the peer core's src (nisa.sendrecv)")
register(CORE_BARRIER, "sync", "composite",
         "collective (LNC cores): every core waits for all (nisa.core_barrier)")


def _rank(v, name: str, api: str) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise NkiError("wb_collective_args", f"{api}: {name} must be a core id (int), got "
                       f"{v!r}", user_location())
    return int(v)


def _core(v, name: str, api: str):
    """A core id as an IR expression (``1 - nl.program_id(0)`` stays symbolic)."""
    if isinstance(v, IndexExpr):
        return E.as_expr(v.expr)
    return E.as_expr(E.const(_rank(v, name, api)))


def emit_sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id):
    """Trace ``nisa.sendrecv``: ``dst`` receives the ``src`` of core ``recv_from_rank``.

    The instruction's inputs are ``src`` and the two core ids as expressions (they usually
    depend on ``nl.program_id``, and the programs share one trace).
    """
    api = "nisa.sendrecv"
    ctx = C.require(api)
    (s,), (d,) = tensor_list(src, api, "src"), tensor_list(dst, api, "dst")
    if tuple(s.shape) != tuple(d.shape):
        raise NkiError("wb_collective_operands", f"{api}: src shape {list(s.shape)} and dst "
                       f"shape {list(d.shape)} differ", user_location(),
                       "the tile sent and the tile received have the same shape")
    peers = [_core(send_to_rank, "send_to_rank", api),
             _core(recv_from_rank, "recv_from_rank", api)]
    attrs = {"pipe_id": _rank(pipe_id, "pipe_id", api)}
    ctx.attrs["has_collectives"] = True
    return M.emit(SENDRECV, [d], [s] + peers, attrs=attrs, api=api)


def emit_core_barrier(data, cores):
    """Trace ``nisa.core_barrier``: the listed cores wait for each other."""
    api = "nisa.core_barrier"
    ctx = C.require(api)
    (t,) = tensor_list(data, api, "data")
    ids = tuple(_rank(c, "cores[i]", api) for c in (cores if isinstance(cores, (list, tuple))
                                                     else (cores,)))
    if not ids:
        raise NkiError("wb_collective_args", f"{api}: cores is empty", user_location(),
                       "write cores=(0, 1)")
    attrs = {"cores": ids}
    ctx.attrs["has_collectives"] = True
    return M.emit(CORE_BARRIER, [], [t], attrs=attrs, api=api)
