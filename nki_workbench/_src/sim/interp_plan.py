"""The interpreter's compile-time plan: the statement tree as a tree of closures.

Blocks become lists of runners: allocations (poisoned fresh buffers, shared HBM, views,
constants), loops (affine iteration ids for the race checks, shuffled orders, run-time trip
counts of dynamic loops read from registers), instructions
(:mod:`.interp_inst`) and the drops of dead tiles after their last use (:mod:`.liveness`).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError
from ..ir import Access, Alloc, Inst, Loop
from . import races as _races
from .analysis import read_and_written, root
from .analysis import root as _analysis_root
from .interp_inst import InstRunners
from .liveness import free_plan
from .memory import Buf, poisoner
from .memory import decode_const as _decode_const

__all__ = ["Planner"]


def _register_value(st, name: str, loc) -> int:
    """The run-time int of a dynamic loop's one-element register tensor."""
    b = st.bufs[name]
    if b.init is not None and not b.init.all():
        raise NkiError("wb_uninitialized_read", f"a dynamic loop reads register '{name}' "
                       "before it was written", loc, "nisa.register_load it first")
    return int(b.data.reshape(-1)[0])


class Planner(InstRunners):
    """Compiles blocks, allocations and loops (a base of :class:`.interp.Program`)."""

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
        shape, fresh = decl.shape, poisoner(tuple(decl.shape), decl.dtype)
        whole = shared and name in self.covered  # (every element is written before the end)
        st_dt = D.storage_dtype(D.from_name(decl.dtype))

        def run(st):
            if shared and name in st.shared:
                st.bufs[name] = st.shared[name]
                return
            if whole:
                buf = Buf(name, np.empty(shape, dtype=st_dt))  # why: no poison is ever seen
            else:
                buf = Buf(name, fresh(), np.zeros(shape, dtype=bool))
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
