"""The interpreter's executor paths of ``nki.isa`` instructions that are not one value rule.

* several destinations or engine registers (activation, activation_reduce, tensor_scalar_reduce,
  range_select, select_reduce, nc_match_replace8): :func:`_multi` reads the operands, runs the
  opcode's value rule from :mod:`..semantics` on numpy and writes each result;
* ``dma_copy`` with indirect (run-time) indices, ``oob_mode`` and ``dst_rmw_op``, and
  ``builtin_custom_op`` (a registered Python reference): memory movement only.

They are interpreter-only (:data:`..semantics.isa_props.INTERPRETER_ONLY`) except plain
``activation``, which the compiled backend lowers through its value rule.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, numpy_index_error
from ..ir import expr as E
from ..semantics import NUMPY, VALUE_RULES, Ex
from ..semantics.isa_alu import like, out_sel
from . import races as _races
from .access import CompiledAccess
from .specials import SPECIAL

__all__ = ["MULTI_OUTPUT"]

MULTI_OUTPUT = ("activation", "activation_reduce", "tensor_scalar_reduce", "range_select",
                "select_reduce", "nc_match_replace8")
"""Opcodes the interpreter runs through :func:`_multi` (their value rule, several writes)."""


def _multi(op):
    """SPECIAL factory of an instruction with several destinations (or engine registers).

    Runs the value rule of ``op`` (:data:`..semantics.VALUE_RULES`) on numpy.

    Each output is rounded to its own dtype (attr ``dtypes``); the first output honours ``acc``
    (``psum += ...``).
    """
    def factory(prog, inst):
        loc = inst.loc
        ins = [prog._operand(o, loc) for o in inst.ins]
        outs = [(CompiledAccess(o, prog.decls[o.tensor].shape, loc), prog.decls[o.tensor])
                for o in inst.outs]
        shapes = [ca.shape for ca, _ in outs]
        dts = tuple(inst.attr("dtypes") or (inst.attr("dtype"),) * len(outs))
        acc_mode, mask = inst.attr("acc"), inst.mask
        rule = VALUE_RULES[op]
        specs = [prog._race_spec(o, prog.affine_now, loc) for o in inst.outs]

        def run(st):
            sel = None
            if mask is not None:
                sel = np.asarray(E.evaluate(mask, st.env, st.dyn), dtype=bool)
                sel = None if sel.all() else sel
            vals, taints = prog._operands(st, ins, sel, loc)
            if taints:
                prog._uninit(st, inst, taints, loc)
            res = rule(NUMPY, Ex(inst, vals, sel, st, shapes))
            res = res if isinstance(res, tuple) else (res,)
            for k, ((ca, decl), r) in enumerate(zip(outs, res, strict=False)):
                if r is None:
                    continue
                s = out_sel(NUMPY, sel, ca.grid)
                binds = ca.tensor not in st.bufs and s is None
                prog._write(st, ca, decl, r, dts[k], acc_mode if k == 0 else None, s, binds,
                            loc, (), {}, None, specs[k])
        return run
    return factory



def _oob_message(arrs, bad, shape):
    # why: NKI reports the flat element index, numpy-style
    first = [int(a[bad].flat[0]) for a in arrs]
    flat = sum(f * int(np.prod(shape[d + 1:], dtype=np.int64)) for d, f in enumerate(first))
    return f"index {flat} is out of bounds for axis 0 with size {int(np.prod(shape))}"


def _dma_copy(prog, inst):
    loc, mask = inst.loc, inst.mask
    dst_decl = prog.decls[inst.outs[0].tensor]
    src_decl = prog.decls[inst.ins[0].tensor]
    dst = CompiledAccess(inst.outs[0], dst_decl.shape, loc)
    src = CompiledAccess(inst.ins[0], src_decl.shape, loc)
    skip, rmw = inst.attr("oob_mode") == "skip", inst.attr("dst_rmw_op")
    simple = not (src.has_dyn or dst.has_dyn or mask is not None or rmw)
    spec = prog._race_spec(inst.outs[0], prog.affine_now, loc)

    def run(st):
        _ensure(prog, st, dst_decl)
        if simple:
            v, ok = prog._read(st, src, None, loc, (), {})
            prog._write(st, dst, dst_decl, _same_elements(v, dst.shape), None, None, None, False,
                        loc, (), {}, ok, spec)
            return
        sel = np.ones(src.grid, dtype=bool) if mask is None else np.broadcast_to(
            np.asarray(E.evaluate(mask, st.env, st.dyn), dtype=bool), src.grid)
        s_arrs = src.index_arrays(st.env, st.dyn)
        d_arrs = dst.index_arrays(st.env, st.dyn)
        s_ok = _in_bounds(s_arrs, src_decl.shape, src.grid)
        d_ok = _in_bounds(d_arrs, dst_decl.shape, dst.grid)
        for arrs, ok, d in ((s_arrs, s_ok, src_decl), (d_arrs, d_ok, dst_decl)):
            bad = ~ok & sel.reshape(ok.shape) if ok.size == sel.size else ~ok
            if bad.any() and not skip:
                raise numpy_index_error("err_tensor_access_out_of_bound",
                                        _oob_message(arrs, bad, d.shape), loc,
                                        f"nisa.dma_copy into/from '{d.name}': use "
                                        "oob_mode=nisa.oob_mode.skip to drop such rows")
        take = (s_ok & sel).reshape(-1) & d_ok.reshape(-1)
        sbuf, dbuf = st.bufs[src.tensor], st.bufs[dst.tensor]
        s_idx = tuple(a.reshape(-1)[take] for a in s_arrs)
        d_idx = tuple(a.reshape(-1)[take] for a in d_arrs)
        vals = sbuf.data[s_idx]
        if sbuf.init is not None and not sbuf.init[s_idx].all():
            prog._uninit(st, inst, [sbuf.init[s_idx]], loc)
        if rmw:
            acc = D.to_f32(dbuf.data).copy()
            np.add.at(acc, d_idx, D.to_f32(vals))  # why: duplicate indices are serialised
            dbuf.writable()[...] = D.from_f32(acc, dst_decl.dtype)
        else:
            def write():
                dbuf.writable()[d_idx] = vals if vals.dtype == dbuf.data.dtype else D.cast(
                    vals, dst_decl.dtype)
            _races.indexed_write(prog, st, dbuf, d_idx, spec, loc, write)
        if dbuf.init is not None:
            dbuf.init[d_idx] = True
    return run


def _same_elements(v, shape):
    """A DMA's source values in the destination's shape (``[128, 1]`` → ``[128]``...).

    The front end checked the element counts match; a DMA copies elements in order whatever
    the ranks of the two access patterns.
    """
    shape = tuple(shape)
    v = np.asarray(v)
    if v.shape != shape and v.size == int(np.prod(shape)):
        return v.reshape(shape)
    return like(NUMPY, v, shape)


def _ensure(prog, st, decl):
    """Allocate a destination whose Alloc the interpreter skipped (fresh-writer binding)."""
    if decl.name not in st.bufs:
        prog._alloc(decl)(st)


def _in_bounds(arrs, shape, grid):
    ok = np.ones(grid, dtype=bool)
    for a, n in zip(arrs, shape, strict=True):
        ok &= (a >= 0) & (a < n)
    return ok





def _custom(prog, inst):
    from ..isa.custom import CUSTOM_OPS
    loc = inst.loc
    srcs = [CompiledAccess(o, prog.decls[o.tensor].shape, loc) for o in inst.ins]
    dsts = [(CompiledAccess(o, prog.decls[o.tensor].shape, loc), prog.decls[o.tensor])
            for o in inst.outs]
    name = inst.attr("function_name")

    def run(st):
        fn = CUSTOM_OPS.get(name)
        if fn is None:
            raise NkiError("wb_custom_op_not_simulatable", f"builtin_custom_op '{name}' has no "
                           "registered Python reference", loc,
                           f"nisa.register_custom_op({name!r}, fn)")
        vals = []
        for ca in srcs:
            v, ok = prog._read(st, ca, None, loc, (), {})
            if ok is not None:
                prog._uninit(st, inst, [ok], loc)
            vals.append(np.array(v))
        res = fn(*vals)
        res = res if isinstance(res, tuple) else (res,)
        if len(res) != len(dsts):
            raise NkiError(None, f"builtin_custom_op '{name}': the reference returned "
                           f"{len(res)} arrays for {len(dsts)} dsts", loc)
        for (ca, decl), r in zip(dsts, res, strict=True):
            _ensure(prog, st, decl)
            r = np.asarray(r)
            if r.size != int(np.prod(ca.shape)):
                raise NkiError(None, f"builtin_custom_op '{name}': reference result of shape "
                               f"{list(r.shape)} does not fit dst {list(ca.shape)}", loc)
            r = r.astype(np.float32) if r.dtype.kind == "f" else r
            prog._write(st, ca, decl, r.reshape(ca.shape), None, None, None, False, loc, (), {})
    return run


for _op in MULTI_OUTPUT:
    SPECIAL[_op] = _multi(_op)
SPECIAL["dma_copy"] = _dma_copy
SPECIAL["builtin_custom_op"] = _custom
