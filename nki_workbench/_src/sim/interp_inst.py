"""The interpreter's instruction runners: one closure per IR instruction, built at compile time.

Each runner evaluates the mask, reads the operands (:mod:`.interp_mem`), applies the opcode's
value rule (:mod:`..semantics`, numpy numerics), combines the inputs' written masks into the
result's (the taint rules below) and writes each result. ``atomic_rmw`` and ``all_reduce``
have their own runners (they need the destination memory, or the other SPMD programs).

A one-output instruction also gets a fast runner, its facts decided at compile time: when the
mask (if any) selects every lane and every input is allocated, fully written and carries no
race stamps, it reads, applies the rule and binds or stores the result without the general
path's taint, mask and race machinery; otherwise, before any side effect, it hands over to the
general path. Both give the same results, warnings and errors (tests/sim/test_interp_fast_path.py).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError
from ..ir import Access, Inst, Scalar
from ..ir import expr as E
from ..semantics import NUMPY, VALUE_RULES, Ex
from ..semantics.registry import props
from .access import CompiledAccess
from .analysis import starts_accumulation_group
from .interp_mem import MemoryTraffic
from .memory import Buf
from .specials import SPECIAL

__all__ = ["InstRunners"]

_F32 = np.dtype(np.float32)


class InstRunners(MemoryTraffic):
    """Compiles instructions into runners (a base of :class:`.interp.Program`)."""

    def _operand(self, op, loc):
        if isinstance(op, Access):
            decl = self.decls[op.tensor]
            ca = CompiledAccess(op, decl.shape, loc)
            return ("acc", ca)
        if isinstance(op, Scalar):
            v = op.value
            if op.dtype is not None:
                v = D.cast(np.asarray(v), op.dtype)[()]
            return ("const", v)
        return ("expr", op)

    def _inst(self, inst: Inst, binds: bool, affine_vars):
        special = SPECIAL.get(inst.op)
        if special is not None:
            self.affine_now = affine_vars  # why: specials build their writes' race checks
            return self._observed(inst, special(self, inst))
        fn = VALUE_RULES.get(inst.op)
        if fn is None:
            raise NkiError(None, f"the simulator has no rule for opcode '{inst.op}'", inst.loc)
        loc = inst.loc
        ins = [self._operand(o, loc) for o in inst.ins]
        outs = [(CompiledAccess(o, self.decls[o.tensor].shape, loc), self.decls[o.tensor])
                for o in inst.outs]
        out_shapes = [ca.shape for ca, _ in outs]
        res_dtype = inst.attr("dtype")
        acc_mode = inst.attr("acc")
        attrs = dict(inst.attrs)  # why: built once per instruction, not per execution
        mask = inst.mask
        in_affine = tuple(v for v, _, _ in affine_vars)
        outer_sets = {v: raw for v, raw, _ in affine_vars}
        specs = [self._race_spec(o, affine_vars, loc) for o in inst.outs]
        info = props(inst.op)
        lanewise = info is not None and info.lanewise
        reader = self
        rowwise = _rowwise(inst) or _partitionwise(inst)
        # why: a tile created by this instruction is dead when the instruction runs again (it is
        # scoped to the loop body), so its float32 buffer can receive the new result
        reuse = binds and len(outs) == 1 and outs[0][0].whole and \
            outs[0][1].dtype == "float32" and res_dtype in (None, "float32")
        out_name = outs[0][0].tensor if outs else None
        out_shape0 = tuple(outs[0][1].shape) if outs else None
        zero_start = starts_accumulation_group(inst, self.decls)

        def general(st, sel):
            """Everything after the mask (``sel``: the lanes it selects, ``None``: all)."""
            vals, taints = reader._operands(st, ins, sel, loc, in_affine, outer_sets)
            if st.observer is not None:
                st.observer(inst, st)
            out_ok = None
            if taints:
                if st.params.uninitialized == "error":
                    reader._uninit(st, inst, taints, loc)
                if lanewise and outs:
                    out_ok = _and_all(taints, out_shapes[0])
                elif rowwise is not None and outs:
                    out_ok = rowwise(taints, out_shapes[0])
                else:
                    reader._uninit(st, inst, taints, loc)
            ex = Ex(inst, vals, sel, st, out_shapes, attrs)
            if reuse:
                prev = st.bufs.get(out_name)
                if prev is not None and prev.data.shape == out_shape0 and \
                        prev.data.dtype == np.float32 and prev.data.base is None and \
                        not any(prev.data is v for v in vals):
                    ex.out = prev.data
            result = fn(NUMPY, ex)
            if not outs:
                return
            for k, res, out_sel in ex.results(result, sel, len(outs)):
                ca, decl = outs[k]
                if binds and any(res is v for v in vals):
                    res = np.array(res, order="C")  # why: a new tile must not alias its source
                reader._write(st, ca, decl, res, res_dtype, acc_mode, out_sel, binds, loc,
                              in_affine, outer_sets, out_ok, specs[k], zero_start=zero_start)

        fast = None
        if len(outs) == 1:
            readers = tuple(_reader(kind, x, in_affine) for kind, x in ins)
            (ca0, decl0), spec0 = outs[0], specs[0]
            write = reader._write
            bind = reader._binder(ca0, decl0, res_dtype) if binds and acc_mode is None else None
            store = reader._storer(ca0, decl0, loc, in_affine, outer_sets, spec0) \
                if not binds and acc_mode is None and res_dtype is None else None

            def fast(st):
                # why: the common case decided once: all lanes, one output, every input fully
                # written and unstamped (else the general path runs, before any side effect)
                vals = []
                for rd in readers:
                    v = rd(st)
                    if v is None:
                        return general(st, None)
                    vals.append(v)
                if st.observer is not None:
                    st.observer(inst, st)
                ex = Ex(inst, vals, None, st, out_shapes, attrs)
                if reuse:
                    prev = st.bufs.get(out_name)
                    if prev is not None:
                        d = prev.data
                        if d.dtype is _F32 and d.shape == out_shape0 and d.base is None and \
                                not _is_one_of(d, vals):
                            ex.out = d
                res = fn(NUMPY, ex)
                if isinstance(res, tuple):
                    if not res:
                        return
                    res = res[0]
                if res is None:
                    return
                if binds and _is_one_of(res, vals):
                    res = np.array(res, order="C")  # why: a new tile must not alias its source
                if ex.out_sel is None and bind is not None:
                    bind(st, res)
                elif ex.out_sel is None and store is not None:
                    store(st, res)
                else:
                    write(st, ca0, decl0, res, res_dtype, acc_mode, ex.out_sel, binds, loc,
                          in_affine, outer_sets, None, spec0, zero_start=zero_start)
        after_mask = fast if fast is not None else (lambda st: general(st, None))

        def run(st):
            if mask is None:
                return after_mask(st)
            sel = np.asarray(E.evaluate(mask, st.env, st.dyn), dtype=bool)
            if sel.all():
                return after_mask(st)  # why: an all-true mask (most tiles of a guarded loop)
            if not sel.any():  # why: masked off (e.g. another LNC core's body)
                if st.observer is not None:
                    st.observer(inst, st)
                return
            general(st, sel)
        runner = after_mask if mask is None else run
        if binds and inst.op == "load" and mask is None and acc_mode is None and \
                len(ins) == 1 and ins[0][0] == "acc" and ins[0][1].tensor in self.param_names:
            return self._zero_copy_load(inst, ins[0][1], outs[0], res_dtype, runner)
        return runner


    def _zero_copy_load(self, inst, src_ca, out, res_dtype, general):
        """``t = nl.load(input[...])``: the tile shares the read-only input's memory.

        Inputs are never written, so the new tile can be a read-only view (copied on its first
        write, see :meth:`Buf.writable`), with the float32 companion of a low-precision input.
        """
        out_ca, decl = out
        name, shape = out_ca.tensor, tuple(decl.shape)
        if not (self.decls[src_ca.tensor].dtype == decl.dtype == (res_dtype or decl.dtype)):
            return general

        def run(st):
            src = st.bufs[src_ca.tensor]
            if src.data.flags.writeable or src.init is not None:
                return general(st)
            if st.observer is not None:
                st.observer(inst, st)
            v = src_ca.read(src.data, st.env, st.dyn)
            if type(v) is not np.ndarray or v.shape != shape or v is src.data:
                v = v.reshape(shape)  # why: the tile is a new view (base: the input's memory)
            buf = Buf(name, v)
            if src.f32 is not None:
                buf.f32 = src_ca.read(src.f32, st.env, st.dyn).reshape(shape)
            st.bufs[name] = buf
        return run


    def _observed(self, inst, run):
        def wrapped(st):
            if st.observer is not None:
                st.observer(inst, st)
            run(st)
        return wrapped

    def _atomic_rmw(self, inst):
        ca = CompiledAccess(inst.outs[0], self.decls[inst.outs[0].tensor].shape, inst.loc)
        kind, src = self._operand(inst.ins[0], inst.loc)
        decl = self.decls[inst.outs[0].tensor]
        mask = inst.mask

        def run(st):
            buf = st.bufs[ca.tensor]
            value, ok = self._read(st, src, None, inst.loc, (), {})
            if ok is not None:
                self._uninit(st, inst, [ok], inst.loc)
            value = NUMPY.f32(value)
            arrs = ca.index_arrays(st.env, st.dyn)
            sel = np.ones(ca.grid, dtype=bool) if mask is None else np.broadcast_to(
                np.asarray(E.evaluate(mask, st.env, st.dyn), dtype=bool), ca.grid)
            ca.check_bounds(arrs, sel)
            idx = tuple(a[sel] for a in arrs)
            acc = NUMPY.f32(buf.data).copy()
            # why: np.add.at serialises duplicate indices, like the hardware's atomic updates
            np.add.at(acc, idx, np.broadcast_to(value.reshape(ca.shape), ca.grid)[sel])
            buf.writable()[...] = D.cast(acc, decl.dtype) if acc.dtype != buf.data.dtype else acc
        return run

    def _all_reduce(self, inst):
        src = CompiledAccess(inst.ins[0], self.decls[inst.ins[0].tensor].shape, inst.loc)
        out = CompiledAccess(inst.outs[0], self.decls[inst.outs[0].tensor].shape, inst.loc)
        odecl = self.decls[inst.outs[0].tensor]
        op, axes = inst.attr("op"), tuple(inst.attr("program_axes"))
        dt = inst.attr("dtype")
        loc = inst.loc
        reader = self

        def run(st):
            value, ok = reader._read(st, src, None, loc, (), {})
            value = NUMPY.f32(value)
            if ok is not None:
                reader._uninit(st, inst, [ok], loc)
            if st.collective is None:
                res = value
            else:
                res = st.collective.all_reduce(st.pid, axes, op, value, loc)
            reader._write(st, out, odecl, np.array(res, dtype=np.float32), dt, None, None,
                          True, loc, (), {})
        return run


def _reader(kind, x, in_affine):
    """``st -> value`` of one compiled operand, ``None`` where the general read must run."""
    if kind == "const":
        return lambda st: x
    if kind == "expr":
        return lambda st: np.asarray(E.evaluate(x, st.env, st.dyn))
    name, read, stamped = x.tensor, x.read, bool(in_affine)
    whole = x.shape if x.whole else None

    def rd(st):
        buf = st.bufs.get(name)
        if buf is None or buf.init is not None or (stamped and buf.stamp is not None):
            return None  # why: unallocated, partly written or race-stamped: MemoryTraffic._read
        d = buf.data if buf.f32 is None else buf.f32
        return d if d.shape == whole else read(d, st.env, st.dyn)  # (a whole read is the data)
    return rd


def _is_one_of(x, values) -> bool:
    for v in values:
        if v is x:
            return True
    return False


def _partitionwise(inst):
    """Taint rule of Vector/Scalar/GpSimd ops that stay within a partition (e.g. bn_stats).

    Output partition ``p`` is marked unwritten when any element the op read in input partition
    ``p`` was unwritten — exact for partition-local ops, conservative along the free axes.
    """
    info = props(inst.op)
    if info is None or info.cross_partition or \
            (inst.attr("engine") or info.engine) not in ("vector", "scalar", "gpsimd"):
        return None

    def combine(taints, shape):
        if not shape:
            return None
        row = np.ones(shape[0], dtype=bool)
        for t in taints:
            if t.ndim == 0 or t.shape[0] != shape[0]:
                return np.broadcast_to(bool(np.all(t)), shape)
            row &= t.reshape(t.shape[0], -1).all(axis=1)
        return np.broadcast_to(row.reshape((shape[0],) + (1,) * (len(shape) - 1)), shape)
    return combine


def _rowwise(inst):
    """Taint rule of ops that combine elements only within a partition's free axes."""
    axes = inst.attr("axis")
    info = props(inst.op)
    if axes is None or info is None or not info.rowwise:
        return None
    axes = tuple(axes)
    keep = bool(inst.attr("keepdims", False)) or inst.op in ("softmax", "rms_norm")

    def combine(taints, shape):
        t = taints[0]
        for other in taints[1:]:
            try:
                t = t & np.broadcast_to(other, t.shape)
            except ValueError:
                t = t & bool(np.all(other))
        row = np.all(t, axis=axes, keepdims=keep) if t.ndim > max(axes) else t
        return np.broadcast_to(row, shape) if keep else row.reshape(shape)
    return combine


def _and_all(taints, shape):
    """Elements written in every input (taints brought to the result shape like the values)."""
    out = np.ones(shape, dtype=bool)
    for t in taints:
        if t.shape != tuple(shape) and t.size == out.size and (not shape or t.shape[:1] ==
                                                               tuple(shape[:1])):
            t = t.reshape(shape)  # why: NKI assigns by partition and elements per partition
        elif 0 < t.ndim < len(shape):
            t = t.reshape(t.shape + (1,) * (len(shape) - t.ndim))
        try:
            out &= np.broadcast_to(t, shape)
        except ValueError:
            if shape and t.ndim and t.shape[0] == shape[0]:
                row = t.reshape(t.shape[0], -1).all(axis=1)
                out &= row.reshape((shape[0],) + (1,) * (len(shape) - 1))
            else:
                out &= bool(np.all(t))
    return out
