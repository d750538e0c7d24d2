"""The CPU simulator: executes the IR on numpy.

Steps:
  1. ``Program(kernel)`` compiles the statement tree once into closures: each access into a
     :class:`~.access.CompiledAccess` (basic-slice fast path), each instruction into a runner
     that reads inputs, applies the opcode's value rule (:mod:`..semantics`, numpy numerics),
     rounds to the result dtype and writes (with mask, accumulation, and initialisation tracking).
  2. ``Program.run(inputs, params)`` allocates buffers, runs every SPMD program of the grid
     (concurrently as threads when the kernel has collectives), and returns the outputs.

Memory semantics that keep results honest:
  * Uninitialised floating-point memory is NaN and integer memory holds a poison value
    (dtype min for signed, max for unsigned). Reading an element nothing wrote emits
    :class:`UninitializedReadWarning` naming the tensor and kernel line (or raises with
    ``SimParams(uninitialized="error")``), so no masked-out lane or forgotten write turns into
    a silent zero.
  * ``affine_range`` iterations must be independent: a tile declared outside the loop, written
    in one iteration and read in another (other than ``+=`` accumulation), or elements two
    iterations write when the result is seen after the loop, emit
    :class:`LoopCarriedDependencyWarning`; two SPMD programs writing the same shared element
    emit :class:`SpmdRaceWarning` (both raise with ``SimParams(races="error")``; see
    :mod:`.races`). ``SimParams(shuffle_affine=True)`` runs affine iterations and SPMD programs
    in a random order so such races change results.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import dtypes as D
from ..errors import (
    NkiError,
    UninitializedReadWarning,
    warn,
)
from ..ir import Access, Alloc, Inst, Kernel, Loop, Scalar
from ..ir import expr as E
from ..options import SimParams
from ..platform import blas_single_threaded
from ..semantics import NUMPY, VALUE_RULES, Ex
from ..semantics.registry import props
from . import races as _races
from .access import CompiledAccess
from .analysis import (
    overlapping_writes,
    read_and_written,
    root,
    shared_overlaps,
    starts_accumulation_group,
)
from .analysis import root as _analysis_root
from .liveness import free_plan
from .memory import LOW_FLOATS as _LOW_FLOATS
from .memory import Buf
from .memory import decode_const as _decode_const
from .memory import poison as _poison
from .memory import storage as _storage
from .memory import tune_malloc as _tune_malloc
from .specials import SPECIAL
from .spmd import Collective as _Collective

__all__ = ["SimParams", "Program", "Buf", "SPECIAL"]



class _State:
    __slots__ = ("env", "bufs", "rng", "params", "shared", "races", "collective", "pid",
                 "regs", "observer", "poison", "param_names",
                 "iter_id", "loop_lo", "iter_start", "iters", "ordinal", "grid")

    def __init__(self, params: SimParams, shared: dict, collective, pid: tuple):
        self.env = {}
        self.bufs = dict(shared)
        self.shared = shared
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        self.collective = collective
        self.pid = pid
        self.regs = {}  # per-engine accumulator registers (nki.isa reduce_cmd state)
        self.param_names = ()
        self.poison = shared.setdefault("__poison__", {})  # (tensor, line) of unwritten reads
        self.observer = None
        self.iter_id = 0
        self.loop_lo = {}
        self.iter_start = {}
        self.iters = {}  # affine loop var -> (iteration ids, values) of its current run
        self.ordinal = 0
        self.grid = (1,)

    def reseed(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def dyn(self, atom, env):
        buf = self.bufs[atom.tensor]
        ca = CompiledAccess(Access(atom.tensor, atom.index, None), buf.data.shape)
        v = ca.read(buf.data, env, self.dyn)
        return np.asarray(v).reshape(atom.shape).astype(np.int64)


def _register_value(st, name: str, loc) -> int:
    """The run-time int of a dynamic loop's one-element register tensor."""
    b = st.bufs[name]
    if b.init is not None and not b.init.all():
        raise NkiError("wb_uninitialized_read", f"a dynamic loop reads register '{name}' "
                       "before it was written", loc, "nisa.register_load it first")
    return int(b.data.reshape(-1)[0])


class Program:
    """A kernel compiled for simulation; ``run`` it with numpy inputs."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.decls = kernel.decls()
        self.carried = {}   # loop var -> names of outer tensors written in that affine loop
        self.param_names = frozenset(d.name for d in kernel.params)
        self.waw = overlapping_writes(kernel)
        self.spmd = shared_overlaps(kernel)
        self.sites = []  # write site -> kernel line (race stamps name the writer)
        self.affine_now = ()
        self.body = self._block(kernel.body, outer=frozenset(d.name for d in kernel.params),
                                affine_vars=())

    # ------------------------------------------------------------------ compile
    def _block(self, body, outer, affine_vars, repeated=False):
        fns = []
        skip_alloc = set()
        declared = set(outer)
        dead = free_plan(body, self.decls, repeated)
        for k, s in enumerate(body):
            if k - 1 in dead:
                fns.append(self._free(dead[k - 1]))
            if isinstance(s, Alloc):
                declared.add(s.decl.name)
                nxt = body[k + 1] if k + 1 < len(body) else None
                if self._fresh_writer(s.decl, nxt):
                    skip_alloc.add(k + 1)  # why: only that next instruction creates the buffer
                    continue
                fns.append(self._alloc(s.decl))
            elif isinstance(s, Loop):
                # why: only tensors both read and (non-accumulating) written inside the loop can
                # carry a value between iterations; stamping others would only cost time
                inner_aff = affine_vars + ((s.var, frozenset(declared) & read_and_written(
                    s.body, self.decls), self.waw.get(s, frozenset())),) \
                    if s.kind == "affine" else affine_vars
                fns.append(self._loop(s, self._block(s.body, frozenset(declared), inner_aff,
                                                     repeated=s.trip_count > 1)))
            else:
                fns.append(self._inst(s, k in skip_alloc, affine_vars))
        if len(body) - 1 in dead:
            fns.append(self._free(dead[len(body) - 1]))
        return fns

    def _free(self, roots):
        """Drop dead tiles and their views (:mod:`.liveness`): unrolled copies add up."""
        names = tuple(n for n, d in self.decls.items() if _analysis_root(n, self.decls) in roots)

        def run(st):
            for n in names:
                st.bufs.pop(n, None)
        return run

    def _fresh_writer(self, decl, nxt) -> bool:
        if decl.buffer not in ("sbuf", "psum") or decl.base is not None or decl.kind != "local":
            return False
        if not isinstance(nxt, Inst) or len(nxt.outs) != 1 or nxt.mask is not None:
            return False
        o = nxt.outs[0]
        if o.tensor != decl.name or o.index is not None or nxt.attr("acc") is not None:
            return False
        if nxt.op in ("atomic_rmw", "store"):
            return False
        return not any(isinstance(i, Access) and i.tensor == decl.name for i in nxt.ins)

    def _alloc(self, decl):
        name = decl.name
        if decl.kind == "const":
            data = _decode_const(decl)

            def run(st):
                if name not in st.bufs:
                    st.bufs[name] = Buf(name, data.copy())
            return run
        if decl.base is not None:
            base, shape = decl.base, decl.shape
            bitcast = decl.view == "bitcast"
            dt = D.storage_dtype(D.from_name(decl.dtype))

            def run(st):
                b = st.bufs[base]
                if not b.data.flags.writeable and b.name not in st.param_names:
                    b.writable()  # why: writes through the view must reach the tile itself
                data = b.data.view(dt).reshape(shape) if bitcast else b.data.reshape(shape)
                init = None
                if b.init is not None:
                    init = b.init.reshape(shape) if not bitcast else np.repeat(
                        b.init, max(1, b.data.itemsize // dt.itemsize), axis=-1
                    ).reshape(shape) if b.data.itemsize >= dt.itemsize else b.init.reshape(
                        b.init.shape[:-1] + (-1, dt.itemsize // b.data.itemsize)).all(-1
                                                                                      ).reshape(shape)
                view = Buf(name, data, init)
                view.stamp = b
                st.bufs[name] = view
            return run
        shared = decl.buffer == "shared_hbm" or decl.kind in ("output",)
        shape, dtn = decl.shape, decl.dtype

        def run(st):
            if shared and name in st.shared:
                st.bufs[name] = st.shared[name]
                return
            buf = Buf(name, _poison(shape, dtn), np.zeros(shape, dtype=bool))
            if shared:
                # why: SPMD programs may run as threads; setdefault is atomic, so every program
                # gets the one shared buffer even when two allocate it at the same time
                buf = st.shared.setdefault(name, buf)
            st.bufs[name] = buf
        return run

    def _loop(self, loop: Loop, body):
        var, r = loop.var, range(loop.start, loop.stop, loop.step)
        affine = loop.kind == "affine"
        dynamic = loop.kind == "dynamic"
        core = dict(loop.attrs).get("core")

        def run(st):
            env = st.env
            if core is not None and env.get("pid0", 0) != core:
                return  # why: a per-core body's dynamic loop runs on that core only
            it = loop.iterations(lambda n: _register_value(st, n, loop.loc)) if dynamic else r
            if affine and st.params.shuffle_affine and len(r) > 1:
                it = [r[i] for i in st.rng.permutation(len(r))]
            if affine:
                st.iter_id += 1
                saved = st.loop_lo.get(var)
                saved_iters = st.iters.get(var)
                st.loop_lo[var] = st.iter_id
                st.iters[var] = ([], [])
            for v in it:
                env[var] = v
                if affine:
                    st.iter_id += 1
                    st.iter_start[var] = st.iter_id
                    _races.enter_iteration(st, var, v)
                for f in body:
                    f(st)
            if affine:
                if saved is None:
                    st.loop_lo.pop(var, None)
                    st.iters.pop(var, None)
                else:
                    st.loop_lo[var] = saved
                    st.iters[var] = saved_iters
        return run

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

        def run(st):
            env = st.env
            sel = None
            if mask is not None:
                sel = np.asarray(E.evaluate(mask, env, st.dyn), dtype=bool)
                if sel.all():
                    sel = None
                elif not sel.any():  # why: masked off (e.g. another LNC core's body)
                    if st.observer is not None:
                        st.observer(inst, st)
                    return
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
                    res = np.array(res)  # why: a new tile must not alias its source buffer
                reader._write(st, ca, decl, res, res_dtype, acc_mode, out_sel, binds, loc,
                              in_affine, outer_sets, out_ok, specs[k], zero_start=zero_start)
        if binds and inst.op == "load" and mask is None and acc_mode is None and \
                len(ins) == 1 and ins[0][0] == "acc" and ins[0][1].tensor in self.param_names:
            return self._zero_copy_load(inst, ins[0][1], outs[0], res_dtype, run)
        return run

    def _race_spec(self, out, affine_vars, loc):
        """The race checks a write to ``out`` needs (``None``: none; see :mod:`.races`)."""
        name = root(out.tensor, self.decls)  # why: a view's writes are checked on its root
        waw = tuple(v for v, _, w in affine_vars if name in w)
        stamp = bool(affine_vars) and name in affine_vars[-1][1]
        spmd = name in self.spmd
        if not (waw or stamp or spmd):
            return None
        self.sites.append(loc)
        return _races.RaceSpec(len(self.sites) - 1, waw, stamp, spmd)

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
            buf = Buf(name, src_ca.read(src.data, st.env, st.dyn).reshape(shape))
            if src.f32 is not None:
                buf.f32 = src_ca.read(src.f32, st.env, st.dyn).reshape(shape)
            st.bufs[name] = buf
        return run

    # ------------------------------------------------------------------ memory traffic
    def _operands(self, st, ins, sel, loc, in_affine=(), outer_sets=None):
        """``(values, taints)`` of an instruction's compiled operands (see :meth:`_operand`).

        ``taints``: the written-masks of the accesses that read unwritten elements.
        """
        vals, taints = [], []
        for kind, x in ins:
            if kind == "acc":
                v, ok = self._read(st, x, sel, loc, in_affine, outer_sets or {})
                vals.append(v)
                if ok is not None:
                    taints.append(ok)
            elif kind == "const":
                vals.append(x)
            else:
                vals.append(np.asarray(E.evaluate(x, st.env, st.dyn)))
        return vals, taints

    def _read(self, st, ca, sel, loc, in_affine, outer_sets):
        """``(value, written)``: ``written`` is None when every read element was written."""
        buf = st.bufs.get(ca.tensor)
        if buf is None:
            raise NkiError(None, f"internal: tensor '{ca.tensor}' is not allocated", loc)
        s = None
        if sel is not None:
            s = _fit(sel, ca.grid)
            try:
                v = ca.read(buf.data, st.env, st.dyn)
                s = None
            except NkiError:
                if s is None:
                    raise
                v = ca.read_masked(buf.data, s, st.env, st.dyn, fill=_zero(buf.data.dtype))
        else:
            v = ca.read(buf.data if buf.f32 is None else buf.f32, st.env, st.dyn)
        ok = None
        if buf.init is not None and not _races.view_fully_written(buf):
            _races.pull_init(buf)  # why: a bitcast view's mask is its own copy (races.push_init)
            ok = ca.read(buf.init, st.env, st.dyn) if s is None else \
                ca.read_masked(buf.init, s, st.env, st.dyn, fill=True)
            if sel is not None:
                m = _fit(sel, ok.shape)
                if m is not None:
                    ok = ok | ~m  # why: masked-out lanes are not computed, so not "read"
            ok = None if ok.all() else np.array(ok)
            if ok is not None and len(st.poison) < 8:
                st.poison.setdefault((buf.name, loc), None)
        if buf.stamp is not None and in_affine and st.params.detect_races and \
                _races.tracked_read(buf, outer_sets[in_affine[-1]]):
            _races.on_read(self, st, ca, buf, loc, in_affine[-1])
        return v, ok

    def _uninit(self, st, what, taints, loc):
        bad = sum(int(np.size(t) - np.count_nonzero(t)) for t in taints)
        name = what.op if isinstance(what, Inst) else str(what)
        tensors = ", ".join(f"'{a.tensor}'" for a in getattr(what, "ins", ())
                            if isinstance(a, Access))
        msg = (f"'{name}' read {bad} element(s) of {tensors or 'its inputs'} that nothing wrote "
               "(uninitialised memory or masked-out lanes); they hold NaN/poison")
        if st.params.uninitialized == "error":
            raise NkiError("wb_uninitialized_read", msg, loc,
                           "write the whole tile before reading it (nl.zeros, or a store "
                           "covering every element), or mask the read the same way")
        warn(UninitializedReadWarning, msg, loc,
             "initialise the tile (nl.zeros / nisa.memset) or mask the read the same way as "
             "the write")

    def _write(self, st, ca, decl, res, res_dtype, acc_mode, sel, binds, loc, in_affine,
               outer_sets, ok=None, race=None, zero_start=False):
        res = np.asarray(res)
        if sel is not None and _fit(sel, ca.grid) is None:
            sel = None  # why: a mask over the inputs' grid (a reduction's) does not mask the output
        if res_dtype is not None and res.dtype != _storage(res_dtype):
            res = D.from_f32(res, res_dtype) if res.dtype == np.float32 else D.cast(res, res_dtype)
        if binds and sel is None and acc_mode is None:
            if res.dtype != _storage(decl.dtype) or res_dtype is None:
                res = D.cast(res, decl.dtype) if res.dtype != np.float32 else \
                    D.from_f32(res, decl.dtype)
            if res.shape != tuple(decl.shape):
                res = np.broadcast_to(res, ca.shape).reshape(decl.shape)
            if not res.flags.writeable or res.base is not None:
                res = np.array(res)
            init = None if ok is None else np.array(np.broadcast_to(ok, ca.shape)).reshape(
                decl.shape)
            st.bufs[ca.tensor] = Buf(ca.tensor, res, init)
            return
        buf = st.bufs[ca.tensor]
        buf.writable()
        if acc_mode == "add" and sel is None and ok is None and buf.init is None and \
                buf.data.dtype == np.float32 and res.dtype == np.float32 and \
                (ca.whole or (ca.fast and ca.perm is None)):
            # why: PSUM accumulation is the matmul hot path: add in place, no temporaries
            region = buf.data if ca.whole else ca.view_for_write(buf.data, st.env)
            np.add(region, res.reshape(region.shape), out=region)
            return  # (accumulation is never a loop-carried dependency: no race stamp)
        if acc_mode is not None:
            old = ca.read(buf.data, st.env, st.dyn)
            if buf.init is not None:
                prev = ca.read(buf.init, st.env, st.dyn)
                if zero_start:
                    old = np.where(prev, old, np.zeros((), old.dtype))
                else:
                    ok = prev if ok is None else (np.broadcast_to(ok, prev.shape) & prev)
            res = NUMPY.alu(acc_mode, old, res)
        if res.dtype != buf.data.dtype:
            res = D.from_f32(res, decl.dtype) if res.dtype == np.float32 else D.cast(res,
                                                                                    decl.dtype)
        if ok is not None and not np.all(ok):
            if buf.init is None:
                buf.init = np.ones(buf.data.shape, dtype=bool)
            mark = ok
        else:
            mark = True
        racing = None
        if race is not None and acc_mode is None and st.params.detect_races:
            racing = _races.before_write(st, ca, buf, None if sel is None else _fit(
                sel, ca.grid), race)
        if sel is None:
            ca.write(buf.data, res, st.env, st.dyn)
            if buf.init is not None:
                if mark is True and (ca.whole or (ca.fast and ca.size == buf.data.size)) and \
                        not _races.is_view(buf):  # why: a view's init is its root's, shared
                    buf.init = None
                else:
                    ca.write(buf.init, mark, st.env, st.dyn)
        else:
            s = _fit(sel, ca.grid)
            ca.write_masked(buf.data, res, s, st.env, st.dyn)
            if buf.init is not None:
                ca.write_masked(buf.init, mark, s, st.env, st.dyn)
        if buf.init is not None and _races.is_view(buf):
            _races.push_init(buf)
        if racing is not None:
            _races.after_write(self, st, ca, buf, race, loc, racing)

    # ------------------------------------------------------------------ special instructions
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

    # ------------------------------------------------------------------ run
    def run(self, inputs: dict, params: SimParams | None = None, observer=None,
            backend: str | None = None) -> dict:
        """Execute every SPMD program; ``inputs`` maps parameter names to arrays.

        ``observer(inst, state)``, when given, is called before each executed instruction
        (``state.env`` holds the loop-variable values, ``state.pid`` the program): the hook the
        cost model and timeline use to see the concrete instruction stream.

        ``backend``: ``"numpy"`` or ``None`` — this is the interpreter. The compiled program
        (``"jax"``) runs through ``execution.run`` / :func:`.jax_exec.run_compiled`, which sit
        above this module.

        Returns:
            dict: output tensor name -> numpy array (storage dtype).
        """
        if backend not in (None, "numpy"):
            raise NkiError("wb_bad_sim_backend", f"Program.run is the numpy interpreter; "
                           f"backend={backend!r} runs through nki_workbench's run path",
                           hint="use nki.simulate_kernel(..., params=SimParams(backend=...)) "
                           "or jax_exec.run_compiled(program, inputs)")
        params = params or SimParams()
        _tune_malloc()
        with blas_single_threaded():  # why: tile GEMMs; BLAS threads collapse under load
            return self._run(inputs, params, observer)

    def _run(self, inputs: dict, params: SimParams, observer) -> dict:
        k = self.kernel
        shared = {}
        for p in k.params:
            if p.name not in inputs:
                raise NkiError(None, f"missing input for kernel parameter '{p.name}'")
            arr = np.asarray(inputs[p.name])
            if tuple(arr.shape) != tuple(p.shape):
                raise NkiError(None, f"input '{p.name}' has shape {list(arr.shape)}, the trace "
                               f"expects {list(p.shape)}")
            if p.kind == "input" and arr.dtype == _storage(p.dtype):
                buf = Buf(p.name, arr.view())  # read-only view below: the caller's array is safe
            else:
                buf = Buf(p.name, D.cast(arr, p.dtype))  # cast always copies
            if p.kind == "input":
                # why: inputs are never written, so loads may share their memory (zero-copy)
                # and low-precision inputs are widened to float32 once, not at every use
                buf.data.flags.writeable = False
                if p.dtype in _LOW_FLOATS:
                    buf.f32 = D.to_f32(buf.data)
                    buf.f32.flags.writeable = False
            shared[p.name] = buf
        grid = tuple(k.grid) or (1,)
        pids = list(np.ndindex(*grid))
        if k.attr("has_collectives") and len(pids) > 1:
            coll = _Collective(grid, params.collective_timeout)
            errors = []

            def worker(pid):
                try:
                    # why: iteration ids stay unique across programs running side by side
                    start = int(np.ravel_multi_index(pid, grid)) << 32
                    self._run_one(params, shared, coll, pid, observer, start)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                    errors.append(exc)
                    coll.abort()

            threads = [threading.Thread(target=worker, args=(pid,)) for pid in pids]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        else:
            if params.shuffle_affine and len(pids) > 1:
                # why: SPMD programs run in any order (on different cores) like affine iterations
                order = np.random.default_rng(params.seed).permutation(len(pids))
                pids = [pids[i] for i in order]
            start = 0
            for pid in pids:
                start = self._run_one(params, shared, None, pid, observer, start)
        out = {}
        shared.pop("__races__", None)
        poison = shared.pop("__poison__", {})
        for name in k.outputs:
            buf = shared.get(name)
            if buf is None:
                raise NkiError("err_tensor_output_not_written_to",
                               f"output '{name}' was never written")
            if buf.init is not None and not buf.init.all():
                missing = int(buf.init.size - np.count_nonzero(buf.init))
                sources = [f"'{t}' at {where}" for t, where in list(poison)[:3]]
                origin = ("; they hold NaN/poison computed from unwritten elements of "
                          + ", ".join(sources)) if sources else "; they hold NaN/poison"
                msg = (f"output '{name}': {missing} of {buf.init.size} elements were never "
                       f"written{origin}")
                hint = ("store every element of the output and initialise the tiles it is "
                        "computed from (check loop bounds and masks)")
                if params.uninitialized == "error":
                    raise NkiError("wb_uninitialized_read", msg, self.decls[name].loc, hint)
                warn(UninitializedReadWarning, msg, self.decls[name].loc, hint)
            out[name] = buf.data
        return out

    def _run_one(self, params, shared, coll, pid, observer=None, start=0):
        """Run program ``pid``; returns its last affine iteration id (the next one's start)."""
        st = _State(params, shared, coll, pid)
        st.observer = observer
        st.param_names = self.param_names
        st.iter_id = start
        st.grid = tuple(self.kernel.grid) or (1,)
        st.ordinal = int(np.ravel_multi_index(pid, st.grid))
        for axis, v in enumerate(pid):
            st.env[f"pid{axis}"] = int(v)
        # why: inf/NaN are legitimate values here (poison, fp32.min...), never numpy warnings;
        # one context per program instead of one per instruction
        with np.errstate(all="ignore"):
            for f in self.body:
                f(st)
        return st.iter_id


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


def _fit(sel, grid):
    """Broadcast a mask to an access grid (``None`` when shapes don't line up)."""
    try:
        return np.broadcast_to(sel, grid)
    except ValueError:
        return None


def _zero(dtype):
    return np.zeros((), dtype=dtype)[()]


SPECIAL["atomic_rmw"] = Program._atomic_rmw
SPECIAL["all_reduce"] = Program._all_reduce
from . import isa_exec as _isa_exec  # noqa: E402,F401,I001  (the nki.isa executor specials)
