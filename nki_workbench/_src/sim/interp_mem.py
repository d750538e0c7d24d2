"""The interpreter's memory traffic: operand reads and result writes.

Reads return the accessed values and, when some read element was never written, its written
mask (a taint the instruction's rule combines, or an :class:`UninitializedReadWarning`); they
stamp affine-loop reads for the race checks (:mod:`.races`). Writes round the result to its
dtype, bind new tiles, accumulate, apply masks and keep each buffer's written mask.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, UninitializedReadWarning, warn
from ..ir import Access, Inst
from ..ir import expr as E
from ..semantics import NUMPY
from . import races as _races
from .memory import Buf
from .memory import storage as _storage

__all__ = ["MemoryTraffic"]

_F32 = np.dtype(np.float32)


class MemoryTraffic:
    """Reads and writes of compiled accesses (a base of :class:`.interp.Program`)."""

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

    def _bind(self, st, ca, decl, res, res_dtype, ok=None):
        """An unmasked, non-accumulating write that creates tile ``ca.tensor`` (``ok``: taint)."""
        res = np.asarray(res)
        if res_dtype is not None and res.dtype != _storage(res_dtype):
            res = D.from_f32(res, res_dtype) if res.dtype == np.float32 else D.cast(res, res_dtype)
        if res.dtype is not _F32 or decl.dtype != "float32":
            # why: from_f32 to float32 is the identity (and costs an errstate)
            if res.dtype != _storage(decl.dtype) or res_dtype is None:
                res = D.cast(res, decl.dtype) if res.dtype != np.float32 else \
                    D.from_f32(res, decl.dtype)
        if res.shape != tuple(decl.shape):
            res = np.broadcast_to(res, ca.shape).reshape(decl.shape)
        if not res.flags.writeable or res.base is not None or not res.flags.c_contiguous:
            # why: tiles are row-major: order "K" lays a broadcast (stride 0) axis innermost, a
            # transpose's result is column-major, and every later op on such a tile ran 3-4x
            # slower (rmsnorm's broadcast gain)
            res = np.array(res, order="C")
        init = None if ok is None else \
            np.array(np.broadcast_to(ok, ca.shape), order="C").reshape(decl.shape)
        st.bufs[ca.tensor] = Buf(ca.tensor, res, init)

    def _binder(self, ca, decl, res_dtype):
        """``bind(st, res)``: :meth:`_bind` of one instruction's output, its facts decided once.

        A float32 result that is already a tile of the declared shape becomes the tile as is.
        """
        name, shape, bind = ca.tensor, tuple(decl.shape), self._bind
        f32 = decl.dtype == "float32" and res_dtype in (None, "float32")

        def run(st, res):
            if f32 and type(res) is np.ndarray and res.dtype is _F32 and res.shape == shape \
                    and res.base is None and res.flags.c_contiguous and res.flags.writeable:
                st.bufs[name] = Buf(name, res)
            else:
                bind(st, ca, decl, res, res_dtype)
        return run

    def _storer(self, ca, decl, loc, in_affine, outer_sets, race):
        """``store(st, res)``: :meth:`_write` of an unmasked, non-accumulating, undtyped write.

        The write goes into an existing tensor; its facts are decided once. A result of the
        tensor's dtype with no race check to run is written directly.
        """
        name, write = ca.tensor, self._write

        def run(st, res):
            buf = st.bufs.get(name)
            if buf is None or type(res) is not np.ndarray or res.dtype is not buf.data.dtype \
                    or (race is not None and st.params.detect_races):
                write(st, ca, decl, res, None, None, None, False, loc, in_affine, outer_sets,
                      None, race)
                return
            if buf.f32 is not None or not buf.data.flags.writeable:
                buf.writable()  # (otherwise a no-op)
            _write_all(st, ca, buf, res, True)
            if buf.init is not None and _races.is_view(buf):
                _races.push_init(buf)
        return run

    def _write(self, st, ca, decl, res, res_dtype, acc_mode, sel, binds, loc, in_affine,
               outer_sets, ok=None, race=None, zero_start=False):
        res = np.asarray(res)
        if sel is not None:
            # why: a mask over the inputs' grid (a reduction's) does not mask the output
            sel = _fit(sel, ca.grid)  # (broadcast once: the writes below use it as is)
        if binds and sel is None and acc_mode is None:
            self._bind(st, ca, decl, res, res_dtype, ok)
            return
        if res_dtype is not None and res.dtype != _storage(res_dtype):
            res = D.from_f32(res, res_dtype) if res.dtype == np.float32 else D.cast(res, res_dtype)
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
            racing = _races.before_write(st, ca, buf, sel, race)
        if sel is None:
            _write_all(st, ca, buf, res, mark)
        else:
            ca.write_masked(buf.data, res, sel, st.env, st.dyn)
            if buf.init is not None:
                ca.write_masked(buf.init, mark, sel, st.env, st.dyn)
        if buf.init is not None and _races.is_view(buf):
            _races.push_init(buf)
        if racing is not None:
            _races.after_write(self, st, ca, buf, race, loc, racing)


def _write_all(st, ca, buf, res, mark):
    """Every lane of ``res`` into the region; ``mark`` (True or a mask) into the written-mask."""
    if buf.init is None:
        ca.write(buf.data, res, st.env, st.dyn)
    elif mark is True and (ca.whole or (ca.fast and ca.size == buf.data.size)) and \
            not _races.is_view(buf):  # why: a view's init is its root's, shared
        ca.write(buf.data, res, st.env, st.dyn)
        buf.init = None
    else:
        ca.write_marked(buf.data, buf.init, res, mark, st.env, st.dyn)


def _fit(sel, grid):
    """Broadcast a mask to an access grid (``None`` when shapes don't line up)."""
    try:
        return np.broadcast_to(sel, grid)
    except ValueError:
        return None


def _zero(dtype):
    return np.zeros((), dtype=dtype)[()]

