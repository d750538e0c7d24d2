"""End-of-trace rules of directly allocated kernels (NKI's, checked with the trace context).

* :func:`check_no_mixing` — the tensors a kernel *declares* in SBUF (resp. PSUM) are all auto or
  all directly allocated; instruction results are allocated by the compiler either way.
* :func:`check_allocated_kernel` — what NKI refuses once a kernel allocates directly: an
  activation without an explicit bias when SBUF is directly allocated (the compiler would have
  to allocate a zero bias tile: ``err_bias_tensor_must_be_specified_in_allocation``, which
  also rules out the activation-table functions of ``nl`` such as ``nl.exp``), and a
  transpose on TensorE
  (``nl.transpose``, ``nisa.nc_transpose`` on the tensor engine, ``nl.matmul`` without
  ``transpose_x=True``: ``err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel``).
"""

from __future__ import annotations

from ..errors import NkiError
from ..ir import Scalar, walk_insts
from ..ir.opcodes import OPCODES
from .liveness import ONCHIP
from .spec import is_direct

__all__ = ["check_no_mixing", "check_allocated_kernel", "end_of_trace_rules"]


def _declared(ctx):
    return [d for n, d in ctx.decls.items()
            if d.buffer in ONCHIP and d.base is None and d.kind == "local"
            and n not in ctx.results]


def check_no_mixing(ctx):
    """NKI's mixing rule over the tensors a kernel declares (``nl.ndarray``/``nl.zeros``...).

    All SBUF (resp. PSUM) tensors declared with a buffer must be either auto or directly
    allocated. Instruction results (tiles an instruction creates, e.g. an ``nl.exp(...)`` used
    as an operand) are allocated by the compiler in either case, as NKI does: the allocator
    places them around the direct tensors.

    Args:
        ctx: the finished trace context.

    Raises:
        NkiError: ``wb_alloc_mixed_auto_and_direct`` naming the auto tensor and a direct one.
    """
    decls = _declared(ctx)
    for buffer in ONCHIP:
        mine = [d for d in decls if d.buffer == buffer]
        direct = [d for d in mine if is_direct(d.alloc)]
        auto = [d for d in mine if not is_direct(d.alloc)]
        if direct and auto:
            a, d = auto[0], direct[0]
            raise NkiError("wb_alloc_mixed_auto_and_direct",
                           f"{buffer.upper()} tensor '{a.name}' is declared with automatic "
                           f"allocation while '{d.name}' ({d.loc}) uses "
                           f"ncc.{buffer}.{d.alloc[0]}: all {buffer} tensors a kernel declares "
                           "must be either auto or directly allocated", a.loc,
                           f"declare '{a.name}' with buffer=ncc.{buffer}.alloc/mod_alloc, or "
                           "decorate the kernel with @ncc.force_auto_alloc")


def _activation_without_bias(inst) -> bool:
    if inst.op in ("activation", "activation_reduce"):
        return len(inst.ins) > 2 and isinstance(inst.ins[2], Scalar)  # why: no bias = Scalar 0
    info = OPCODES.get(inst.op)
    # why: nl's activation-table functions (nl.exp...) run on ScalarE with an implicit bias
    return info is not None and info.engine == "scalar" and info.family == "unary" and \
        inst.attr("engine") in (None, "scalar")


def _tensor_engine_transpose(inst) -> str | None:
    if inst.op == "transpose":
        return "nl.transpose (a TensorE transpose)"
    if inst.op == "nc_transpose" and inst.attr("engine") == "tensor":
        return "nisa.nc_transpose on the tensor engine"
    if inst.op == "matmul" and not inst.attr("transpose_x"):
        return "nl.matmul without transpose_x=True (it transposes x on TensorE)"
    return None


def check_allocated_kernel(ctx):
    """NKI's rejections in a kernel that allocates directly (see the module docstring).

    Args:
        ctx: the finished trace context.

    Raises:
        NkiError: ``err_bias_tensor_must_be_specified_in_allocation`` or
            ``err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel`` at the line.
    """
    direct = [d for d in _declared(ctx) if is_direct(d.alloc)]
    if not direct:
        return
    # why: the implicit zero bias is an SBUF tile: only direct SBUF leaves no room for it
    sbuf = next((d for d in direct if d.buffer == "sbuf"), None)
    where = f"'{direct[0].name}' ({direct[0].loc}) is directly allocated"
    for inst in walk_insts(ctx.blocks[0]):
        if sbuf is not None and _activation_without_bias(inst):
            where = f"'{sbuf.name}' ({sbuf.loc}) is directly allocated"
            raise NkiError("err_bias_tensor_must_be_specified_in_allocation",
                           f"activation '{inst.attr('op') or inst.op}' without a bias tensor in "
                           f"a directly allocated kernel ({where}): the compiler cannot "
                           "allocate the implicit zero bias", inst.loc,
                           "declare a [P, 1] float32 tile with ncc.sbuf.mod_alloc, set it to 0 "
                           "and pass it as nisa.activation(..., bias=tile)")
        what = _tensor_engine_transpose(inst)
        if what is not None:
            raise NkiError("err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel",
                           f"{what} in a directly allocated kernel ({where})", inst.loc,
                           "transpose with nisa.nc_matmul(x, identity, is_transpose=True) into "
                           "a directly allocated PSUM tile, or pass transpose_x=True with x "
                           "already in [K, M] layout")


def end_of_trace_rules(ctx):
    """Both rules, in NKI's order (declarations first, then instructions).

    They are the legacy compiler's rules for ``ncc.*.alloc`` kernels; today's ``import nki``
    places an ``nl.ndarray(address=)`` tensor and allocates the others around it.
    """
    if ctx.attrs.get("api") == "nki":
        return
    check_no_mixing(ctx)
    check_allocated_kernel(ctx)
