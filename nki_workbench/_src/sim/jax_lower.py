"""The compiled lowering: a kernel's IR walked once inside ``jax.jit`` tracing into one program.

:class:`Lower` is the IR -> JAX translation behind :func:`.jax_exec.run_compiled` (which holds
the compile cache, the first-call lock, the input windows and the fallback decisions).

How the IR maps onto JAX:

* Tensors are arrays in the interpreter's storage dtypes (bf16 / fp8 are the same ml_dtypes
  types); every instruction widens to float32, runs the opcode's value rule
  (:mod:`..semantics`) on JAX values and rounds to its result dtype, then to the destination
  dtype, at the same points as the interpreter.
  ``acc="add"`` (PSUM accumulation) adds in float32 into the float32 buffer.
* ``affine_range`` loops whose iterations the IR proves independent run as one batched
  computation (``jax.vmap``, :mod:`.jax_vector`): outer tensors are cut into per-iteration
  blocks, and ``psum += matmul`` over the loop becomes one dot (:data:`VECTORISE`).
* Other loops become ``lax.fori_loop`` whose carry holds the buffers the body writes; one-trip
  loops are their body, small loop nests are unrolled at lowering time (static slices, more
  fusion), but not inside a rolled loop (:data:`NESTED_UNROLL_BUDGET`). Accesses whose
  bounds are proven in range at lowering time become (dynamic) slices; anything else (masks
  that may leave the tensor, ``//``/``%`` patterns, indirect ``Dyn`` indices) becomes
  gathers/scatters with run-time bounds checks.
* The checks stay on: the program tracks which elements were written (the interpreter's
  ``init`` masks, elided where a whole-tile write proves them, and for outputs that
  :func:`.jax_static.fully_written_outputs` proves written whole: those are assembled from
  their blocks with one ``concatenate`` where the blocks tile them), and computes one flag that
  is true exactly when the interpreter would report something (an out-of-bounds access, a read
  of unwritten memory, an output with unwritten elements). ``build`` returns the outputs and
  that flag; :attr:`Lower.clean` says the trace left it a constant ``False``.
* Constants (``Scalar`` operands) are run-time arguments (``const_values``), so XLA cannot
  fold or rewrite them; an opcode or pattern without a JAX form raises ``Unsupported``
  (recorded in ``unsupported`` when found before tracing).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..ir import Access, Alloc, Inst, Kernel, Loop, Scalar, walk_insts, walk_stmts
from ..ir import expr as E
from ..semantics import VALUE_RULES, Ex, Unsupported, jax_numerics
from ..semantics.isa_alu import out_sel as narrower_sel
from ..semantics.numerics_jax import watching_flags
from .analysis import overlapping_writes, read_and_written, starts_accumulation_group
from .interp import Program
from .jax_access import (
    JaxAccess,
    fit,
    is_traced,
    lanewise,
    rowwise,
    taint_lanes,
    taint_rows,
    xp,
)
from .jax_buffers import Buffers
from .jax_dma import LOWERINGS
from .jax_static import DEFAULT_UNROLL_BUDGET, emitted, fully_written_outputs, tracked
from .jax_vector import vector_plan, vectorise

__all__ = ["Lower", "UNROLL_BUDGET", "NESTED_UNROLL_BUDGET", "VECTORISE", "lowered_size"]

UNROLL_BUDGET = DEFAULT_UNROLL_BUDGET
"""A loop is unrolled at lowering time when trip count x (lowered) body size stays below this."""
NESTED_UNROLL_BUDGET = 0
"""The same inside a loop lowered to ``fori_loop``: unrolled static slices there become
loop invariants XLA hoists into the loop state, one full copy each (measured: the tiled
matmul 1.6x slower)."""

VECTORISE = True
"""Run ``affine_range`` loops proven independent as one batched computation
(:mod:`.jax_vector`); ``False`` keeps every loop on the unrolled / ``fori_loop`` paths."""

_OPS = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


class Lower(Buffers):
    """Walks the IR once inside ``jax.jit`` tracing and emits the program."""

    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.decls = kernel.decls()
        self.accs = {}
        self.consts = {}
        self.views = {}
        self.unsupported = None
        try:
            for inst in walk_insts(kernel.body):
                for o in inst.ins:
                    if isinstance(o, Scalar):
                        self._const_key(o)
        except _unsupported_cls() as exc:
            self.unsupported = str(exc)
        self.const_values = [v for v, _ in sorted(self.consts.values(), key=lambda t: t[1])]
        self.covered = fully_written_outputs(kernel)
        self.waw = overlapping_writes(kernel)
        self.clean = False  # set by each trace: no check can fire in that program

    # -- constants: run-time arguments, so XLA cannot fold or rewrite them
    def _const_key(self, op: Scalar):
        v = op.value
        if op.dtype is not None:
            v = D.cast(np.asarray(v), op.dtype)[()]
        if isinstance(v, bool):
            arr = np.asarray(v, np.bool_)
        elif isinstance(v, int):
            if not -2**31 <= v < 2**31:
                raise _unsupported(f"integer constant {v} beyond 32 bits")
            arr = np.asarray(v, np.int32)
        elif isinstance(v, float):
            arr = np.asarray(v, np.float32)
        else:
            arr = np.asarray(v)
        key = (arr.dtype.str, arr.tobytes())
        if key not in self.consts:
            self.consts[key] = (arr, len(self.consts))
        return self.consts[key][1]

    def jacc(self, acc: Access, loc):
        """The :class:`JaxAccess` of ``acc`` at ``loc`` (one per tensor shape seen)."""
        shape = tuple(self.decls[acc.tensor].shape)
        key = (acc, loc, shape)  # why: a vectorised loop sees a tensor as its blocks
        ja = self.accs.get(key)
        if ja is None:
            ja = self.accs[key] = JaxAccess(acc, shape, loc)
        return ja

    # -- evaluation of index expressions (numpy when static, jnp when traced)
    def eval(self, e):
        """The value of index expression ``e``: numpy when static, jnp when traced."""
        if isinstance(e, E.Dyn):
            return self.dyn(e)
        if isinstance(e, E.Var):
            return self.env[e.name]
        if isinstance(e, E.Iota):
            return np.arange(e.size, dtype=np.int64).reshape(e.shape)
        if isinstance(e, E.Affine):
            val = e.const
            for atom, k in e.terms:
                val = val + k * self.eval(atom)
            return val
        if isinstance(e, E.Fn):
            a, b = (self.eval(x) for x in e.args)
            if e.op in ("min", "max"):
                lib = xp(a, b)
                return (lib.minimum if e.op == "min" else lib.maximum)(a, b)
            return {"floordiv": lambda: a // b, "mod": lambda: a % b,
                    "mul": lambda: a * b}[e.op]()
        if e.op in _OPS:
            return _OPS[e.op](self.eval(e.args[0]), self.eval(e.args[1]))
        xs = [self.eval(a) for a in e.args]
        lib = xp(*xs)
        if e.op == "not":
            return lib.logical_not(xs[0])
        return (lib.logical_and if e.op == "and" else lib.logical_or)(xs[0], xs[1])

    def dyn(self, atom):
        """A run-time (``Dyn``) index: the int32 values read from its tensor."""
        import jax.numpy as jnp
        ja = self.jacc(Access(atom.tensor, atom.index, None), None)
        data, _ = self.get(atom.tensor)
        v, bad = ja.read(data, self)
        self.bad(bad)
        return jnp.asarray(v).reshape(atom.shape).astype(jnp.int32)

    def bad(self, b):
        """OR ``b`` into the check flag (``False`` adds nothing)."""
        if b is not False:
            self.flag = self.flag | b

    # -- statements
    def block(self, body):
        """Lower a statement list in its own declaration scope."""
        binds = set()
        outer_declared = self.declared
        self.declared = set(outer_declared)
        try:
            self._stmts(body, binds)
        finally:
            self.declared = outer_declared

    def _stmts(self, body, binds):
        for k, s in enumerate(body):
            if isinstance(s, Alloc):
                self.declared.add(s.decl.name)
                nxt = body[k + 1] if k + 1 < len(body) else None
                if Program._fresh_writer(None, s.decl, nxt):
                    binds.add(k + 1)  # why: that next instruction creates the buffer
                    continue
                self._alloc(s.decl)
            elif isinstance(s, Loop):
                self.loop(s)
            else:
                self.inst(s, k in binds)

    def loop(self, loop: Loop):
        """Lower one loop: vectorised, unrolled or a ``fori_loop``."""
        r = range(loop.start, loop.stop, loop.step)
        affine = loop.kind == "affine"
        if affine:
            tracked = frozenset(self.declared) & read_and_written(loop.body, self.decls)
            self.affine.append((loop.var, tracked, self.waw.get(loop, frozenset())))
            self.iter_id = self.iter_id + 1
            self.loop_lo[loop.var] = self.iter_id
        try:
            self._loop(loop, r, affine)
        finally:
            if affine:
                self.affine.pop()

    def _loop(self, loop, r, affine):
        if len(r) == 0:
            return
        plan = vector_plan(loop, self) if affine and VECTORISE else None
        if plan is not None:
            vectorise(self, loop, plan)
            return

        def body():
            if affine:
                self.iter_id = self.iter_id + 1
                self.iter_start[loop.var] = self.iter_id
            self.block(loop.body)

        budget = NESTED_UNROLL_BUDGET if self.rolled else UNROLL_BUDGET
        # why: a one-trip loop is its body; a fori_loop of one trip only adds a while loop
        # (and the tracer's unrolled iterations make hundreds of them)
        if len(r) == 1 or len(r) * _size(loop.body, self) <= budget:
            for v in r:
                self.env[loop.var] = v
                self.ranges[loop.var] = (v, v)
                body()
            return
        lo, hi = min(r[0], r[-1]), max(r[0], r[-1])

        def set_iter(it):
            self.env[loop.var] = loop.start + it * loop.step
            self.ranges[loop.var] = (lo, hi)

        self.fori(len(r), set_iter, body, _carried(loop, self))

    def fori(self, n, set_iter, body, names):
        """Run ``body`` ``n`` times as a ``lax.fori_loop`` carrying the buffers ``names``."""
        import jax.numpy as jnp
        from jax import lax
        for name in list(self.pending):
            self._flush(name)
        for name in names:
            if name not in self.bufs:  # allocated in the body, used after the loop
                self._alloc(self.decls[name])
        saved = (dict(self.env), dict(self.ranges), dict(self.iter_start))

        def pack():
            return ([tuple(self.bufs[m]) for m in names], jnp.asarray(self.flag), self.iter_id)

        def step(it, carry):
            outer = (self.bufs, self.flag, self.iter_id, self.declared)
            self.bufs = dict(outer[0])
            try:
                for m, b in zip(names, carry[0], strict=True):
                    self.bufs[m] = list(b)
                self.flag, self.iter_id = carry[1], carry[2]
                set_iter(it)
                self.rolled += 1
                try:
                    body()
                finally:
                    self.rolled -= 1
                out = pack()
                grow = [k for k, (c, o) in enumerate(zip(carry[0], out[0], strict=True))
                        if c[1] is None and o[1] is not None]
                if grow:
                    raise _Grow(grow)
            finally:
                self.bufs, self.flag, self.iter_id, self.declared = outer
                for d, v in zip((self.env, self.ranges, self.iter_start), saved, strict=True):
                    d.clear()
                    d.update(v)
            bufs = [(d, jnp.ones(d.shape, bool) if i is None and ci is not None else i, st)
                    for (d, i, st), (_, ci, _) in zip(out[0], carry[0], strict=True)]
            return bufs, out[1], jnp.asarray(out[2], jnp.int32)

        self.iter_id = jnp.asarray(self.iter_id, jnp.int32)
        carry = pack()
        # why: a body that starts tracking a carried buffer's written-mask needs that mask in
        # the carry from the start; found while tracing (one trace in the common case, not
        # an eval_shape per loop, which nested loops made exponential)
        for _ in range(len(names) + 1):
            try:
                bufs, self.flag, self.iter_id = lax.fori_loop(0, n, step, carry)
                break
            except _Grow as g:
                for k in g.which:
                    d, _, st = carry[0][k]
                    carry[0][k] = (d, jnp.ones(d.shape, bool), st)
        for m, b in zip(names, bufs, strict=True):
            self.bufs[m] = list(b)

    def _mask(self, inst):
        if inst.mask is None:
            return None
        sel = self.eval(inst.mask)
        if not is_traced(sel):
            sel = np.asarray(sel, dtype=bool)
            if sel.all():
                return None
        return sel

    def _operand(self, op, sel, loc):
        import jax.numpy as jnp
        if isinstance(op, Access):
            return self.read(op, sel, loc)
        if isinstance(op, Scalar):
            return jnp.asarray(self.cvals[self._const_key(op)]), None
        return jnp.asarray(self.eval(op)), None

    def read(self, acc, sel, loc):
        """``(value, written-mask or None)`` of an access under mask ``sel``."""
        import jax.numpy as jnp
        ja = self.jacc(acc, loc)
        data, init = self.get(acc.tensor)
        s = None if sel is None else fit(sel, ja.ca.grid)
        v, bad = ja.read(data, self, s)
        self.bad(bad)
        if self.races and self.affine:
            self._race_check(ja, acc.tensor)
        if init is None:
            return v, None
        ok, _ = ja.read(init, self, s, fill=True)
        if sel is not None:
            m = fit(sel, ok.shape)
            if m is not None:
                ok = ok | ~jnp.asarray(m)  # why: masked-out lanes are not computed
        return v, ok

    def inst(self, inst: Inst, binds: bool):
        """Lower one instruction (``binds``: its write creates the destination buffer)."""
        import jax.numpy as jnp

        loc = inst.loc
        sel = self._mask(inst)
        vals, taints = [], []
        if inst.op == "all_reduce":
            return self._all_reduce(inst)
        if inst.op in LOWERINGS:
            return LOWERINGS[inst.op](self, inst, binds)
        for o in inst.ins:
            v, ok = self._operand(o, sel, loc)
            vals.append(v)
            if ok is not None:
                taints.append(ok)
        outs = [(self.jacc(o, loc), self.decls[o.tensor]) for o in inst.outs]
        out_shapes = [ja.ca.shape for ja, _ in outs]
        out_ok = None
        if taints:
            if self.uninit_error:
                for t in taints:
                    self.bad(~jnp.all(t))
            if len(outs) > 1:
                # why: a second destination (reduce_res) is a reduction of the first's lanes:
                # any unwritten input element hands the kernel to the interpreter
                for t in taints:
                    self.bad(~jnp.all(t))
            elif lanewise(inst) and outs:
                out_ok = taint_lanes(taints, out_shapes[0])
            elif rowwise(inst) and outs:
                out_ok = taint_rows(inst, taints, out_shapes[0])
            else:
                for t in taints:
                    self.bad(~jnp.all(t))
        if self.reducing and _root_name(inst.outs[0].tensor, self.decls) in self.reducing:
            self.partials.append((inst, vals))  # why: summed over the loop after it (jax_vector)
            return
        ex = Ex(inst, vals, None if sel is None else jnp.asarray(sel), None, out_shapes)
        with watching_flags() as flushed:  # why: data checks and flushed subnormals (see there)
            result = self.rule(inst.op)(self.P, ex)
        for f in flushed:
            self.bad(f)
        if not outs:
            return
        for k, res, out_sel in ex.results(result, sel, len(outs)):
            ja, decl = outs[k]
            if len(outs) > 1 and out_sel is not None:
                # why: the interpreter's rule for a narrower second destination (isa_exec._multi)
                out_sel = narrower_sel(self.P, out_sel, ja.ca.grid)
            self.write(ja, decl, res, inst.attr("dtype"), inst.attr("acc"), out_sel, binds,
                       out_ok, zero_start=starts_accumulation_group(inst, self.decls))

    @staticmethod
    def rule(op):
        """The value rule of opcode ``op`` (:data:`VALUE_RULES`)."""
        fn = VALUE_RULES.get(op)
        if fn is None:
            raise Unsupported(f"no JAX rule for opcode '{op}'")
        return fn

    def _all_reduce(self, inst):
        import jax.numpy as jnp

        v, ok = self.read(inst.ins[0], None, inst.loc)
        if ok is not None:
            self.bad(~jnp.all(ok))
        out = inst.outs[0]
        self.write(self.jacc(out, inst.loc), self.decls[out.tensor], self.P.f32(v),
                   inst.attr("dtype"), None, None, True)

    def write(self, ja, decl, res, res_dtype, acc_mode, sel, binds, ok=None, zero_start=False):
        """Store an instruction's result: rounding, accumulation, written-masks, race stamps."""
        import jax.numpy as jnp

        P = self.P
        cast, from_f32, storage = P.cast, P.from_f32, P.storage
        res = jnp.asarray(res)
        if res.dtype == np.float32:
            res = P.fence(res)  # why: each instruction rounds on its own (no FMA)
        if res_dtype is not None and res.dtype != storage(res_dtype):
            res = from_f32(res, res_dtype) if res.dtype == np.float32 else cast(res, res_dtype)
        ca = ja.ca
        if (sel is None and acc_mode is None and decl.name in self.covered and not self.rolled
                and not self.vec and not (self.races and decl.name in self.tracked)):
            if self._pend(ja, decl, res, ok):
                return
        if binds and sel is None and acc_mode is None:
            if res.dtype != storage(decl.dtype) or res_dtype is None:
                res = cast(res, decl.dtype) if res.dtype != np.float32 else \
                    from_f32(res, decl.dtype)
            if res.shape != tuple(decl.shape):
                res = jnp.broadcast_to(res, ca.shape).reshape(decl.shape)
            init = None if ok is None else jnp.broadcast_to(ok, ca.shape).reshape(decl.shape)
            self.set(decl.name, res, init)
            self.bufs[decl.name][2] = self._new_stamp(decl)  # a new tile: no stamps yet
            return
        data, init = self.get(decl.name)
        if acc_mode is not None:
            old, bad = ja.read(data, self)
            self.bad(bad)
            if init is not None:
                prev, _ = ja.read(init, self)
                if zero_start:
                    old = jnp.where(prev, old, jnp.zeros((), old.dtype))
                else:
                    ok = prev if ok is None else (jnp.broadcast_to(ok, prev.shape) & prev)
            res = P.alu(acc_mode, old, res)
        if res.dtype != data.dtype:
            res = from_f32(res, decl.dtype) if res.dtype == np.float32 else cast(res, decl.dtype)
        if ok is not None and init is None:
            if decl.name in self.covered:
                # why: no mask carries the taint to the end; flag now, the interpreter re-runs
                self.bad(~jnp.all(ok))
                ok = None
            else:
                init = jnp.ones(data.shape, bool)
        s = None if sel is None else fit(sel, ca.grid)
        if sel is not None and s is None:
            raise _unsupported("a mask that does not broadcast to its destination")
        data, bad = ja.write(data, res, self, s)
        self.bad(bad)
        if init is not None:
            mark = True if ok is None else ok
            if mark is True and s is None and (ca.whole or (ca.fast and ja.size == data.size)):
                init = None
            else:
                init, _ = ja.write(init, mark, self, s)
        self.set(decl.name, data, init)
        if self.races and self.affine and acc_mode is None:
            self._race_mark(ja, decl, s)

    # -- liveness
    def used_outside(self, loop) -> frozenset:
        """Root tensors that statements outside ``loop`` (as traced) read or write."""
        orig = self.origin.get(id(loop), loop)
        got = self.outside.get(id(orig))
        if got is None:
            inside = {id(s) for s in walk_stmts(orig.body)}
            got = self.outside[id(orig)] = frozenset(
                _root_name(o.tensor, self.decls) for s in walk_stmts(self.k.body)
                if isinstance(s, Inst) and id(s) not in inside
                for o in s.outs + s.ins if isinstance(o, Access))
        return got

    # -- the whole kernel
    def build(self, inputs, cvals, zero, uninit_error, races):
        """Trace the whole kernel: ``(outputs, flag)`` for the jitted program."""
        import jax.numpy as jnp
        k = self.k
        self.cvals, self.zero, self.uninit_error = cvals, zero, uninit_error
        self.P = jax_numerics(zero)  # why: fences OR with this run-time zero (no FMA through)
        self.races, self.tracked = races, tracked(k) if races else frozenset()
        self.bufs = {p.name: [x, None, self._new_stamp(p)]
                     for p, x in zip(k.params, inputs, strict=True)}
        self.flag = False  # why: stays a Python False while no check can fire (see clean)
        self.env, self.ranges = {}, {}
        self.declared = {p.name for p in k.params}
        self.affine, self.iter_id, self.loop_lo, self.iter_start = [], 0, {}, {}
        self.rolled, self.pending, self.vec, self.origin, self.outside = 0, {}, 0, {}, {}
        self.reducing, self.partials = frozenset(), []
        for s in walk_stmts(k.body):
            if isinstance(s, Alloc) and s.decl.base is None and s.decl.kind != "const" and (
                    s.decl.buffer == "shared_hbm" or s.decl.kind == "output"):
                self._alloc(s.decl)
        shared = list(self.bufs)
        grid = tuple(k.grid) or (1,)
        pids = list(np.ndindex(*grid))
        if len(pids) * _size(k.body, self) <= 4 * UNROLL_BUDGET or len(pids) == 1:
            for pid in pids:
                for axis, v in enumerate(pid):
                    self.env[f"pid{axis}"] = int(v)
                    self.ranges[f"pid{axis}"] = (int(v), int(v))
                self.block(k.body)
                self.bufs = {n: self.bufs[n] for n in shared}
        else:
            def set_pid(it):
                rest = it
                for axis in reversed(range(len(grid))):
                    self.env[f"pid{axis}"] = rest % grid[axis]
                    self.ranges[f"pid{axis}"] = (0, grid[axis] - 1)
                    rest = rest // grid[axis]

            def body():
                self.block(k.body)
            self.fori(len(pids), set_pid, body, shared)
        outs = []
        for name in k.outputs:
            if name not in self.bufs:
                raise _unsupported(f"output '{name}' is never allocated")
            if name in self.pending:
                self._assemble(name)
            data, init = self.bufs[name][:2]
            if init is not None:
                self.bad(~jnp.all(init))
            outs.append(data)
        self.clean = self.flag is False
        return tuple(outs), jnp.asarray(self.flag)


class _Grow(Exception):
    """Raised while tracing a loop body: these carried buffers' written-masks must be carried."""

    def __init__(self, which):
        super().__init__(which)
        self.which = which


def lowered_size(kernel: Kernel) -> int:
    """Instructions ``kernel``'s compiled program emits (unrolled loops count every iteration)."""
    return emitted(kernel.body, UNROLL_BUDGET)


def _size(body, lw) -> int:
    """Instructions the lowered body emits (unrolled loops count every iteration)."""
    return emitted(body, UNROLL_BUDGET)


def _carried(loop: Loop, lw: Lower) -> list:
    """Root tensors a loop must carry: those it writes that exist before it or live after."""
    roots = {_root_name(o.tensor, lw.decls) for s in walk_stmts(loop.body)
             if isinstance(s, Inst) for o in s.outs}
    inner = {s.decl.name for s in walk_stmts(loop.body) if isinstance(s, Alloc)}
    after = lw.used_outside(loop)
    return sorted(r for r in roots if r in lw.bufs or (r in inner and r in after))


def _root_name(name, decls):
    while decls[name].base is not None:
        name = decls[name].base
    return name


def _unsupported(what):
    return _unsupported_cls()(what)


def _unsupported_cls():
    return Unsupported

