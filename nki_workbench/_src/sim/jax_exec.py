"""Compiled simulation: a kernel's IR lowered to one jitted JAX program.

``run_compiled(kernel, inputs, params)`` has the contract of
``interp.Program(kernel).run(inputs, params)`` (same inputs, same outputs, same warnings and
errors) and runs the whole kernel as one XLA executable, on the default JAX device (a GPU when
a CUDA jaxlib is installed: ``pip install "jax[cuda12]==0.10.2"``; ``jax.devices()`` decides).

How the IR maps onto JAX:

* Tensors are arrays in the interpreter's storage dtypes (bf16 / fp8 are the same ml_dtypes
  types); every instruction widens to float32, runs the rule of :mod:`.jax_rules` and rounds to
  its result dtype, then to the destination dtype, at the same points as the interpreter.
  ``acc="add"`` (PSUM accumulation) adds in float32 into the float32 buffer.
* Loops become ``lax.fori_loop`` whose carry holds the buffers the body writes; small loop nests
  are unrolled at lowering time (static slices, more fusion). Accesses whose bounds are proven
  in range at lowering time become (dynamic) slices; anything else (masks that may leave the
  tensor, ``//``/``%`` patterns, indirect ``Dyn`` indices) becomes gathers/scatters with
  run-time bounds checks.
* The checks stay on: the program tracks which elements were written (the interpreter's
  ``init`` masks, elided where a whole-tile write proves them), and computes one flag that
  is true exactly when the interpreter would report something (an out-of-bounds access, a read
  of unwritten memory, an output with unwritten elements). When it is set the kernel is run
  again in the interpreter, which raises or warns with its exact message and returns its
  results, so a user never trades a diagnostic for speed.
* An opcode without a JAX rule (and a few run modes: ``shuffle_affine``, collectives, random
  numbers, race tracking of ``affine_range`` loops) makes the kernel run in the interpreter,
  with a one-line notice on stderr naming the reason.

Compiled programs are cached per kernel IR (the specialisation the tracer's cache keys on)
and, inside, per input shapes and dtypes.

Backend selection: :data:`SIM_BACKEND_ENV` (``NKI_WORKBENCH_SIM_BACKEND=jax``) is read in one
place, :func:`selected_backend`; ``Program.run`` consults it.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from .. import dtypes as D
from ..errors import NkiError
from ..ir import Access, Alloc, Inst, Kernel, Loop, Scalar, walk_insts, walk_stmts
from ..ir import expr as E
from .access import CompiledAccess
from .interp import (
    _CROSS_LANE,
    _LANEWISE,
    SPECIAL,
    Program,
    SimParams,
    _decode_const,
    _poison,
    _read_and_written,
)

__all__ = ["run_compiled", "selected_backend", "SIM_BACKEND_ENV", "BACKENDS", "compiled",
           "UNROLL_BUDGET"]

SIM_BACKEND_ENV = "NKI_WORKBENCH_SIM_BACKEND"
BACKENDS = ("numpy", "jax")
UNROLL_BUDGET = 64
"""A loop is unrolled at lowering time when trip count x (lowered) body size stays below this."""

_OPS = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
_NOTICED: set = set()
_CACHE: dict = {}
_LOCK = threading.Lock()


def selected_backend() -> str:
    """The simulator backend ``NKI_WORKBENCH_SIM_BACKEND`` selects (``numpy`` when unset)."""
    value = os.environ.get(SIM_BACKEND_ENV, "").strip().lower() or "numpy"
    if value not in BACKENDS:
        raise NkiError("wb_bad_sim_backend",
                       f"{SIM_BACKEND_ENV}={value!r} is not a simulator backend",
                       hint=f"use one of {', '.join(BACKENDS)}")
    return value


def _jax():
    import jax  # why: importing jax costs ~1 s; only the compiled backend pays it
    return jax


def _is_traced(x) -> bool:
    return not isinstance(x, (int, np.integer, np.ndarray, np.bool_, bool))


def _lib(*xs):
    if any(_is_traced(x) for x in xs):
        import jax.numpy as jnp
        return jnp
    return np


# ----------------------------------------------------------------------------- accesses
class _JAccess:
    """One IR access lowered to slices (proven in range) or checked gathers/scatters."""

    def __init__(self, acc: Access, decl_shape, loc):
        self.ca = CompiledAccess(acc, decl_shape, loc)
        self.size = int(np.prod(self.ca.shape)) if self.ca.shape else 1

    def in_range(self, ranges) -> bool:
        """Whether every index stays inside the tensor for every value the loop vars take."""
        ca = self.ca
        if ca.whole:
            return True
        if ca.has_dyn:
            return False
        for e, n in zip(ca.exprs, ca.decl_shape, strict=False):
            try:
                lo, hi = E.bounds(e, ranges)
            except (ValueError, KeyError):
                return False
            if lo < 0 or hi >= n:
                return False
        return True

    def _region(self, env):
        """Per dim: (low index, span, stride, reversed, kept)."""
        out = []
        for c, vars_, size, k in self.ca.dims:
            start = c
            for v, kv in vars_:
                start = start + kv * env[v]
            if size is None:
                out.append((start, 1, 1, False, False))
            elif k > 0:
                out.append((start, k * (size - 1) + 1, k, False, True))
            else:
                out.append((start + k * (size - 1), -k * (size - 1) + 1, -k, True, True))
        return out

    def _slice(self, data, env):
        from jax import lax
        reg = self._region(env)
        los = [r[0] for r in reg]
        spans = [r[1] for r in reg]
        if any(_is_traced(lo) for lo in los):
            import jax.numpy as jnp
            v = lax.dynamic_slice(data, [jnp.asarray(lo, jnp.int32) for lo in los], spans)
            if any(r[2] != 1 for r in reg):
                v = lax.slice(v, [0] * len(reg), spans, [r[2] for r in reg])
        else:
            v = lax.slice(data, los, [lo + s for lo, s in zip(los, spans, strict=False)],
                          [r[2] for r in reg])
        rev = tuple(d for d, r in enumerate(reg) if r[3])
        if rev:
            v = lax.rev(v, rev)
        return v, reg

    def _to_region(self, x, reg, grid_shaped):
        """A value (access-shaped) or mask (grid-shaped) in the sliced region's layout."""
        import jax.numpy as jnp
        ca = self.ca
        x = jnp.broadcast_to(x, ca.grid if grid_shaped else ca.shape).reshape(ca.sorted_shape)
        if ca.inv_perm is not None:
            x = x.transpose(ca.inv_perm)
        return x.reshape([(r[1] - 1) // r[2] + 1 for r in reg])

    def read(self, data, lw, sel=None, fill=0):
        """``(value, bad)``: ``bad`` is a bool (or traced bool) of an out-of-range read."""
        ca = self.ca
        if ca.whole:
            return (data if data.shape == ca.shape else data.reshape(ca.shape)), False
        if ca.fast and self.in_range(lw.ranges):
            v, reg = self._slice(data, lw.env)
            v = v.reshape([(r[1] - 1) // r[2] + 1 for r in reg if r[4]])
            if ca.perm is not None:
                v = v.transpose(ca.perm)
            return v.reshape(ca.shape), False
        return self._gather(data, lw, sel, fill)

    def _index_arrays(self, lw):
        ca = self.ca
        xs = [lw.eval(e) for e in ca.exprs]
        lib = _lib(*xs)
        if lib is np:
            return [np.broadcast_to(np.asarray(a, np.int64), ca.grid) for a in xs]
        return [lib.broadcast_to(lib.asarray(a, lib.int32), ca.grid) for a in xs]

    def _inb(self, arrs):
        lib = _lib(*arrs)
        ok = None
        for a, n in zip(arrs, self.ca.decl_shape, strict=False):
            t = (a >= 0) & (a < n)
            ok = t if ok is None else ok & t
        return lib, ok

    def _gather(self, data, lw, sel, fill):
        import jax.numpy as jnp
        ca = self.ca
        arrs = self._index_arrays(lw)
        if not arrs:
            return data.reshape(ca.shape), False
        if self.in_range(lw.ranges):
            return data[tuple(arrs)].reshape(ca.shape), False
        lib, inb = self._inb(arrs)
        clipped = tuple(lib.clip(a, 0, n - 1) for a, n in zip(arrs, ca.decl_shape, strict=False))
        v = data[clipped]
        if sel is None:
            return v.reshape(ca.shape), ~lib.all(inb)
        bad = lib.any(~inb & sel)
        masked = jnp.where(sel, v, jnp.asarray(fill, v.dtype))
        v = jnp.where(lib.all(inb), v, masked)
        return v.reshape(ca.shape), bad

    def write(self, data, value, lw, sel=None):
        """``(new data, bad)`` with ``value`` stored where ``sel`` (grid-shaped) holds."""
        import jax.numpy as jnp
        from jax import lax
        ca = self.ca
        value = jnp.asarray(value).astype(data.dtype)
        if ca.whole and sel is None:
            return jnp.broadcast_to(value, ca.shape).reshape(data.shape), False
        if ca.fast and self.in_range(lw.ranges) and all(abs(d[3]) <= 1 for d in ca.dims):
            reg = self._region(lw.env)
            val = self._to_region(value, reg, False)
            if sel is not None:
                old, _ = self._slice(data, lw.env)
                val = jnp.where(self._to_region(sel, reg, True), val, old.reshape(val.shape))
            rev = tuple(d for d, r in enumerate(reg) if r[3])
            if rev:
                val = lax.rev(val, rev)
            los = [r[0] for r in reg]
            if any(_is_traced(lo) for lo in los):
                los = [jnp.asarray(lo, jnp.int32) for lo in los]
            return lax.dynamic_update_slice(data, val, los), False
        arrs = self._index_arrays(lw)
        val = jnp.broadcast_to(value, ca.shape).reshape(ca.grid)
        static = self.in_range(lw.ranges)
        if static and sel is None:
            return data.at[tuple(arrs)].set(val), False
        lib, inb = self._inb(arrs)
        keep = inb if sel is None else (inb & sel)
        bad = (~lib.all(inb)) if sel is None else lib.any(~inb & sel)
        if static:
            bad = False
        idx = tuple(jnp.where(keep, a, n) for a, n in zip(arrs, ca.decl_shape, strict=False))
        return data.at[idx].set(val, mode="drop"), bad


# ----------------------------------------------------------------------------- lowering
class _Lower:
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
        key = (acc, loc)
        ja = self.accs.get(key)
        if ja is None:
            ja = self.accs[key] = _JAccess(acc, self.decls[acc.tensor].shape, loc)
        return ja

    # -- evaluation of index expressions (numpy when static, jnp when traced)
    def eval(self, e):
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
                lib = _lib(a, b)
                return (lib.minimum if e.op == "min" else lib.maximum)(a, b)
            return {"floordiv": lambda: a // b, "mod": lambda: a % b,
                    "mul": lambda: a * b}[e.op]()
        if e.op in _OPS:
            return _OPS[e.op](self.eval(e.args[0]), self.eval(e.args[1]))
        xs = [self.eval(a) for a in e.args]
        lib = _lib(*xs)
        if e.op == "not":
            return lib.logical_not(xs[0])
        return (lib.logical_and if e.op == "and" else lib.logical_or)(xs[0], xs[1])

    def dyn(self, atom):
        import jax.numpy as jnp
        ja = self.jacc(Access(atom.tensor, atom.index, None), None)
        data, _ = self.get(atom.tensor)
        v, bad = ja.read(data, self)
        self.bad(bad)
        return jnp.asarray(v).reshape(atom.shape).astype(jnp.int32)

    def bad(self, b):
        if b is not False:
            self.flag = self.flag | b

    # -- buffers (views are aliases of their root tensor)
    def _chain(self, name):
        chain = []
        while name in self.views:
            base, shape, dt = self.views[name]
            chain.append((shape, dt, self.decls[base]))
            name = base
        return name, chain[::-1]

    def get(self, name):
        """``(data, init)`` of a tensor as its declaration shapes it."""
        from jax import lax
        root, chain = self._chain(name)
        if root not in self.bufs:
            raise _unsupported(f"tensor '{name}' read before it is allocated")
        data, init = self.bufs[root]
        for shape, dt, _ in chain:
            data = (lax.bitcast_convert_type(data, dt) if dt is not None else data).reshape(shape)
            init = None if init is None else init.reshape(shape)
        return data, init

    def set(self, name, data, init):
        from jax import lax
        root, chain = self._chain(name)
        for _shape, dt, base in reversed(chain):
            data = data.reshape(base.shape)
            if dt is not None:
                data = lax.bitcast_convert_type(data, D.storage_dtype(D.from_name(base.dtype)))
            init = None if init is None else init.reshape(base.shape)
        self.bufs[root] = [data, init]

    def _alloc(self, decl):
        import jax.numpy as jnp
        name = decl.name
        if decl.kind == "const":
            if name not in self.bufs:
                self.bufs[name] = [jnp.asarray(_decode_const(decl)), None]
            return
        if decl.base is not None:
            dt = None
            if decl.view == "bitcast":
                dt = np.dtype(D.storage_dtype(D.from_name(decl.dtype)))
                src = np.dtype(D.storage_dtype(D.from_name(self.decls[decl.base].dtype)))
                if dt.itemsize != src.itemsize or "b" in (dt.kind, src.kind):
                    raise _unsupported(f"bitcast view '{name}' changing the element size")
            self.views[name] = (decl.base, tuple(decl.shape), dt)
            return
        shared = decl.buffer == "shared_hbm" or decl.kind == "output"
        if shared and name in self.bufs:
            return
        self.bufs[name] = [jnp.asarray(_poison(tuple(decl.shape), decl.dtype)),
                           jnp.zeros(tuple(decl.shape), bool)]

    # -- statements
    def block(self, body):
        binds = set()
        for k, s in enumerate(body):
            if isinstance(s, Alloc):
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
        r = range(loop.start, loop.stop, loop.step)
        if len(r) == 0:
            return
        if len(r) * _size(loop.body, self) <= UNROLL_BUDGET:
            for v in r:
                self.env[loop.var] = v
                self.ranges[loop.var] = (v, v)
                self.block(loop.body)
            return
        lo, hi = min(r[0], r[-1]), max(r[0], r[-1])

        def body():
            self.block(loop.body)

        def set_iter(it):
            self.env[loop.var] = loop.start + it * loop.step
            self.ranges[loop.var] = (lo, hi)

        self.fori(len(r), set_iter, body, _carried(loop, self))

    def fori(self, n, set_iter, body, names):
        """Run ``body`` ``n`` times as a ``lax.fori_loop`` carrying the buffers ``names``."""
        import jax.numpy as jnp
        from jax import lax
        jax = _jax()
        for name in names:
            if name not in self.bufs:  # allocated in the body, used after the loop
                self._alloc(self.decls[name])
        saved_env = dict(self.env)
        saved_ranges = dict(self.ranges)

        def pack():
            return ([tuple(self.bufs[m]) for m in names], self.flag)

        def step(it, carry):
            outer_bufs, outer_flag = self.bufs, self.flag
            self.bufs = dict(outer_bufs)
            try:
                for m, (d, i) in zip(names, carry[0], strict=False):
                    self.bufs[m] = [d, i]
                self.flag = carry[1]
                set_iter(it)
                body()
                out = pack()
            finally:
                self.bufs, self.flag = outer_bufs, outer_flag
                self.env.clear()
                self.env.update(saved_env)
                self.ranges.clear()
                self.ranges.update(saved_ranges)
            bufs = [(d, jnp.ones(d.shape, bool) if i is None and ci is not None else i)
                    for (d, i), (_, ci) in zip(out[0], carry[0], strict=False)]
            return bufs, out[1]

        carry = pack()
        for _ in range(len(names) + 1):  # why: fixpoint of which carried inits are tracked
            shape = jax.eval_shape(step, 0, carry)
            grow = [k for k, ((_, ci), (_, oi)) in enumerate(zip(carry[0], shape[0], strict=False))
                    if ci is None and oi is not None]
            if not grow:
                break
            for k in grow:
                d, _ = carry[0][k]
                carry[0][k] = (d, jnp.ones(d.shape, bool))
        bufs, self.flag = lax.fori_loop(0, n, step, carry)
        for m, (d, i) in zip(names, bufs, strict=False):
            self.bufs[m] = [d, i]

    def _mask(self, inst):
        if inst.mask is None:
            return None
        sel = self.eval(inst.mask)
        if not _is_traced(sel):
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
        import jax.numpy as jnp
        ja = self.jacc(acc, loc)
        data, init = self.get(acc.tensor)
        s = None if sel is None else _fit(sel, ja.ca.grid)
        v, bad = ja.read(data, self, s)
        self.bad(bad)
        if init is None:
            return v, None
        ok, _ = ja.read(init, self, s, fill=True)
        if sel is not None:
            m = _fit(sel, ok.shape)
            if m is not None:
                ok = ok | ~jnp.asarray(m)  # why: masked-out lanes are not computed
        return v, ok

    def inst(self, inst: Inst, binds: bool):
        import jax.numpy as jnp

        from .jax_rules import JAX_RULES, JEx
        loc = inst.loc
        sel = self._mask(inst)
        vals, taints = [], []
        if inst.op == "all_reduce":
            return self._all_reduce(inst)
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
            rowwise = _ROWWISE_OPS.get(inst.op) if inst.attr("axis") is not None else None
            if _lanewise(inst) and outs:
                out_ok = _and_all(taints, out_shapes[0])
            elif rowwise is not None and outs:
                out_ok = _rowwise(inst, taints, out_shapes[0])
            else:
                for t in taints:
                    self.bad(~jnp.all(t))
        ex = JEx(inst, vals, None if sel is None else jnp.asarray(sel), out_shapes, self.zero)
        result = JAX_RULES[inst.op](ex)
        if not outs:
            return
        results = result if isinstance(result, tuple) else (result,)
        for (ja, decl), res in zip(outs, results, strict=False):
            if res is None:
                continue
            out_sel = ex.out_sel if ex.out_sel is not None else sel
            self.write(ja, decl, res, inst.attr("dtype"), inst.attr("acc"), out_sel, binds,
                       out_ok)

    def _all_reduce(self, inst):
        import jax.numpy as jnp

        from .jax_rules import to_f32
        v, ok = self.read(inst.ins[0], None, inst.loc)
        if ok is not None:
            self.bad(~jnp.all(ok))
        out = inst.outs[0]
        self.write(self.jacc(out, inst.loc), self.decls[out.tensor], to_f32(v),
                   inst.attr("dtype"), None, None, True)

    def write(self, ja, decl, res, res_dtype, acc_mode, sel, binds, ok=None):
        import jax.numpy as jnp

        from .jax_rules import binary, cast, from_f32, opaque, storage
        res = jnp.asarray(res)
        if res.dtype == np.float32:
            res = opaque(res, self.zero)  # why: each instruction rounds on its own (no FMA)
        if res_dtype is not None and res.dtype != storage(res_dtype):
            res = from_f32(res, res_dtype) if res.dtype == np.float32 else cast(res, res_dtype)
        ca = ja.ca
        if binds and sel is None and acc_mode is None:
            if res.dtype != storage(decl.dtype) or res_dtype is None:
                res = cast(res, decl.dtype) if res.dtype != np.float32 else \
                    from_f32(res, decl.dtype)
            if res.shape != tuple(decl.shape):
                res = jnp.broadcast_to(res, ca.shape).reshape(decl.shape)
            init = None if ok is None else jnp.broadcast_to(ok, ca.shape).reshape(decl.shape)
            self.set(decl.name, res, init)
            return
        data, init = self.get(decl.name)
        if acc_mode is not None:
            old, bad = ja.read(data, self)
            self.bad(bad)
            if init is not None:
                prev, _ = ja.read(init, self)
                ok = prev if ok is None else (jnp.broadcast_to(ok, prev.shape) & prev)
            res = binary(acc_mode, old, res, self.zero)
        if res.dtype != data.dtype:
            res = from_f32(res, decl.dtype) if res.dtype == np.float32 else cast(res, decl.dtype)
        if ok is not None and init is None:
            init = jnp.ones(data.shape, bool)
        s = None if sel is None else _fit(sel, ca.grid)
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

    # -- the whole kernel
    def build(self, inputs, cvals, zero, uninit_error):
        import jax.numpy as jnp
        k = self.k
        self.cvals, self.zero, self.uninit_error = cvals, zero, uninit_error
        self.bufs = {p.name: [x, None] for p, x in zip(k.params, inputs, strict=False)}
        self.flag = jnp.zeros((), bool)
        self.env, self.ranges = {}, {}
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
            data, init = self.bufs[name]
            if init is not None:
                self.bad(~jnp.all(init))
            outs.append(data)
        return tuple(outs), self.flag


def _size(body, lw) -> int:
    """Instructions the lowered body emits (unrolled loops count every iteration)."""
    n = 0
    for s in body:
        if isinstance(s, Inst):
            n += 1
        elif isinstance(s, Loop):
            inner = _size(s.body, lw)
            n += s.trip_count * inner if s.trip_count * inner <= UNROLL_BUDGET else inner + 1
    return n


def _carried(loop: Loop, lw: _Lower) -> list:
    """Root tensors a loop must carry: those it writes that exist before it or live after."""
    inside = {id(s) for s in walk_stmts(loop.body)}
    roots = {_root_name(o.tensor, lw.decls) for s in walk_stmts(loop.body)
             if isinstance(s, Inst) for o in s.outs}
    inner = {s.decl.name for s in walk_stmts(loop.body) if isinstance(s, Alloc)}
    after = {_root_name(o.tensor, lw.decls) for s in walk_stmts(lw.k.body)
             if isinstance(s, Inst) and id(s) not in inside
             for o in s.outs + s.ins if isinstance(o, Access)}
    return sorted(r for r in roots if r in lw.bufs or (r in inner and r in after))


def _root_name(name, decls):
    while decls[name].base is not None:
        name = decls[name].base
    return name


def _lanewise(inst) -> bool:
    from ..ir import OPCODES
    return inst.op in _LANEWISE or (
        inst.op in OPCODES and OPCODES[inst.op].family in ("unary", "binary", "fill")
        and inst.op not in _CROSS_LANE)


_ROWWISE_OPS = {op: True for op in ("sum", "prod", "max", "min", "mean", "all", "var",
                                    "softmax", "rms_norm")}


def _rowwise(inst, taints, shape):
    import jax.numpy as jnp
    axes = tuple(inst.attr("axis"))
    keep = bool(inst.attr("keepdims", False)) or inst.op in ("softmax", "rms_norm")
    t = taints[0]
    for other in taints[1:]:
        if _fits(other.shape, t.shape):
            t = t & jnp.broadcast_to(other, t.shape)
        else:
            t = t & jnp.all(other)
    row = jnp.all(t, axis=axes, keepdims=keep) if t.ndim > max(axes) else t
    return jnp.broadcast_to(row, shape) if keep else row.reshape(shape)


def _and_all(taints, shape):
    import jax.numpy as jnp
    out = jnp.ones(shape, bool)
    for t in taints:
        if 0 < t.ndim < len(shape):
            t = t.reshape(t.shape + (1,) * (len(shape) - t.ndim))
        out = out & (jnp.broadcast_to(t, shape) if _fits(t.shape, shape) else jnp.all(t))
    return out


def _fits(a, b) -> bool:
    try:
        return np.broadcast_shapes(tuple(a), tuple(b)) == tuple(b)
    except ValueError:
        return False


def _fit(sel, grid):
    if not _fits(np.shape(sel), grid):
        return None
    lib = _lib(sel)
    return lib.broadcast_to(sel, grid)


def _unsupported(what):
    return _unsupported_cls()(what)


def _unsupported_cls():
    from .jax_rules import Unsupported
    return Unsupported


# ----------------------------------------------------------------------------- entry point
def _why_interpreted(kernel: Kernel, params: SimParams) -> str | None:
    """Why this kernel/params pair runs in the interpreter (``None``: it compiles)."""
    from .jax_rules import JAX_RULES
    if params.shuffle_affine:
        return "SimParams(shuffle_affine=True)"
    grid = int(np.prod(kernel.grid)) if kernel.grid else 1
    for inst in walk_insts(kernel.body):
        if inst.op == "all_reduce":
            if kernel.attr("has_collectives") and grid > 1:
                return "collective 'all_reduce' across programs"
        elif inst.op in SPECIAL or inst.op not in JAX_RULES:
            return f"no JAX rule for opcode '{inst.op}'"
    if params.detect_races and _tracks_races(kernel):
        return "affine_range race tracking (a tile declared outside the loop is read and " \
               "written in it)"
    return None


def _tracks_races(kernel: Kernel) -> bool:
    decls = kernel.decls()

    def walk(body, declared):
        declared = set(declared)
        for s in body:
            if isinstance(s, Alloc):
                declared.add(s.decl.name)
            elif isinstance(s, Loop):
                if s.kind == "affine" and declared & _read_and_written(s.body, decls):
                    return True
                if walk(s.body, declared):
                    return True
        return False
    return walk(kernel.body, {d.name for d in kernel.params})


class _Compiled:
    """One kernel's compiled executables (per input signature and check mode)."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.lower = _Lower(kernel)
        self.fns = {}
        self.program = None
        self.runs = 0

    def fn(self, uninit_error: bool):
        f = self.fns.get(uninit_error)
        if f is None:
            jax = _jax()

            def run(inputs, cvals, zero):
                return self.lower.build(inputs, cvals, zero, uninit_error)
            f = self.fns[uninit_error] = jax.jit(run)
        return f

    def interpreter(self) -> Program:
        if self.program is None:
            self.program = Program(self.kernel)
        return self.program


def compiled(kernel: Kernel) -> _Compiled:
    """The cached compiled form of ``kernel`` (one per IR; equal IRs share it)."""
    with _LOCK:
        entry = _CACHE.get(id(kernel))
        if entry is not None and entry.kernel is kernel:
            return entry
        entry = _CACHE.get(kernel)
        if entry is None:
            entry = _CACHE[kernel] = _Compiled(kernel)
        _CACHE[id(kernel)] = entry
        return entry


def _notice(kernel: Kernel, why: str):
    key = (kernel.name, why)
    if key not in _NOTICED:
        _NOTICED.add(key)
        print(f"nki_workbench: kernel '{kernel.name}' runs in the interpreter, not compiled: "
              f"{why}", file=sys.stderr, flush=True)


def _checked_inputs(kernel: Kernel, inputs: dict) -> list:
    arrays = []
    for p in kernel.params:
        if p.name not in inputs:
            raise NkiError(None, f"missing input for kernel parameter '{p.name}'")
        arr = np.asarray(inputs[p.name])
        if tuple(arr.shape) != tuple(p.shape):
            raise NkiError(None, f"input '{p.name}' has shape {list(arr.shape)}, the trace "
                           f"expects {list(p.shape)}")
        arrays.append(D.cast(arr, p.dtype))
    return arrays


def run_compiled(kernel, inputs: dict, params: SimParams | None = None) -> dict:
    """Run ``kernel`` (a :class:`Kernel` or :class:`Program`) as one compiled JAX program.

    Same contract as ``Program(kernel).run(inputs, params)``: ``inputs`` maps parameter names
    to arrays; returns output name -> numpy array in storage dtype, with the interpreter's
    warnings and errors (the interpreter re-runs the kernel whenever one is due).

    Args:
        kernel: the traced kernel IR (or an interpreter ``Program`` of it).
        inputs: parameter name -> numpy array.
        params: simulation parameters (``SimParams()`` when ``None``).

    Returns:
        dict: output tensor name -> numpy array.
    """
    from .jax_rules import Unsupported
    params = params or SimParams()
    if isinstance(kernel, Program):
        kernel = kernel.kernel
    comp = compiled(kernel)
    arrays = _checked_inputs(kernel, inputs)
    why = comp.lower.unsupported or _why_interpreted(kernel, params)
    if why is None:
        jax = _jax()
        device = jax.devices()[0]
        try:
            args = [jax.device_put(a, device) for a in arrays]
            cvals = [jax.device_put(c, device) for c in comp.lower.const_values]
            outs, flag = comp.fn(params.uninitialized == "error")(args, cvals, np.int32(0))
        except Unsupported as exc:
            why = str(exc)
        else:
            comp.runs += 1
            if not bool(flag):
                return {name: np.array(o) for name, o in zip(kernel.outputs, outs, strict=False)}
            # the interpreter reports what the flag saw, with its exact message
            return comp.interpreter().run(inputs, params, backend="numpy")
    _notice(kernel, why)
    return comp.interpreter().run(inputs, params, backend="numpy")
