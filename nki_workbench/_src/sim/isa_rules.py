"""Numerics of the ``nki.isa`` instructions (nki-api.md §4.3, §7).

Vector/Scalar/GpSimd arithmetic widens to float32, computes in float32 and is rounded once on
write; bitvec operators work on the integer bits; TensorE multiplies in float32 and accumulates
in float32. Instructions with several destinations (``reduce_res=``, ``dst_idx=``), the
per-engine accumulator registers of ``reduce_cmd``, DMA copies with indirect indices and custom
ops run through :data:`.interp.SPECIAL` factories; the rest are value rules in :data:`RULES`.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, NkiWarning, UninitializedReadWarning, warn
from ..ir import expr as E
from .access import CompiledAccess
from .interp import SPECIAL
from .rules import _UNARY, Ex, binary, bits32, f32, rule

__all__ = ["ActivationRangeWarning", "IsaHintWarning", "IndirectIndexError", "alu",
           "alu_reduce"]


class ActivationRangeWarning(NkiWarning):
    """``nisa.activation`` got inputs outside the function's documented valid range."""


class IsaHintWarning(NkiWarning):
    """A hint (``is_transpose``, ``is_*_onezero``) does not hold, or a result is undefined.

    Undefined: the hardware gives no defined result for this input (e.g. a value that
    ``nc_find_index8`` cannot find).
    """


class IndirectIndexError(NkiError, IndexError):
    """An indirect DMA index is out of bounds with ``oob_mode.error`` (NKI raises IndexError)."""


_BITS = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"})
_LOGIC = frozenset({"logical_and", "logical_or", "logical_xor"})
_UFUNC = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "maximum": np.maximum, "minimum": np.minimum, "bitwise_and": np.bitwise_and,
          "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
          "logical_and": np.logical_and, "logical_or": np.logical_or,
          "logical_xor": np.logical_xor}
_IDENT = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf,
          "bitwise_and": -1, "bitwise_or": 0, "bitwise_xor": 0, "logical_and": True,
          "logical_or": False, "logical_xor": False}


def _align(x, ndim):
    """``[P, 1]`` operands get unit dims on the right to broadcast over all free dims."""
    if isinstance(x, np.ndarray) and 0 < x.ndim < ndim:
        return x.reshape(x.shape + (1,) * (ndim - x.ndim))
    return x


def _like(x, shape):
    """``x`` with ``shape`` when only the free-dim layout differs (same elements/partition)."""
    x = np.asarray(x)
    if x.ndim and x.shape != tuple(shape) and x.size == int(np.prod(shape)):
        try:
            np.broadcast_shapes(x.shape, shape)
        except ValueError:
            return x.reshape(shape)
    return _align(x, len(shape))


def _bits(x):
    a = np.asarray(x)
    return a.astype(np.int64) if a.dtype.kind in "biu" else D.cast(a, "int32").astype(np.int64)


def _wrap32(a):
    return ((a + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


def alu(op, a, b=None, exact_int=False):
    """One ALU operation with the engines' numerics (fp32, raw bits, or exact int32)."""
    if op == "invert":
        return bits32(~_bits(a), a)
    if op == "logical_not":
        return (f32(a) == 0).astype(np.float32)
    if exact_int and op in ("add", "subtract", "multiply") and \
            np.asarray(a).dtype.kind in "iu" and np.asarray(b).dtype.kind in "iu":
        ua, ub = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
        return _wrap32({"add": np.add, "subtract": np.subtract,
                        "multiply": np.multiply}[op](ua, ub))
    r = binary(op, a, b)
    return r.astype(np.float32) if r.dtype == bool else r


def _sel_like(sel, shape):
    return None if sel is None else np.broadcast_to(_align(sel, len(shape)), shape)


def alu_reduce(op, x, axes, sel=None):
    """Reduce ``x`` over ``axes`` with an ALU operator; masked-out elements are skipped."""
    x = np.asarray(x)
    if op in _BITS:
        x = _bits(x)
    elif op in _LOGIC:
        x = f32(x) != 0
    else:
        x = f32(x)
    if sel is not None:
        x = np.where(_sel_like(sel, x.shape), x, np.asarray(_IDENT[op], dtype=x.dtype))
    keep = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, keep + list(axes)).reshape([x.shape[d] for d in keep] + [-1])
    with np.errstate(all="ignore"):
        r = _UFUNC[op].reduce(moved, axis=-1)
    return r.astype(np.float32) if r.dtype == bool else r


def _free_reduce(op, y, sel):
    """``[P, 1]`` reduction of ``y`` over all its free axes."""
    r = alu_reduce(op, y, tuple(range(1, y.ndim)), sel)
    return np.asarray(r, dtype=np.float32).reshape(-1)


def _out_sel(sel, grid):
    """The mask of an output whose grid may be narrower than the mask ([P, 1], [P, 8])."""
    if sel is None:
        return None
    try:
        return np.broadcast_to(sel, grid)
    except ValueError:
        pass
    s = np.asarray(sel)
    rows = np.any(s.reshape(s.shape[0], -1), axis=1) if s.ndim > 1 else s
    return np.broadcast_to(rows.reshape((-1,) + (1,) * (len(grid) - 1)), grid)


# ----------------------------------------------------------------------------- multi-output
def _multi(fn):
    """SPECIAL factory for ``fn(ex) -> value or tuple`` (several destinations).

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

        def run(st):
            sel = None
            if mask is not None:
                sel = np.asarray(E.evaluate(mask, st.env, st.dyn), dtype=bool)
                sel = None if sel.all() else sel
            vals, taints = [], []
            for kind, x in ins:
                if kind == "acc":
                    v, ok = prog._read(st, x, sel, loc, (), {})
                    vals.append(v)
                    if ok is not None:
                        taints.append(ok)
                elif kind == "const":
                    vals.append(x)
                else:
                    vals.append(np.asarray(E.evaluate(x, st.env, st.dyn)))
            if taints:
                prog._uninit(st, inst, taints, loc)
            res = fn(Ex(inst, vals, sel, st, shapes))
            res = res if isinstance(res, tuple) else (res,)
            for k, ((ca, decl), r) in enumerate(zip(outs, res, strict=False)):
                if r is None:
                    continue
                s = _out_sel(sel, ca.grid)
                binds = ca.tensor not in st.bufs and s is None
                prog._write(st, ca, decl, r, dts[k], acc_mode if k == 0 else None, s, binds,
                            loc, (), {})
        return run
    return factory


def _special(*names):
    def deco(fn):
        for n in names:
            SPECIAL[n] = _multi(fn)
        return fn
    return deco


def _regs(ex, engine, p, op, cmd, red):
    """Apply ``reduce_cmd`` to ``engine``'s per-partition accumulators; returns them."""
    regs = ex.state.regs.get(engine)
    if regs is None:
        regs = ex.state.regs[engine] = np.full(128, np.nan, dtype=np.float32)
    if cmd in ("reset", "reset_reduce"):
        regs[:p] = _IDENT.get(op, 0.0) if op is not None else 0.0
    if cmd in ("reduce", "reset_reduce"):
        regs[:p] = alu(op, regs[:p], red)
    return regs[:p].copy()


def _readout(ex, regs, engine):
    if np.isnan(regs).any():
        warn(UninitializedReadWarning, f"'{ex.inst.op}' reads the {engine} engine's "
             "accumulator registers before any reset", ex.inst.loc,
             "start the chain with reduce_cmd=nisa.reduce_cmd.reset_reduce")
    return regs.reshape(-1, 1)


# ----------------------------------------------------------------------------- ALU instructions
@rule("tensor_tensor")
def _tensor_tensor(ex):
    a, b = ex.ins
    b = _like(b, np.shape(a))
    return np.array(np.broadcast_to(
        alu(ex.attrs["op"], a, b, exact_int=ex.attrs["engine"] == "gpsimd"), ex.out_shape))


def _apply(op, x, operand, reverse, exact=False):
    return alu(op, operand, x, exact) if reverse else alu(op, x, operand, exact)


@rule("tensor_scalar")
def _tensor_scalar(ex):
    x, o0, o1 = ex.ins
    nd = len(ex.out_shape)
    a = ex.attrs
    with np.errstate(all="ignore"):
        t = _apply(a["op0"], x, _align(o0, nd), a["reverse0"])
        if a["op1"] is not None:
            t = _apply(a["op1"], t, _align(o1, nd), a["reverse1"])
    return np.array(np.broadcast_to(t, ex.out_shape))


@rule("scalar_tensor_tensor")
def _scalar_tensor_tensor(ex):
    x, o0, o1 = ex.ins
    a = ex.attrs
    with np.errstate(all="ignore"):
        t = _apply(a["op0"], x, _align(o0, len(ex.out_shape)), a["reverse0"])
        t = _apply(a["op1"], t, _like(o1, np.shape(x)), a["reverse1"])
    return np.array(np.broadcast_to(t, ex.out_shape))


@rule("tensor_tensor_scan")
def _tensor_tensor_scan(ex):
    d0, d1, init = ex.ins
    a = ex.attrs
    p = ex.out_shape[0]
    x0, x1 = f32(d0).reshape(p, -1), f32(d1).reshape(p, -1)
    prev = np.broadcast_to(f32(np.asarray(init)).reshape(-1), (p,)).astype(np.float32)
    out = np.empty_like(x0)
    with np.errstate(all="ignore"):
        for i in range(x0.shape[1]):
            t = _apply(a["op0"], x0[:, i], prev, a["reverse0"])
            prev = f32(_apply(a["op1"], t, x1[:, i], a["reverse1"]))
            out[:, i] = prev
    return out.reshape(ex.out_shape)


@rule("tensor_reduce")
def _tensor_reduce(ex):
    a = ex.attrs
    axes, keep = tuple(a["axis"]), a["keepdims"]
    x = np.asarray(ex.ins[0])
    sel = None if ex.mask is None else _sel_like(ex.mask, x.shape)
    r = alu_reduce(a["op"], x, axes, sel)
    if sel is not None:
        ex.out_sel = np.any(sel, axis=axes, keepdims=keep)
    if a["negate"]:
        r = -r
    return np.array(np.asarray(r).reshape(ex.out_shape))


@rule("tensor_partition_reduce")
def _tensor_partition_reduce(ex):
    x = np.asarray(ex.ins[0])
    sel = None if ex.mask is None else _sel_like(ex.mask, x.shape)
    if sel is not None:
        ex.out_sel = np.any(sel, axis=0, keepdims=True)
    return np.array(np.asarray(alu_reduce(ex.attrs["op"], x, (0,), sel)).reshape(ex.out_shape))


@_special("tensor_scalar_reduce")
def _tensor_scalar_reduce(ex):
    x, o0 = ex.ins
    with np.errstate(all="ignore"):
        y = f32(alu(ex.attrs["op0"], x, _align(o0, np.ndim(x))))
    red = _free_reduce(ex.attrs["reduce_op"], y, ex.mask)
    return y, red.reshape(-1, 1)


# ----------------------------------------------------------------------------- activation
def _identity(x):
    return np.array(x)


def _range_check(ex, name, z, sel):
    from ..isa.activation import VALID_RANGE
    rng = VALID_RANGE.get(name)
    if rng is None:
        return
    v = z if sel is None else z[_sel_like(sel, z.shape)]
    v = np.abs(v) if len(rng) == 3 else v
    bad = ~((v >= rng[0]) & (v <= rng[1]))
    if bad.any():
        lo, hi = (f"±{rng[0]:g}", f"±{rng[1]:g}") if len(rng) == 3 else (f"{rng[0]:g}",
                                                                         f"{rng[1]:g}")
        warn(ActivationRangeWarning, f"nisa.activation op={name}: {int(bad.sum())} input value(s) "
             f"outside the documented valid range [{lo}, {hi}] (e.g. {v[bad].flat[0]:g}); the "
             "hardware's approximation is invalid there", ex.inst.loc,
             "scale/shift the input into the valid range")


@_special("activation", "activation_reduce")
def _activation(ex):
    x, sc, b = ex.ins
    a = ex.attrs
    nd = np.ndim(x)
    with np.errstate(all="ignore"):
        z = f32(x) * f32(_align(np.asarray(sc), nd)) + f32(_align(np.asarray(b), nd))
        _range_check(ex, a["op"], z, ex.mask)
        y = np.asarray((_identity if a["op"] == "copy" else _UNARY[a["op"]])(z),
                       dtype=np.float32)
    cmd, rop = a["reduce_cmd"], a["reduce_op"]
    if cmd == "idle" and len(ex.out_shapes) == 1:
        return y
    p = y.shape[0]
    red = _free_reduce(rop, y, ex.mask) if cmd in ("reduce", "reset_reduce") else None
    regs = _regs(ex, "scalar", p, rop, cmd, red)
    if len(ex.out_shapes) == 1:
        return y
    return y, _readout(ex, regs, "scalar")


# ----------------------------------------------------------------------------- TensorE
def _hint(ex, ok, what):
    if not ok:
        warn(IsaHintWarning, f"nisa.nc_matmul: {what}", ex.inst.loc,
             "drop the hint or fix the operand; hardware may compute something else")


@rule("nc_matmul")
def _nc_matmul(ex):
    s, m = f32(ex.ins[0]), f32(ex.ins[1])
    a = ex.attrs
    if a.get("is_stationary_onezero"):
        _hint(ex, np.isin(s, (0.0, 1.0)).all(), "is_stationary_onezero=True but stationary "
              "holds values other than 0 and 1")
    if a.get("is_moving_onezero"):
        _hint(ex, np.isin(m, (0.0, 1.0)).all(), "is_moving_onezero=True but moving holds "
              "values other than 0 and 1")
    if a.get("is_transpose"):
        _hint(ex, np.array_equal(m, np.eye(m.shape[0], dtype=np.float32)),
              "is_transpose=True but moving is not an identity matrix")
    if a.get("perf_mode") == "double_row_gen3":
        return np.einsum("kli,klj->ij", s, m).astype(np.float32)
    return np.matmul(s.T, m)


@rule("nc_transpose")
def _nc_transpose(ex):
    x = np.asarray(ex.ins[0])
    x = x.reshape(x.shape[0], -1)
    out = np.array(x.T)
    if ex.attrs.get("via_matmul"):
        # why: data.T @ I on NC-v2 TensorE; a NaN/Inf anywhere in a column of data turns the
        # whole transposed row into NaN (0 * NaN, 0 * Inf)
        out = f32(out)
        bad = ~np.isfinite(f32(x)).all(axis=0)
        out[bad, :] = np.nan
    return out


# ----------------------------------------------------------------------------- copies
@rule("tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst")
def _tensor_copy(ex):
    x = np.asarray(ex.ins[0])
    if ex.attrs.get("via_fp32") or D.storage_dtype(D.from_name(ex.attrs["dtype"])) != x.dtype:
        x = f32(x)  # why: a dtype change (and NC-v2 ScalarE copies) goes through fp32
    return np.array(np.broadcast_to(_like(x, ex.out_shape), ex.out_shape))


@rule("tensor_copy_predicated")
def _tensor_copy_predicated(ex):
    src, pred, old = ex.ins
    shape = np.shape(old)
    cond = (_like(pred, shape) != 0) ^ bool(ex.attrs["reverse_pred"])
    src = _like(src, shape) if isinstance(src, np.ndarray) else src
    out = np.where(cond, src, old)
    return np.array(out.astype(old.dtype) if out.dtype != old.dtype and not
                    isinstance(src, np.ndarray) else out)


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

    def run(st):
        _ensure(prog, st, dst_decl)
        if simple:
            v, ok = prog._read(st, src, None, loc, (), {})
            prog._write(st, dst, dst_decl, _like(v, dst.shape), None, None, None, False, loc,
                        (), {}, ok)
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
                raise IndirectIndexError("err_tensor_access_out_of_bound",
                                         f"nisa.dma_copy: {_oob_message(arrs, bad, d.shape)} "
                                         f"('{d.name}')", loc,
                                         "use oob_mode=nisa.oob_mode.skip to drop such rows")
        take = (s_ok & sel).reshape(-1) & d_ok.reshape(-1)
        sbuf, dbuf = st.bufs[src.tensor], st.bufs[dst.tensor]
        s_idx = tuple(a.reshape(-1)[take] for a in s_arrs)
        d_idx = tuple(a.reshape(-1)[take] for a in d_arrs)
        vals = sbuf.data[s_idx]
        if sbuf.init is not None and not sbuf.init[s_idx].all():
            prog._uninit(st, inst, [sbuf.init[s_idx]], loc)
        if rmw:
            acc = f32(dbuf.data).copy()
            np.add.at(acc, d_idx, f32(vals))  # why: duplicate indices are serialised
            dbuf.writable()[...] = D.from_f32(acc, dst_decl.dtype)
        else:
            dbuf.writable()[d_idx] = vals if vals.dtype == dbuf.data.dtype else D.cast(
                vals, dst_decl.dtype)
        if dbuf.init is not None:
            dbuf.init[d_idx] = True
    return run


def _ensure(prog, st, decl):
    """Allocate a destination whose Alloc the interpreter skipped (fresh-writer binding)."""
    if decl.name not in st.bufs:
        prog._alloc(decl)(st)


def _in_bounds(arrs, shape, grid):
    ok = np.ones(grid, dtype=bool)
    for a, n in zip(arrs, shape, strict=True):
        ok &= (a >= 0) & (a < n)
    return ok


SPECIAL["dma_copy"] = _dma_copy


@rule("dma_transpose")
def _dma_transpose(ex):
    return np.array(np.transpose(np.asarray(ex.ins[0]), tuple(ex.attrs["axes"])))


# ----------------------------------------------------------------------------- selections
@rule("affine_select")
def _affine_select(ex):
    pred, x, off = ex.ins
    cond = np.broadcast_to(_align(np.asarray(pred, dtype=bool), len(ex.out_shape)), ex.out_shape)
    return np.where(cond, f32(x), np.float32(off))


def _cmp(op, a, b):
    return np.asarray(binary(op, a, b), dtype=bool)


@_special("range_select")
def _range_select(ex):
    x, b0, b1, start = ex.ins
    a = ex.attrs
    shape = np.shape(x)
    p = shape[0]
    xf = f32(x).reshape(p, -1)
    idx = (np.float32(int(np.asarray(start))) +
           np.arange(xf.shape[1], dtype=np.float32))[None, :]
    keep = _cmp(a["comp_op0"], idx, f32(b0).reshape(p, 1)) & \
        _cmp(a["comp_op1"], idx, f32(b1).reshape(p, 1))
    out = np.where(keep, xf, D.fp32.min).astype(np.float32).reshape(shape)
    return _select_tail(ex, out, p)


def _select_tail(ex, out, p):
    cmd, rop = ex.attrs["reduce_cmd"], ex.attrs["reduce_op"]
    red = _free_reduce(rop, out, ex.mask) if cmd in ("reduce", "reset_reduce") else None
    regs = _regs(ex, "vector", p, rop, cmd, red) if cmd != "idle" or len(ex.out_shapes) > 1 \
        else None
    if len(ex.out_shapes) == 1:
        return out
    return out, _readout(ex, regs, "vector")


@_special("select_reduce")
def _select_reduce(ex):
    pred, on_true, off = ex.ins
    shape = np.shape(on_true)
    cond = (np.asarray(pred) != 0) ^ bool(ex.attrs["reverse_pred"])
    out = np.where(cond, f32(on_true), f32(_align(np.asarray(off), len(shape))))
    return _select_tail(ex, out.astype(np.float32), shape[0])


@rule("iota")
def _iota(ex):
    v = np.asarray(ex.ins[0], dtype=np.int64)
    v = _wrap32(v).astype(np.int32)  # why: GpSimd evaluates the expression in int32
    return np.array(np.broadcast_to(_align(v, len(ex.out_shape)), ex.out_shape))


@rule("sequence_bounds")
def _sequence_bounds(ex):
    ids = f32(ex.ins[0]).reshape(-1)
    n = ids.size
    new = np.ones(n, dtype=bool)
    new[1:] = ids[1:] != ids[:-1]
    run = np.cumsum(new) - 1
    starts_run = np.flatnonzero(new)
    ends_run = np.append(starts_run[1:], n)
    starts, ends = starts_run[run].astype(np.float32), ends_run[run].astype(np.float32)
    pad = ids == 0
    starts[pad], ends[pad] = n, -1
    return np.stack([starts, ends])[None]


# ----------------------------------------------------------------------------- statistics
def _masked_free(ex, x):
    p = x.shape[0]
    w = np.ones(x.shape, dtype=bool) if ex.mask is None else _sel_like(ex.mask, x.shape)
    if ex.mask is not None:
        ex.out_sel = _out_sel(ex.mask, ex.out_shape)
    return f32(x).reshape(p, -1), w.reshape(p, -1)


def _moments(x, w):
    c = w.sum(axis=1).astype(np.float32)
    s = np.where(w, x, 0).sum(axis=1, dtype=np.float32)
    mean = np.where(c > 0, s / np.maximum(c, 1), np.float32(0))
    m2 = np.where(w, (x - mean[:, None]) ** 2, 0).sum(axis=1, dtype=np.float32)
    return c, mean, m2


@rule("bn_stats")
def _bn_stats(ex):
    x, w = _masked_free(ex, np.asarray(ex.ins[0]))
    cols = [v for k in (0, 1) for v in _moments(x[:, k::2], w[:, k::2])]
    return np.stack(cols, axis=1).astype(np.float32)


@rule("bn_aggr")
def _bn_aggr(ex):
    x, _ = _masked_free(ex, np.asarray(ex.ins[0]))
    t = x.reshape(x.shape[0], -1, 3)
    c, m, v = t[..., 0], t[..., 1], t[..., 2]
    with np.errstate(all="ignore"):
        n = c.sum(axis=1)
        mean = (c * m).sum(axis=1) / n
        var = (v + c * (m - mean[:, None]) ** 2).sum(axis=1) / n
    return np.stack([mean, var], axis=1).astype(np.float32)


@rule("max8")
def _max8(ex):
    x, w = _masked_free(ex, np.asarray(ex.ins[0]))
    x = np.where(w, x, -np.inf)
    return -np.sort(-x, axis=1)[:, :8]


def _find(ex, x, w, vals, used=None):
    """Index of the first match of each of the 8 values per partition (-1: none)."""
    p = x.shape[0]
    out = np.full((p, 8), -1, dtype=np.int64)
    rows = np.arange(p)
    for k in range(8):
        eq = (x == vals[:, k:k + 1]) & w
        if used is not None:
            eq &= ~used
        hit = eq.any(axis=1)
        idx = np.argmax(eq, axis=1)
        out[hit, k] = idx[hit]
        if used is not None:
            used[rows[hit], idx[hit]] = True
    if (out < 0).any():
        warn(IsaHintWarning, f"nisa.{ex.inst.op}: {int((out < 0).sum())} of the 8 values per "
             "partition do not occur in the data (undefined on hardware); their index is "
             "reported as the dtype's maximum", ex.inst.loc)
    return out


@rule("nc_find_index8")
def _nc_find_index8(ex):
    x, w = _masked_free(ex, np.asarray(ex.ins[0]))
    ex.out_sel = None if ex.mask is None else _out_sel(ex.mask, ex.out_shape)
    idx = _find(ex, x, w, f32(ex.ins[1]).reshape(x.shape[0], 8))
    top = np.iinfo(D.storage_dtype(D.from_name(ex.attrs["dtype"]))).max
    return np.where(idx < 0, top, idx).astype(np.int64)


@_special("nc_match_replace8")
def _nc_match_replace8(ex):
    data, vals, imm = ex.ins
    shape = np.shape(data)
    p = shape[0]
    x = f32(data).reshape(p, -1)
    w = np.ones(x.shape, dtype=bool) if ex.mask is None else \
        _sel_like(ex.mask, shape).reshape(p, -1)
    used = np.zeros(x.shape, dtype=bool)
    idx = _find(ex, x, w, f32(vals).reshape(p, 8), used)
    out = np.where(used, np.float32(imm), x).reshape(shape)
    return out, np.where(idx < 0, np.iinfo(np.uint32).max, idx).astype(np.int64)


@rule("nc_stream_shuffle")
def _nc_stream_shuffle(ex):
    src = np.asarray(ex.ins[0])
    reads = ex.attrs["reads_dst"]
    dyn = iter(int(np.asarray(v)) for v in ex.ins[2 if reads else 1:])
    sm = [next(dyn) if m < 0 else m for m in ex.attrs["shuffle_mask"]]
    pd = ex.out_shape[0]
    ps = src.shape[0]
    s = src.reshape(ps, -1)
    old = np.asarray(ex.ins[1]) if reads else np.zeros(ex.out_shape, dtype=src.dtype)
    out = np.array(old).reshape(pd, -1)
    for d in range(pd):
        m = sm[d % 32]
        if m == 255:
            continue
        k = (d // 32) * 32 + m
        if not 0 <= m < 32 or k >= ps:
            raise NkiError(None, f"nisa.nc_stream_shuffle: shuffle_mask[{d % 32}] = {m} reads "
                           f"partition {k} of a {ps}-partition src", ex.inst.loc)
        out[d] = s[k] if s.dtype == out.dtype else D.cast(s[k], D.name_of(out.dtype))
    return out.reshape(ex.out_shape)


@rule("local_gather")
def _local_gather(ex):
    src, index = np.asarray(ex.ins[0]), np.asarray(ex.ins[1])
    e, nv = ex.attrs["num_elem_per_idx"], ex.attrs["num_valid_indices"]
    p = src.shape[0]
    flat = src.reshape(p, -1)
    out = np.empty((p, nv, e), dtype=src.dtype)
    for c in range(p // 16):
        rows = slice(16 * c, 16 * c + 16)
        idx = index[rows].reshape(16, -1).flatten(order="F")[:nv].astype(np.int64)
        cols = idx[:, None] + np.arange(e)[None, :]
        if cols.size and (cols.min() < 0 or cols.max() >= flat.shape[1]):
            raise NkiError("wb_local_gather_oob", f"nisa.local_gather: core {c} gathers element "
                           f"{int(cols.max())} of {flat.shape[1]} per partition (undefined on "
                           "hardware)", ex.inst.loc, "keep index + num_elem_per_idx within the "
                           "free size")
        out[rows] = flat[rows][:, cols]
    return out.reshape(ex.out_shape)


# ----------------------------------------------------------------------------- custom ops
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


SPECIAL["builtin_custom_op"] = _custom
