"""``SimParams(numerics="nki-simulator")``: the kernel as NKI's own simulator computes it.

NKI's simulator keeps low-precision on-chip tiles (bfloat16, float16, tfloat32, fp8) in
float32 and rounds only where data reaches a tensor in HBM; its ``nisa.dropout`` drops
nothing. Upstream goldens are computed that way (an activation with ``dtype=nl.bfloat16``
compared with an fp32 numpy result at ``rtol=1e-5``). The default numerics (``"hardware"``)
round every tile to its dtype, as the engines do.

:func:`nki_simulator_kernel` rewrites the IR once (cached): on-chip low-precision float tensors
become float32 (their reshape views too; a tensor that is bit-cast keeps its dtype, its bits
matter), the result dtype of instructions writing only such tensors becomes float32, and
``dropout`` becomes a copy. Both executors then run the rewritten kernel unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from ..caching import LRU
from ..ir import Alloc, Inst, Kernel, Loop, walk_insts

__all__ = ["nki_simulator_kernel"]

_LOW = frozenset({"bfloat16", "float16", "tfloat32", "float8_e4m3", "float8_e5m2"})
_CACHE = LRU(64)  # id(kernel) -> (kernel, rewritten)


def _widened(kernel: Kernel) -> set:
    decls = kernel.decls()
    bitcast = {d.base for d in decls.values() if d.view == "bitcast"}

    def root(d):
        while d.base is not None:
            d = decls[d.base]
        return d
    out = set()
    for name, d in decls.items():
        r = root(d)
        if r.buffer in ("sbuf", "psum") and d.dtype in _LOW and r.name not in bitcast and \
                (d.base is None or d.view == "reshape"):
            out.add(name)
    return out


def _inst(inst: Inst, wide: set) -> Inst:
    if inst.op == "dropout":  # why: NKI's simulator has no dropout: every element is kept
        return Inst("copy", inst.outs, inst.ins[:1], (("dtype", inst.attr("dtype")),),
                    inst.mask, inst.loc)
    if not inst.outs or any(o.tensor not in wide for o in inst.outs):
        return inst
    attrs = []
    for k, v in inst.attrs:
        if k == "dtype" and v in _LOW:
            v = "float32"
        elif k == "dtypes":
            v = tuple("float32" if x in _LOW else x for x in v)
        attrs.append((k, v))
    return replace(inst, attrs=tuple(attrs))


def _body(body, wide: set) -> tuple:
    out = []
    for s in body:
        if isinstance(s, Alloc) and s.decl.name in wide:
            out.append(Alloc(replace(s.decl, dtype="float32")))
        elif isinstance(s, Loop):
            out.append(replace(s, body=_body(s.body, wide)))
        elif isinstance(s, Inst):
            out.append(_inst(s, wide))
        else:
            out.append(s)
    return tuple(out)


def nki_simulator_kernel(kernel: Kernel) -> Kernel:
    """``kernel`` with NKI's simulator numerics (see the module docstring); cached per kernel.

    Args:
        kernel: the traced IR.

    Returns:
        Kernel: the rewritten IR (the same object when nothing changes).
    """
    hit = _CACHE.lookup(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    wide = _widened(kernel)
    has_dropout = any(i.op == "dropout" for i in walk_insts(kernel.body))
    new = kernel if not wide and not has_dropout else replace(kernel, body=_body(kernel.body,
                                                                                   wide))
    return _CACHE.store(id(kernel), (kernel, new))[1]

