"""Turning frontend values into IR operands and appending checked instructions.

Every ``nl.*`` function ends here: operands become :class:`Access`/:class:`Scalar`/expressions,
masks become predicates, the result tile gets a declaration, and the trace-time rules that NKI
enforces (memory spaces, partition limits, static out-of-bounds, scoping) are checked with the
kernel's file:line.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..hw import get_target
from ..ir import Access, Inst, Scalar
from ..ir import expr as E
from . import context as C
from .index import IndexExpr, take_pending_and
from .tensor import NkiTensor

__all__ = ["operand", "mask_expr", "emit", "compute", "new_tile", "assign", "require_tile",
           "require_hbm", "refs", "SET_TEMP_REFS", "IADD_TEMP_REFS", "scalar_dtype", "dtype_of"]

_ONCHIP = ("sbuf", "psum")
# opcodes allowed to address SBUF/PSUM with run-time indices (nki.isa adds its dynamic copies)
DYNAMIC_ONCHIP_OPS: set = set()


# ----------------------------------------------------------------------------- temporaries
def refs(value) -> int:
    """Reference count of ``value`` (called directly from ``__setitem__``/``__iadd__``)."""
    return sys.getrefcount(value)


class _Probe:
    __slots__ = ()

    def __setitem__(self, key, value):
        _CAL.append(refs(value))

    def __iadd__(self, value):
        _CAL.append(refs(value))
        return self


def _calibrate():
    # why: whether `dst[...] = f(x)` passed an unnamed temporary is visible only through
    # reference counts, whose baseline differs across CPython versions; measure it here on the
    # same call structure as NkiTensor.__setitem__/__iadd__.
    p = _Probe()
    p[0] = object()
    named = object()
    p[0] = named
    p += object()
    p += named
    set_temp, set_named, iadd_temp, iadd_named = _CAL
    ok = set_temp < set_named and iadd_temp < iadd_named
    return (set_temp if ok else -1), (iadd_temp if ok else -1)


_CAL: list = []
SET_TEMP_REFS, IADD_TEMP_REFS = _calibrate()


# ----------------------------------------------------------------------------- operands
def dtype_of(x):
    """NKI dtype of a tensor operand, or of a scalar per the weak-typing rules."""
    if isinstance(x, NkiTensor):
        return x.dtype
    return scalar_dtype(x)


def scalar_dtype(x):
    """Dtype a scalar operand contributes to promotion (numpy scalars are strongly typed)."""
    if isinstance(x, np.generic) and D.is_supported(x.dtype):
        return D.canonical(x.dtype)
    if isinstance(x, np.generic):
        return D.canonical(type(x.item()))  # why: float64/int64 scalars act like Python ones
    return D.canonical(type(x))


def operand(x, api: str, arg: str):
    """IR operand for a kernel value (tensor view, scalar or index expression)."""
    T = NkiTensor
    ctx = C.require(api)
    if isinstance(x, T):
        x._check_live(api)
        ctx.note_read(x._name)
        return x._access()
    if isinstance(x, IndexExpr):
        return x.expr
    if isinstance(x, (bool, np.bool_)):
        return Scalar(bool(x))
    if isinstance(x, int) and x.bit_length() > 64:
        # why: no NKI dtype holds it (and Python refuses to print an int of 4300+ digits)
        raise NkiError(None, f"operand '{arg}' of '{api}' is an integer constant of "
                       f"{x.bit_length()} bits; NKI constants fit in 64 bits", user_location(),
                       "use a float (e.g. float('inf')) or a value of the operand's dtype")
    if isinstance(x, (int, float)):
        return Scalar(x)
    if isinstance(x, np.generic):
        if not D.is_supported(x.dtype):
            return Scalar(x.item())
        return Scalar(x.item(), D.name_of(D.canonical(x.dtype)))
    raise NkiError(None, f"operand '{arg}' of '{api}' must be a tile or a scalar, got "
                   f"{type(x).__name__}", user_location())


def require_tile(x, api: str, arg: str):
    """``x`` must be an on-chip (SBUF/PSUM) tensor: ``err_unsupported_memory`` otherwise."""
    C.require(f"nl.{api}")
    T = NkiTensor
    if not isinstance(x, T):
        return
    if x.buffer not in _ONCHIP:
        raise NkiError("err_unsupported_memory",
                       f"Expected operand '{arg}' of '{api}' to be in address space 'sbuf' or "
                       f"'psum', but got a tile in '{x.buffer}' instead", user_location(),
                       "load HBM tensors into SBUF with nl.load first")
    x._check_tile(api, arg)


def require_hbm(x, api: str, arg: str):
    """``x`` must be an HBM tensor: ``err_unsupported_memory`` otherwise."""
    C.require(f"nl.{api}")
    T = NkiTensor
    if not isinstance(x, T):
        raise NkiError(None, f"operand '{arg}' of '{api}' must be an HBM tensor, got "
                       f"{type(x).__name__}", user_location())
    if x.buffer in _ONCHIP:
        raise NkiError("err_unsupported_memory",
                       f"Expected operand '{arg}' of '{api}' to be in address space 'hbm', but "
                       f"got a tile in '{x.buffer}' instead", user_location(),
                       "nl.load/nl.store move data between HBM and SBUF; for on-chip copies "
                       "use nl.copy or assignment")


def mask_expr(mask):
    """The predicate of a ``mask=`` argument (``None`` for no mask)."""
    if mask is None or mask is True or (isinstance(mask, np.bool_) and mask):
        return None
    if mask is False or isinstance(mask, np.bool_):
        # why: a condition of loop variables evaluated at trace time (an unrolled iteration)
        # turns the instruction off: it is kept, writing nothing
        return E.compare("ne", E.const(0), E.const(0))
    if isinstance(mask, IndexExpr) and isinstance(mask.expr, E.Pred):
        if not E.is_affine(mask.expr) or E.dyns(mask.expr):
            raise NkiError("err_unsupported_expression_in_mask",
                           f"mask '{E.to_str(mask.expr)}' is not an affine expression of "
                           "indices", user_location(),
                           "masks compare affine expressions of nl.arange/loop variables/"
                           "program ids with constants, combined with &")
        return take_pending_and(mask.expr)
    raise NkiError("err_unsupported_expression_in_mask",
                   f"mask must be a comparison of index expressions, got {mask!r}",
                   user_location(), "write mask=(i_p < n) & (i_f < m)")


# ----------------------------------------------------------------------------- emission
def new_tile(shape, dtype, buffer: str = "sbuf", name: str | None = None, api: str = ""):
    """Declare a fresh on-chip tile and return it."""
    ctx = C.require(api or "tile")
    shape = tuple(int(s) for s in shape)
    check_onchip_shape(shape, 0, dtype, buffer, api)
    decl = ctx.declare(shape, D.name_of(D.canonical(dtype)), buffer, name=name)
    ctx.results.add(decl.name)
    return NkiTensor(ctx, decl.name)


def check_onchip_shape(shape, par_dim: int, dtype, buffer: str, api: str):
    """Partition and per-partition size limits of an SBUF/PSUM tensor."""
    if buffer not in _ONCHIP or not shape:
        return
    ctx = C.current()
    tgt = get_target(ctx.target if ctx else "trn1")
    p = shape[par_dim]
    if p > tgt.pmax:
        raise NkiError("err_num_partition_exceed_arch_limit",
                       f"Size of partition dimension {p} exceeds architecture limitation of "
                       f"{tgt.pmax} ({api or 'tensor'} of shape {list(shape)})", user_location(),
                       "tile the partition dimension in chunks of 128 (nl.tile_size.pmax)")
    free = int(np.prod(shape[par_dim + 1:], dtype=np.int64)) * D.itemsize(D.canonical(dtype))
    limit = tgt.psum_bank_bytes if buffer == "psum" else tgt.total_available_sbuf_size
    if free > limit:
        what = ("one PSUM bank (2 KiB per partition, nl.tile_size.psum_fmax fp32 elements)"
                if buffer == "psum" else
                f"the usable SBUF per partition on {tgt.name} ({limit} bytes)")
        raise NkiError("err_size_of_dimension_exceed_arch_limit",
                       f"{buffer} tile of shape {list(shape)} needs {free} bytes per partition, "
                       f"more than {what}", user_location(),
                       "split the free dimension into smaller tiles")


def _check_bounds(ctx, acc: Access, masked: bool, loc):
    if acc.index is None:
        return
    decl = ctx.decls[acc.tensor]
    if masked or ctx.dead_depth:
        return  # why: a mask may cut the range; the simulator checks the exact indices
    for d, e in enumerate(acc.index):
        if E.dyns(e):
            continue
        try:
            lo, hi = E.bounds(e, {k: v for k, v in ctx.var_ranges.items() if v is not None})
        except (ValueError, KeyError):
            continue
        if lo < 0 or hi >= decl.shape[d]:
            raise NkiError("err_tensor_access_out_of_bound",
                           f"index range [{lo}, {hi}] exceed dimension size of {decl.shape[d]} "
                           f"(dim {d} of '{decl.name}' with shape {list(decl.shape)}, index "
                           f"'{E.to_str(e)}')", loc,
                           "shrink the index range or guard the edge with mask=(index < size)")


def _mask_on_grid(m, values):
    """Express a mask's aranges on the grid axes the operands' subscripts gave them.

    A subscript mixing index grids of different ranks (``t[i_p3, i_f2]`` with a 3-D and a 2-D
    ``nl.mgrid``) aligns them numpy-style; a mask written with the same aranges must follow.
    """
    if m is None:
        return m
    mapping = {}
    T = NkiTensor
    for v in values:
        if isinstance(v, T) and v._iota_map:
            for k, w in v._iota_map.items():
                mapping.setdefault(k, w)
    if not mapping:
        return m
    return E.substitute(m, {k: w for k, w in mapping.items() if k in E.iotas(m)}) or m


def _check_output_dependency(ctx, t, acc: Access, loc, api):
    """Every iteration of an affine loop writing the same HBM location is an NKI error."""
    if t.buffer in _ONCHIP or not ctx.loops:
        return
    decl = ctx.decls[ctx.root(t._name)]
    if decl.kind not in ("input", "local", "output", "inout") or ctx.dead_depth:
        return
    used = set()
    for e in acc.index or ():
        used |= E.free_vars(e)
        if E.dyns(e):
            return  # why: run-time indices: the simulator sees the real addresses
    for info in ctx.loops:
        r = info["range"]
        if info["kind"] != "affine" or len(r) < 2 or info["var"] in used:
            continue
        if info["id"] in t._scope:
            continue  # why: the tensor is created inside this loop: fresh every iteration
        raise NkiError("err_unexpected_output_dependencies",
                       f"{api} writes the same region of '{decl.name}' in every iteration of "
                       f"nl.affine_range loop '{info['var']}' ({len(r)} iterations)", loc,
                       f"index the destination with '{info['var']}', or use nl.sequential_range "
                       "if the iterations really depend on each other")


def emit(op: str, outs, ins, *, attrs=None, mask=None, api: str | None = None):
    """Append ``outs = op(ins)`` with checks; ``outs``/``ins`` are frontend values."""
    api = api or op
    ctx = C.require(api)
    loc = user_location()
    m = _mask_on_grid(mask_expr(mask), list(outs) + list(ins))
    guard = ctx.attrs.get("program_guard")
    if guard is not None:  # why: a body traced for one program only (NKI 0.2+ LNC kernels)
        m = guard if m is None else E.land(guard, m)
    out_ops = []
    for o in outs:
        o._check_live(api)
        acc = o._access()
        out_ops.append(acc)
        ctx.note_write(o._name, loc)
        _check_output_dependency(ctx, o, acc, loc, api)
    in_ops = [x if isinstance(x, (Access, Scalar, E.Affine, E.Pred)) else operand(x, api, "in")
              for x in ins]
    for a in out_ops + [x for x in in_ops if isinstance(x, Access)]:
        _check_bounds(ctx, a, m is not None, loc)
        if op not in DYNAMIC_ONCHIP_OPS and a.index is not None and \
                ctx.decls[a.tensor].buffer in _ONCHIP and any(E.dyns(e) for e in a.index):
            raise NkiError("err_copy_dynamic_indirect_indices_not_natively_supported",
                           f"'{api}' accesses on-chip tensor '{a.tensor}' with run-time "
                           "(indirect) indices", loc,
                           "use nisa.tensor_copy_dynamic_src/dst for dynamic offsets in SBUF")
    items = tuple(sorted((attrs or {}).items()))
    inst = Inst(op, tuple(out_ops), tuple(in_ops), items, m, loc)
    pos = ctx.emit_inst(inst)
    for o in outs:
        if o._index is None and o._fresh:
            o._prod = (id(ctx.block), pos)
    return inst


def compute(op: str, ins, shape, dtype, *, attrs=None, mask=None, buffer: str = "sbuf",
            api: str | None = None, name: str | None = None):
    """Emit an instruction writing a fresh tile of ``shape``/``dtype``; returns the tile."""
    api = api or op
    ctx = C.require(api)
    attrs = dict(attrs or {})
    attrs.setdefault("dtype", D.name_of(D.canonical(dtype)))
    out = new_tile(shape, dtype, buffer, name=name or ctx.assigned_name(), api=api)
    out._fresh = True
    emit(op, [out], ins, attrs=attrs, mask=mask, api=api)
    return out


def _retarget(ctx, value, dst, acc: str | None) -> bool:
    """Make ``value``'s producing instruction write ``dst`` directly (it must be the last one)."""
    if value._prod is None or value._prod[0] != id(ctx.block):
        return False
    pos = value._prod[1]
    block = ctx.block
    if pos != len(block) - 1 or pos == 0:
        return False
    inst, alloc = block[pos], block[pos - 1]
    if getattr(alloc, "decl", None) is None or alloc.decl.name != value._name:
        return False
    # why: a multi-output instruction (activation_reduce's reduce_res=...) writes its main
    # result straight into the destination too, as NKI does; its other outputs stay as given
    mine = [k for k, o in enumerate(inst.outs) if o.tensor == value._name and o.index is None]
    if len(mine) != 1 or (len(inst.outs) > 1 and acc is not None):
        return False
    out = dst._access()
    if tuple(dst.shape) != tuple(value.shape):
        if inst.op != "loop_reduce" or len(inst.outs) != 1 or out.index is None or \
                _squeezed(dst.shape) != _squeezed(value.shape):
            return False
        # why: a loop_reduce must write its destination (the accumulator); [P, 1] and [P]
        # hold the same elements (t[:, j] keeps a unit free dim as NKI does)
        grid = E.grid_shape(out.index)
        out = replace(out, shape=None if tuple(value.shape) == tuple(grid)
                      else tuple(value.shape))
    attrs = dict(inst.attrs)
    if acc is not None:
        attrs["acc"] = acc
    outs = list(inst.outs)
    outs[mine[0]] = out
    # why: the fused write skips emit()'s checks; a static write past the tile fails here
    _check_bounds(ctx, out, inst.mask is not None, user_location())
    block[pos - 1:] = [Inst(inst.op, tuple(outs), inst.ins, tuple(sorted(attrs.items())),
                            inst.mask, inst.loc)]
    ctx.decls.pop(value._name, None)
    ctx.note_write(dst._name, inst.loc)
    value._dead = True
    return True


def _squeezed(shape) -> tuple:
    return tuple(int(s) for s in shape if s != 1)


def _reduction_result(ctx, value) -> bool:
    """Whether ``value`` is a ``t[...] = nl.loop_reduce(...)`` result still waiting for ``t``."""
    if value._prod is None or value._prod[0] != id(ctx.block):
        return False
    pos = value._prod[1]
    inst = ctx.block[pos] if pos < len(ctx.block) else None
    return (getattr(inst, "op", None) == "loop_reduce" and len(inst.outs) == 1
            and inst.outs[0].tensor == value._name)


def assign(dst, value, acc: str | None = None, temp: bool = False, store=None):
    """``dst[...] = value`` (or ``dst[...] += value`` with ``acc='add'``), fusing when possible.

    ``store(dst, value)`` writes a tile into an HBM ``dst`` (the front end passes ``nl.store``).
    """
    T = NkiTensor
    ctx = C.require("assignment")
    dst._check_live("assignment")
    if isinstance(value, T) and value._inplace and value._access() == dst._access():
        return  # why: `t[i] += x` already wrote through __iadd__; Python re-assigns the result
    if dst._is_index_tensor:
        raise NkiError("err_cannot_assign_to_index", "cannot assign into an index tensor",
                       user_location(), "convert indices to a tile with nisa.iota first")
    if isinstance(value, T):
        value._check_live("assignment")
        if dst.buffer not in _ONCHIP:
            if acc is not None:
                raise NkiError("err_unsupported_memory", "'+=' into an HBM tensor",
                               user_location(), "accumulate in SBUF/PSUM, then nl.store")
            if store is None:
                raise NkiError("err_unsupported_memory", "assignment of a tile into an HBM "
                               "tensor", user_location(), "use nl.store")
            store(dst, value)
            return
        if any(E.dyns(e) for e in (dst._index or ())):
            raise NkiError("err_copy_dynamic_indirect_indices_not_natively_supported",
                           "assignment with run-time (indirect) indices on an on-chip tensor",
                           user_location(), "use nisa.tensor_copy_dynamic_src/dst")
        _check_assign_shapes(dst, value)
        if temp and _retarget(ctx, value, dst, acc):
            return
        if _reduction_result(ctx, value):
            raise NkiError(None, f"nl.loop_reduce into '{dst._name}': the destination is the "
                           "accumulator and must take the reduced tile as it is (shape "
                           f"{list(dst.shape)} vs {list(value.shape)}, plain '=')",
                           user_location(), "index the destination so that its shape is the "
                           "reduced tile's: t[i, ...] = nl.loop_reduce(x, ...)")
        src = value
        if acc is not None:
            # why: `dst op= src` is an accumulation (allowed in affine loops), not a read of dst
            # from another iteration; the acc attribute makes the simulator combine in fp32
            emit("copy", [dst], [src], attrs={"dtype": D.name_of(src.dtype), "acc": acc},
                 api=f"{acc} (in place)")
            return
        emit("copy", [dst], [src], attrs={"dtype": D.name_of(src.dtype)}, api="assignment")
        return
    if isinstance(value, IndexExpr):
        raise NkiError(None, "cannot assign an index expression into a tile", user_location(),
                       "materialise indices with nisa.iota(expr, dtype)")
    if isinstance(value, (int, float, bool, np.generic)):
        if acc is not None:
            emit("memset", [dst], [value], attrs={"dtype": D.name_of(dst.dtype), "acc": acc},
                 api=f"{acc} (in place)")
            return
        emit("memset", [dst], [value], attrs={"dtype": D.name_of(dst.dtype)}, api="assignment")
        return
    raise NkiError(None, f"cannot assign {type(value).__name__} into an NKI tensor",
                   user_location())


def _check_assign_shapes(dst, value):
    ds, vs = tuple(dst.shape), tuple(value.shape)
    if ds == vs:
        return
    try:
        pad = vs + (1,) * (len(ds) - len(vs)) if len(vs) < len(ds) else vs
        if np.broadcast_shapes(ds, pad) == ds:
            return
    except ValueError:
        pass
    # why: NKI compares partition size and elements per partition, not exact free shapes
    if ds and vs and ds[0] == vs[0] and np.prod(ds[1:]) == np.prod(vs[1:]):
        return
    if np.prod(ds) < np.prod(vs) or (ds and vs and ds[0] < vs[0]):
        raise NkiError("err_store_dst_shape_smaller_than_other_shape",
                       f"assignment destination of shape {list(ds)} is smaller than the value of "
                       f"shape {list(vs)}", user_location(),
                       "index the destination with a region as large as the value")
    raise NkiError(None, f"cannot assign a value of shape {list(vs)} into a destination of "
                   f"shape {list(ds)}", user_location())
