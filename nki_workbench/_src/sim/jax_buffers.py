"""The memory side of the compiled lowering: tensors as JAX arrays, written-masks, race stamps.

:class:`Buffers` is the base of ``jax_lower.Lower``: each tensor is ``[data, init, stamps]``
(``init`` the written-element mask, ``None`` where a write proved it whole; ``stamps`` the
``affine_range`` iteration that last wrote each element, only when races are tracked), views
alias their root tensor, and blocks written to outputs proven written whole wait in
``pending`` until they can be assembled with one ``concatenate``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import dtypes as D
from ..semantics import Unsupported, jax_numerics
from .memory import decode_const as _decode_const
from .memory import poison as _poison

__all__ = ["Buffers"]


class Buffers:
    """Tensor storage of one lowering (see the module docstring)."""

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
        root, chain = self._chain(name)
        if root in self.pending:
            self._flush(root)
        if root not in self.bufs:
            raise Unsupported(f"tensor '{name}' read before it is allocated")
        data, init = self.bufs[root][:2]
        for shape, dt, _ in chain:
            data = (lax.bitcast_convert_type(data, dt) if dt is not None else data).reshape(shape)
            init = None if init is None else init.reshape(shape)
        return data, init

    def set(self, name, data, init):
        """Store ``(data, init)`` shaped as ``name`` declares it into its root tensor."""
        root, chain = self._chain(name)
        for _shape, dt, base in reversed(chain):
            data = data.reshape(base.shape)
            if dt is not None:
                data = lax.bitcast_convert_type(data, D.storage_dtype(D.from_name(base.dtype)))
            init = None if init is None else init.reshape(base.shape)
        old = self.bufs.get(root)
        self.bufs[root] = [data, init, None if old is None else old[2]]

    def _alloc(self, decl):
        name = decl.name
        if decl.kind == "const":
            if name not in self.bufs:
                self.bufs[name] = [jnp.asarray(_decode_const(decl)), None, None]
            return
        if decl.base is not None:
            dt = None
            if decl.view == "bitcast":
                dt = np.dtype(D.storage_dtype(D.from_name(decl.dtype)))
                src = np.dtype(D.storage_dtype(D.from_name(self.decls[decl.base].dtype)))
                if dt.itemsize != src.itemsize or "b" in (dt.kind, src.kind):
                    raise Unsupported(f"bitcast view '{name}' changing the element size")
            self.views[name] = (decl.base, tuple(decl.shape), dt)
            return
        shared = decl.buffer == "shared_hbm" or decl.kind == "output"
        if shared and name in self.bufs:
            return
        # why: an output proven written whole needs no written-mask (see fully_written_outputs)
        init = None if name in self.covered else jnp.zeros(tuple(decl.shape), bool)
        self.bufs[name] = [jnp.asarray(_poison(tuple(decl.shape), decl.dtype)), init,
                           self._new_stamp(decl)]

    def _new_stamp(self, decl):
        if self.races and decl.name in self.tracked and len(decl.shape):
            return jnp.zeros(tuple(decl.shape), jnp.int32)
        return None


    # -- blocks of outputs proven written whole, assembled once instead of updated in place
    def _pend(self, ja, decl, res, ok) -> bool:

        P = jax_numerics()
        if res.dtype != P.storage(decl.dtype):
            res = P.from_f32(res, decl.dtype) if res.dtype == np.float32 else \
                P.cast(res, decl.dtype)
        piece = ja.static_block(res, self)
        if piece is None:
            return False
        if ok is not None:
            self.bad(~jnp.all(ok))  # why: no written-mask carries the taint to the end
        self.pending.setdefault(decl.name, []).append(piece)
        return True

    def put_block(self, root, d, lo, data, init):
        """Store ``data`` (and its written-mask ``init``) at offset ``lo`` of dim ``d``."""
        start = [0] * data.ndim
        start[d] = lo
        old, old_init = self.bufs[root][:2]
        if init is None and old_init is None and root in self.covered and not (
                self.rolled or self.vec):
            self.pending.setdefault(root, []).append((tuple(start), data))
            return
        new = lax.dynamic_update_slice(old, data, start)
        if init is not None or old_init is not None:
            old_init = jnp.ones(old.shape, bool) if old_init is None else old_init
            init = jnp.ones(data.shape, bool) if init is None else init
            old_init = lax.dynamic_update_slice(old_init, init, start)
        self.bufs[root][:2] = [new, old_init]

    def _flush(self, name):
        pieces = self.pending.pop(name, ())
        if pieces:
            data, init = self.get(name)
            for lo, val in pieces:
                data = lax.dynamic_update_slice(data, val, lo)
            self.set(name, data, init)

    def _assemble(self, name):
        """One ``concatenate`` when the blocks tile the output along one axis, in order."""
        pieces, shape = self.pending[name], tuple(self.decls[name].shape)
        for d in range(len(shape)):
            if any(lo[e] != 0 or v.shape[e] != shape[e] for lo, v in pieces
                   for e in range(len(shape)) if e != d):
                continue
            pos = 0
            for lo, v in sorted(pieces, key=lambda p: p[0][d]):
                pos = pos + v.shape[d] if lo[d] == pos else -1
            if pos == shape[d]:
                del self.pending[name]
                self.bufs[name][0] = jnp.concatenate(
                    [v for _, v in sorted(pieces, key=lambda p: p[0][d])], axis=d)
                return
        self._flush(name)

    # -- affine_range races: the interpreter's iteration stamps, as int32 arrays
    def _race_mark(self, ja, decl, sel):
        """Flag a write over elements an earlier iteration wrote, then stamp it.

        Only for the loop's ``waw`` set. The flag over-approximates (masks and values are
        ignored): it only makes the interpreter re-run and decide, with its exact message.
        """
        buf = self.bufs.get(decl.name)
        if decl.base is not None or buf is None or buf[2] is None:
            return
        levels = [(var, waw) for var, tracked, waw in self.affine
                  if decl.name in tracked or decl.name in waw]
        if not levels:
            return
        for var, waw in levels:
            if decl.name in waw and var in self.loop_lo:
                old, _ = ja.read(buf[2], self)
                self.bad(jnp.any((old > self.loop_lo[var]) & (old < self.iter_start[var])))
        buf[2], _ = ja.write(buf[2], self.iter_id, self, sel)

    def _race_check(self, ja, name):
        var, tracked, _ = self.affine[-1]
        buf = self.bufs.get(name)
        if name not in tracked or buf is None or buf[2] is None or var not in self.loop_lo:
            return
        stamps, _ = ja.read(buf[2], self)
        self.bad(jnp.any((stamps > self.loop_lo[var]) & (stamps < self.iter_start[var])))
