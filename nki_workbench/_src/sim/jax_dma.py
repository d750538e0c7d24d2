"""The compiled backend's own lowering of ``nisa.dma_copy`` (memory movement, no value rule).

Only the static form lowers: indices known at trace time, no mask, no ``dst_rmw_op``
scatter. Anything else runs in the interpreter (:func:`.jax_static.why_interpreted` says why).
The interpreter's path is ``sim/isa_exec.py``; both copy the source elements in order into the
destination's shape (:func:`..semantics.isa_alu.like`) and round through the same write path.
"""

from __future__ import annotations

import numpy as np

from ..ir import Inst
from ..semantics.isa_alu import like
from .access import CompiledAccess

__all__ = ["LOWERINGS", "dma_copy_dynamic"]


def dma_copy_dynamic(inst: Inst, decls) -> str | None:
    """Why a ``dma_copy`` needs the interpreter (``None``: it lowers)."""
    if inst.attr("dst_rmw_op"):
        return "nisa.dma_copy with dst_rmw_op (a scatter-accumulate)"
    if inst.mask is not None:
        return "nisa.dma_copy under a mask"
    for acc in (*inst.ins[:1], *inst.outs[:1]):
        if CompiledAccess(acc, decls[acc.tensor].shape, inst.loc).has_dyn:
            return "nisa.dma_copy with run-time (indirect) indices"
    return None


def _same_elements(P, v, shape):
    """As ``sim/isa_exec._same_elements``: the elements in order in the destination's shape."""
    v = P.xp.asarray(v)
    if v.shape != shape and v.size == int(np.prod(shape)):
        return v.reshape(shape)
    return like(P, v, shape)


def _dma_copy(lw, inst: Inst, binds: bool):
    import jax.numpy as jnp

    loc = inst.loc
    v, ok = lw.read(inst.ins[0], None, loc)
    out = inst.outs[0]
    ja, decl = lw.jacc(out, loc), lw.decls[out.tensor]
    shape = ja.ca.shape
    v = _same_elements(lw.P, v, shape)
    if ok is not None:
        if lw.uninit_error:
            lw.bad(~jnp.all(ok))
        ok = _same_elements(lw.P, ok, shape)
    if binds and decl.name not in lw.bufs:
        lw._alloc(decl)  # why: the interpreter allocates a skipped Alloc the same way (_ensure)
    lw.write(ja, decl, v, None, None, None, False, ok)


LOWERINGS = {"dma_copy": _dma_copy}
"""Opcodes without a value rule that the compiled backend lowers itself
(``semantics.isa_props.LOWERED_SPECIAL`` names them)."""
