"""``nki.isa`` ScalarE / TensorE instructions and the engines' accumulator registers.

activation / activation_reduce, nc_matmul, nc_transpose, range_select, select_reduce. The
activation functions are nl's unary value rules (one table); ``reduce_cmd`` chains read and write
the per-engine accumulator registers, an executor service only the interpreter offers
(``ex.state.regs``), so the variants that read them are interpreter-only; ``reset_reduce``
(a fresh chain, as ``activation_reduce`` always starts) needs no earlier state and compiles.
Data-dependent checks (the activation valid range, nc_matmul's ``is_*`` hints) warn through
``P.concrete``: the compiled backend hands such kernels to the interpreter.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import ActivationRangeWarning, IsaHintWarning, UninitializedReadWarning, warn
from .isa_alu import align, alu, free_reduce, scan, sel_like
from .nl import unary
from .numerics import REDUCE_IDENTITY, value_rule
from .registry import VALID_RANGE

__all__ = ["regs", "readout"]


# ----------------------------------------------------------------------------- registers
_RESET = {"add": 0.0, "maximum": -np.inf, "minimum": np.inf, "multiply": 1.0}


def regs(P, ex, engine, p, op, cmd, red):
    """Apply ``reduce_cmd`` to ``engine``'s per-partition accumulators; returns them.

    Registers start as NaN (never reset); ``reset`` loads the operator's identity, ``reduce``
    combines them with ``red`` through the ALU. ``reset_reduce`` starts a fresh chain (the
    identity combined with ``red``), so its value needs no earlier state and lowers on every
    executor; the registers themselves are kept only where the executor has them
    (``ex.state``: the interpreter), since every later reader of them is interpreter-only.
    """
    ident = np.float32(_RESET.get(op, 0.0) if op is not None else 0.0)
    if cmd == "reset_reduce":
        new = P.f32(alu(P, op, P.xp.full((p,), ident, dtype=np.float32), red))
        if ex.state is not None:
            file = ex.state.regs
            r = file.get(engine)
            if r is None:
                r = file[engine] = np.full(128, np.nan, dtype=np.float32)
            r[:p] = new
        return new
    P.unsupported(f"'{ex.inst.op}' with reduce_cmd={cmd} (reads the {engine} engine's "
                  "registers)")
    file = ex.state.regs
    r = file.get(engine)
    if r is None:
        r = file[engine] = np.full(128, np.nan, dtype=np.float32)
    if cmd == "reset":
        r[:p] = ident
    if cmd == "reduce":
        r[:p] = alu(P, op, r[:p], red)
    return r[:p].copy()


def readout(P, ex, r, engine):
    """The registers as a ``[P, 1]`` result (warns when one was never reset).

    After ``reset_reduce`` on this very instruction no register can be unreset: a NaN there
    is the data's.
    """
    if ex.attrs.get("reduce_cmd") not in ("reset", "reset_reduce") and \
            np.isnan(P.concrete(r)).any():
        warn(UninitializedReadWarning, f"'{ex.inst.op}' reads the {engine} engine's "
             "accumulator registers before any reset", ex.inst.loc,
             "start the chain with reduce_cmd=nisa.reduce_cmd.reset_reduce")
    return r.reshape(-1, 1)


# ----------------------------------------------------------------------------- activation
def _range_check(P, ex, name, z, sel):
    rng = VALID_RANGE.get(name)
    if rng is None:
        return
    # why: the hardware's approximation is invalid outside the range: warn on the data
    a = P.xp.abs(z) if len(rng) == 3 else z
    out = ~((a >= rng[0]) & (a <= rng[1]))
    if P.flagged(out if sel is None else out & sel_like(P, sel, z.shape)):
        z = P.concrete(z)
        v = z if sel is None else z[np.asarray(sel_like(P, sel, z.shape))]
        v = np.abs(v) if len(rng) == 3 else v
        bad = ~((v >= rng[0]) & (v <= rng[1]))
        lo, hi = (f"±{rng[0]:g}", f"±{rng[1]:g}") if len(rng) == 3 else (f"{rng[0]:g}",
                                                                         f"{rng[1]:g}")
        warn(ActivationRangeWarning, f"nisa.activation op={name}: {int(bad.sum())} input value(s) "
             f"outside the documented valid range [{lo}, {hi}] (e.g. {v[bad].flat[0]:g}); the "
             "hardware's approximation is invalid there", ex.inst.loc,
             "scale/shift the input into the valid range")


@value_rule("activation", "activation_reduce")
def _activation(P, ex):
    x, sc, b = ex.ins
    a = ex.attrs
    cmd, rop = a["reduce_cmd"], a["reduce_op"]
    plain = cmd == "idle" and len(ex.out_shapes) == 1
    if not plain and cmd != "reset_reduce":
        P.unsupported(f"nisa.activation with reduce_cmd={cmd} (reads the ScalarE registers)")
    nd = np.ndim(x)
    z = P.fence(P.f32(x) * P.f32(align(sc, nd)))
    z = P.fence(z + P.f32(align(b, nd)))
    _range_check(P, ex, a["op"], z, ex.mask)
    y = z if a["op"] == "copy" else P.f32(unary(P, a["op"], z))
    if plain:
        return y
    p = y.shape[0]
    red = free_reduce(P, rop, y, ex.mask) if cmd in ("reduce", "reset_reduce") else None
    r = regs(P, ex, "scalar", p, rop, cmd, red)
    if len(ex.out_shapes) == 1:
        return y
    return y, readout(P, ex, r, "scalar")


# ----------------------------------------------------------------------------- TensorE
_HINTS = ("is_stationary_onezero", "is_moving_onezero", "is_transpose")


def _hint(ex, ok, what):
    if not ok:
        warn(IsaHintWarning, f"nisa.nc_matmul: {what}", ex.inst.loc,
             "drop the hint or fix the operand; hardware may compute something else")


def _check_hints(P, ex, s, m):
    a = ex.attrs
    for h in _HINTS:
        if a.get(h):
            P.unsupported(f"nc_matmul {h}=True (the interpreter checks the hint on the data)")
    if a.get("is_stationary_onezero"):
        _hint(ex, np.isin(P.concrete(s), (0.0, 1.0)).all(), "is_stationary_onezero=True but "
              "stationary holds values other than 0 and 1")
    if a.get("is_moving_onezero"):
        _hint(ex, np.isin(P.concrete(m), (0.0, 1.0)).all(), "is_moving_onezero=True but moving "
              "holds values other than 0 and 1")
    if a.get("is_transpose"):
        mc = P.concrete(m)
        _hint(ex, np.array_equal(mc, np.eye(mc.shape[0], dtype=np.float32)),
              "is_transpose=True but moving is not an identity matrix")


@value_rule("nc_matmul")
def _nc_matmul(P, ex):
    s, m = P.f32(ex.ins[0]), P.f32(ex.ins[1])
    _check_hints(P, ex, s, m)
    if ex.attrs.get("perf_mode") == "double_row_gen3":
        # why: [K, 2, M] x [K, 2, N]: both rows of a K step are contracted, i.e. K*2 rows
        return P.matmul(s.reshape(-1, s.shape[-1]).T, m.reshape(-1, m.shape[-1]))
    return P.matmul(s.T, m)


@value_rule("nc_transpose")
def _nc_transpose(P, ex):
    xp = P.xp
    x = xp.asarray(ex.ins[0])
    x = x.reshape(x.shape[0], -1)
    res = x.T
    if ex.attrs.get("via_matmul"):
        # why: data.T @ I on NC-v2 TensorE; a NaN/Inf anywhere in a column of data turns the
        # whole transposed row into NaN (0 * NaN, 0 * Inf)
        bad = ~xp.all(xp.isfinite(P.f32(x)), axis=0)
        res = xp.where(bad[:, None], np.float32(np.nan), P.f32(res))
    return res


# ----------------------------------------------------------------------------- cumulative
@value_rule("tensor_scalar_cumulative")
def _tensor_scalar_cumulative(P, ex):
    x, i0, i1 = ex.ins
    a = ex.attrs
    shape = ex.out_shape
    p = shape[0]
    op, cmd = a["op1"], a["reduce_cmd"]
    y = P.f32(alu(P, a["op0"], P.f32(x).reshape(p, -1), P.f32(align(i0, 2))))
    # why: the Vector Engine's per-partition accumulator carries the scan between instructions
    P.unsupported("nisa.tensor_scalar_cumulative (the vector engine's registers)")
    file = ex.state.regs
    if cmd == "load_reduce":
        start = np.broadcast_to(P.f32(i1).reshape(-1), (p,)).astype(np.float32)
    elif cmd == "reduce":
        r = file.get("vector")
        start = np.full(p, np.nan, np.float32) if r is None else r[:p].copy()
        if np.isnan(start).any():
            warn(UninitializedReadWarning, "'tensor_scalar_cumulative' continues the vector "
                 "engine's accumulator before any reset", ex.inst.loc,
                 "start the chain with reduce_cmd=nisa.reduce_cmd.reset_reduce or load_reduce")
    else:
        start = None
    ys = P.f32(y.T)
    if start is None:  # why: reset: the first column is the accumulator's first value
        head = ys[:1] if op not in REDUCE_IDENTITY else \
            P.f32(alu(P, op, np.full((1, p), REDUCE_IDENTITY[op], np.float32), ys[:1]))
        rest = scan(P, lambda c, col: P.f32(alu(P, op, c, col)), head[0], (ys[1:],))
        res = np.concatenate([head, rest]) if ys.shape[0] > 1 else head
    else:
        res = scan(P, lambda c, col: P.f32(alu(P, op, c, col)), start, (ys,))
    if cmd != "idle":
        if file.get("vector") is None:
            file["vector"] = np.full(128, np.nan, dtype=np.float32)
        file["vector"][:p] = res[-1]
    return np.asarray(res).T.reshape(shape)


# ----------------------------------------------------------------------------- selections
def _select_tail(P, ex, res, p):
    cmd, rop = ex.attrs["reduce_cmd"], ex.attrs["reduce_op"]
    red = free_reduce(P, rop, res, ex.mask) if cmd in ("reduce", "reset_reduce") else None
    r = regs(P, ex, "vector", p, rop, cmd, red) if cmd != "idle" or len(ex.out_shapes) > 1 \
        else None
    if len(ex.out_shapes) == 1:
        return res
    return res, readout(P, ex, r, "vector")


@value_rule("range_select")
def _range_select(P, ex):
    xp = P.xp
    x, b0, b1, start = ex.ins
    a = ex.attrs
    shape = np.shape(x)
    p = shape[0]
    xf = P.f32(x).reshape(p, -1)
    first = np.float32(int(P.concrete(start)))
    idx = P.fence(first + xp.arange(xf.shape[1], dtype=np.float32))[None, :]
    keep = (alu(P, a["comp_op0"], idx, P.f32(b0).reshape(p, 1)) != 0) & \
        (alu(P, a["comp_op1"], idx, P.f32(b1).reshape(p, 1)) != 0)
    res = xp.where(keep, xf, np.float32(D.fp32.min)).reshape(shape)
    return _select_tail(P, ex, res, p)


@value_rule("select_reduce")
def _select_reduce(P, ex):
    xp = P.xp
    pred, on_true, off = ex.ins
    shape = np.shape(on_true)
    cond = (xp.asarray(pred) != 0) ^ bool(ex.attrs["reverse_pred"])
    res = xp.where(cond, P.f32(on_true), P.f32(align(off, len(shape))))
    return _select_tail(P, ex, P.f32(res), shape[0])
