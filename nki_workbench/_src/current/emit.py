"""Writing a legacy instruction's result straight into a current-API destination.

The instructions of today's ``nki.isa`` are the legacy ones with the destination first: each
wrapper calls the legacy front end (same checks, same opcode, same attributes), which appends
``alloc tmp; tmp = op(...)``, and :func:`into` re-emits that instruction onto ``dst`` (dropping
the temporary), through the same :func:`~..trace.emit.emit` that checks bounds, scoping and
affine-loop output dependencies. The result is the IR the legacy ``dst[...] = nisa.op(...)``
gives, instruction for instruction.
"""

from __future__ import annotations

from ..errors import NkiError, user_location
from ..ir import Access, Alloc, Inst, Scalar
from ..trace import context as C
from ..trace import emit as M
from ..trace.tensor import NkiTensor

__all__ = ["into", "require_dst"]


def require_dst(dst, api: str, onchip: bool = True) -> NkiTensor:
    """``dst`` must be a tensor (an SBUF/PSUM tile when ``onchip``)."""
    if not isinstance(dst, NkiTensor):
        raise NkiError(None, f"{api}: 'dst' must be a tensor allocated with nl.ndarray, got "
                       f"{type(dst).__name__}", user_location(),
                       "since NKI 0.2 instructions write a destination given first: "
                       "t = nl.ndarray(shape, dtype, buffer=nl.sbuf); nisa.op(dst=t, ...)")
    dst.check_live(api)
    if onchip:
        M.require_tile(dst, api, "dst")
    return dst


def _last_inst(ctx, value: NkiTensor):
    block = ctx.block
    if value._prod is None or value._prod[0] != id(block):
        return None
    pos = value._prod[1]
    if pos != len(block) - 1 or pos == 0:
        return None
    alloc = block[pos - 1]
    if not isinstance(alloc, Alloc) or alloc.decl.name != value.name:
        return None
    return pos


def into(dst: NkiTensor, value: NkiTensor, api: str, *, acc: str | None = None,
         extra=()) -> None:
    """Make the instruction that produced ``value`` write ``dst`` (``acc='add'``: accumulate).

    Args:
        dst: the destination view.
        value: the fresh result tile the legacy front end returned.
        api: the instruction's name for messages.
        acc: ``"add"`` to accumulate into ``dst`` (PSUM accumulation).
        extra: other destination tensors of the instruction (``reduce_res``, ``dst_idx``).
    """
    ctx = C.require(api)
    pos = _last_inst(ctx, value)
    if pos is None or tuple(dst.shape) != tuple(value.shape):
        # why: shapes differ only by unit dims / a free-dim split: an explicit copy keeps the
        # element order (partition, then elements per partition) NKI assigns by
        M.assign(dst, value, acc=acc, temp=False)
        return
    block = ctx.block
    inst = block[pos]
    del block[pos - 1:]
    ctx.decls.pop(value.name, None)
    ctx.names.discard(value.name)
    value._dead = True
    outs = []
    for o in inst.outs:
        if o.tensor == value.name:
            outs.append(dst)
            continue
        match = next((t for t in extra if isinstance(t, NkiTensor) and t.access() == o), None)
        if match is None:
            raise NkiError(None, f"internal: {api} output '{o.tensor}' has no destination",
                           user_location())
        outs.append(match)
    attrs = dict(inst.attrs)
    if acc is not None:
        attrs["acc"] = acc
    emitted = M.emit(inst.op, outs, list(inst.ins), attrs=attrs, api=api)
    if inst.mask is not None:
        block[-1] = Inst(emitted.op, emitted.outs, emitted.ins, emitted.attrs, inst.mask,
                         emitted.loc)


def zero_fill(dst: NkiTensor, block: list, loc) -> None:
    """Append ``memset(dst, 0)`` to ``block`` (an enclosing block of the current one).

    The instruction is the one ``nl.zeros`` emits, so a legacy kernel zeroing its PSUM tile
    with ``nl.zeros`` traces to the same IR.
    """
    ctx = C.require("nisa.nc_matmul")
    acc: Access = dst.access()
    # why: a body traced for one LNC core only (see kernel.CurrentFunction) guards its writes
    guard = ctx.attrs.get("program_guard")
    block.append(Inst("memset", (acc,), (Scalar(0),), (("dtype", dst.decl.dtype),), guard, loc))
    ctx.note_write(dst.name, loc)
