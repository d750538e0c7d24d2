"""Compiled tensor accesses: reading and writing the region an IR :class:`Access` denotes.

Each access is compiled once per program into a small object. When every dimension's index is
``const + sum(k * var) + k_io * iota`` with distinct iota axes (the overwhelmingly common
case) reads and writes are numpy basic slices (views, no index arrays); anything else —
strided patterns mixing axes, ``//``/``%``, indirect (``Dyn``) indices, masks — goes through
integer index arrays with exact bounds checks.
"""

from __future__ import annotations

import numpy as np

from ..errors import NkiIndexError
from ..ir import Access
from ..ir import expr as E

__all__ = ["CompiledAccess", "OOBError"]


class OOBError(NkiIndexError):
    """An access left its tensor at run time."""


def _linear(e):
    """``(const, [(var, k)], iota, k_io)`` if ``e`` has that form, else ``None``."""
    if not isinstance(e, E.Affine):
        return None
    vars_, io, k_io = [], None, 0
    for atom, k in e.terms:
        if isinstance(atom, E.Var):
            vars_.append((atom.name, k))
        elif isinstance(atom, E.Iota) and io is None:
            io, k_io = atom, k
        else:
            return None
    return e.const, tuple(vars_), io, k_io


class CompiledAccess:
    """Read/write one IR access of a tensor with a given declared shape."""

    __slots__ = ("tensor", "decl_shape", "grid", "shape", "dims", "fast", "order", "perm",
                 "slice_shape", "inv_perm", "sorted_shape", "exprs", "whole", "has_dyn", "loc",
                 "tname", "static_key", "size", "one_var", "plain")

    def __init__(self, acc: Access, decl_shape: tuple, loc: str | None = None):
        self.tensor = acc.tensor
        self.tname = acc.tensor
        self.decl_shape = tuple(decl_shape)
        self.loc = loc
        self.whole = acc.index is None
        index = acc.index if acc.index is not None else tuple(
            E.as_expr(E.Iota(s, d, len(decl_shape))) for d, s in enumerate(decl_shape))
        self.exprs = index
        self.grid = tuple(E.grid_shape(index)) if index else ()
        if acc.index is None:
            self.grid = tuple(decl_shape)
        self.shape = tuple(acc.shape) if acc.shape is not None else self.grid
        self.has_dyn = any(E.dyns(e) for e in index)
        self.fast = None
        self.static_key = None
        self.one_var = None
        self.plain = False
        self.size = int(np.prod(self.shape, dtype=np.int64))
        if not self.has_dyn:
            self._compile_fast(index)
            if self.fast and not any(d[1] for d in self.dims):
                try:  # why: no loop variable in the index: one key (and bounds check) for all
                    self.static_key = self._slices({})
                except OOBError:
                    self.static_key = None  # (reported with its message when it runs)
            elif self.fast:
                self.one_var = self._one_var_plan()

    def _one_var_plan(self):
        """``t[0:128, i:i+1]``: one dim moves with one loop variable, the others are fixed.

        Its key is the fixed part plus one computed entry (same bounds checks, same order:
        the fixed dims are checked here and only taken when they are in bounds).
        """
        moving = [d for d, dim in enumerate(self.dims) if dim[1]]
        if len(moving) != 1 or len(self.dims[moving[0]][1]) != 1:
            return None
        d = moving[0]
        c, ((v, kv),), size, k = self.dims[d]
        if size is not None and k <= 0:
            return None
        fixed = []
        for e, (ce, _, se, ke) in enumerate(self.dims):
            if e == d:
                continue
            last = ce + ke * ((se or 1) - 1)
            lo, hi = (ce, last) if ke >= 0 else (last, ce)
            if lo < 0 or hi >= self.decl_shape[e] or (se is not None and ke <= 0):
                return None
            fixed.append(ce if se is None else slice(ce, last + 1, ke))
        span = None if size is None else k * (size - 1)
        return d, c, v, kv, span, k, tuple(fixed[:d]), tuple(fixed[d:]), self.decl_shape[d]

    def _compile_fast(self, index):
        lins = [_linear(e) for e in index]
        if any(lin is None for lin in lins):
            return
        nd = len(self.grid)
        axes = [lin[2].axis + nd - lin[2].ndim for lin in lins if lin[2] is not None]
        if len(set(axes)) != len(axes):
            return
        dims = []
        for lin in lins:
            c, vars_, io, k = lin
            dims.append((c, vars_, None if io is None else io.size, k))
        self.dims = dims
        self.fast = True
        self.slice_shape = tuple(d[2] for d in dims if d[2] is not None)
        # grid axes in the order the sliced result has them
        self.order = axes
        srt = sorted(axes)
        self.perm = None if axes == srt else tuple(int(i) for i in np.argsort(axes))
        self.inv_perm = None if self.perm is None else tuple(int(i) for i in np.argsort(self.perm))
        self.sorted_shape = tuple(self.grid[a] for a in srt)
        # why: a value of the access's shape then assigns to the sliced region as it is
        self.plain = bool(self.slice_shape) and self.perm is None and \
            self.sorted_shape == self.shape

    # ------------------------------------------------------------------ helpers
    def _slices(self, env):
        if self.static_key is not None:
            return self.static_key
        if self.one_var is not None:
            d, c, v, kv, span, k, pre, post, n = self.one_var
            start = c + kv * env[v]
            if span is None:
                if not 0 <= start < n:
                    self._oob(d, start, start)
                return pre + (start,) + post
            last = start + span
            if start < 0 or last >= n:
                self._oob(d, start, last)
            return pre + (slice(start, last + 1, k),) + post
        key = []
        for d, (c, vars_, size, k) in enumerate(self.dims):
            start = c
            for v, kv in vars_:
                start += kv * env[v]
            if size is None:
                if not 0 <= start < self.decl_shape[d]:
                    self._oob(d, start, start)
                key.append(start)
                continue
            last = start + k * (size - 1)
            lo, hi = (start, last) if k >= 0 else (last, start)
            if lo < 0 or hi >= self.decl_shape[d]:
                self._oob(d, lo, hi)
            if k > 0:
                key.append(slice(start, last + 1, k))
            else:
                stop = last - 1
                key.append(slice(start, None if stop < 0 else stop, k))
        return tuple(key)

    def _oob(self, d, lo, hi):
        raise OOBError("err_tensor_access_out_of_bound",
                       f"index range [{lo}, {hi}] exceed dimension size of {self.decl_shape[d]} "
                       f"(dim {d} of '{self.tname}' at run time)", self.loc,
                       "guard the edge with mask=(index < size)")

    def index_arrays(self, env, dyn=None):
        """Per-dimension integer index arrays broadcast to the grid."""
        out = [np.asarray(E.evaluate(e, env, dyn), dtype=np.int64) for e in self.exprs]
        arrs = np.broadcast_arrays(*out) if out else []
        arrs = [np.broadcast_to(a, self.grid) for a in arrs]
        return arrs

    def check_bounds(self, arrs, sel=None):
        """Raise ``err_tensor_access_out_of_bound`` when an index (where ``sel``) is outside."""
        for d, a in enumerate(arrs):
            v = a if sel is None else a[sel]
            if v.size and (v.min() < 0 or v.max() >= self.decl_shape[d]):
                self._oob(d, int(v.min()), int(v.max()))

    # ------------------------------------------------------------------ read / write
    def read(self, data: np.ndarray, env, dyn=None) -> np.ndarray:
        """The accessed values, shaped like the access (a view when possible)."""
        if self.whole:
            return data if self.shape == data.shape else data.reshape(self.shape)
        if self.fast:
            v = data[self._slices(env)]
            if self.perm is not None:
                v = v.transpose(self.perm)
            return v if v.shape == self.shape else v.reshape(self.shape)
        arrs = self.index_arrays(env, dyn)
        self.check_bounds(arrs)
        return data[tuple(arrs)].reshape(self.shape)

    def view_for_write(self, data, env):
        """A writable view of the region (fast path only) and the value layout it expects."""
        return data[self._slices(env)]

    def write(self, data: np.ndarray, value, env, dyn=None) -> None:
        """Store ``value`` (broadcastable to the access shape) into the region."""
        # why: the write path runs once per instruction; numpy's broadcast_to/reshape cost
        # microseconds each even when the value already has the access's shape
        if value is True or value is False:
            self._write_scalar(data, value, env, dyn)  # why: a written-mark needs no broadcast
            return
        exact = type(value) is np.ndarray and value.shape == self.shape
        if self.whole:
            if exact and value.shape == data.shape:
                data[...] = value
            else:
                data[...] = np.broadcast_to(value, self.shape).reshape(data.shape)
            return
        if self.fast:
            if exact and self.plain:
                data[self._slices(env)] = value  # (what _put does for it)
            else:
                self._put(data, self._slices(env), value, exact)
            return
        arrs = self.index_arrays(env, dyn)
        self.check_bounds(arrs)
        data[tuple(arrs)] = np.broadcast_to(value, self.shape).reshape(self.grid)

    def write_marked(self, data, init, value, mark, env, dyn=None) -> None:
        """``write(data, value)`` and ``write(init, mark)``: one key for both on the fast path."""
        if self.fast and not self.whole:
            key = self._slices(env)
            if self.plain and type(value) is np.ndarray and value.shape == self.shape:
                data[key] = value  # (what _put does for it)
            else:
                self._put(data, key, value, type(value) is np.ndarray and
                          value.shape == self.shape)
            if mark is True or mark is False:
                init[key] = mark
            else:
                self._put(init, key, mark, type(mark) is np.ndarray and mark.shape == self.shape)
            return
        self.write(data, value, env, dyn)
        self.write(init, mark, env, dyn)

    def _put(self, data, key, value, exact):
        if not self.slice_shape:  # why: an all-integer index selects one element, no view
            data[key] = np.reshape(np.broadcast_to(value, self.shape), ())
            return
        v = value if exact else np.broadcast_to(value, self.shape)
        if v.shape != self.sorted_shape:
            v = v.reshape(self.sorted_shape)
        if self.inv_perm is not None:
            v = v.transpose(self.inv_perm)
        data[key] = v  # why: a basic-slice key assigns through a view, like region[...] = v

    def _write_scalar(self, data, value, env, dyn):
        # why: numpy broadcasts a Python scalar over any region in the assignment itself
        if self.whole:
            data[...] = value
        elif self.fast:
            data[self._slices(env)] = value
        else:
            arrs = self.index_arrays(env, dyn)
            self.check_bounds(arrs)
            data[tuple(arrs)] = value

    def write_masked(self, data, value, sel, env, dyn=None, skip_oob=False):
        """Store ``value`` only where the boolean grid ``sel`` holds."""
        arrs = self.index_arrays(env, dyn)
        sel = np.broadcast_to(sel, self.grid)
        if skip_oob:
            ok = np.ones(self.grid, dtype=bool)
            for d, a in enumerate(arrs):
                ok &= (a >= 0) & (a < self.decl_shape[d])
            sel = sel & ok
        else:
            self.check_bounds(arrs, sel)
        val = np.broadcast_to(value, self.shape).reshape(self.grid)
        data[tuple(a[sel] for a in arrs)] = val[sel]

    def read_masked(self, data, sel, env, dyn=None, fill=0):
        """Values where ``sel`` holds; ``fill`` elsewhere (masked-out lanes are never read)."""
        arrs = self.index_arrays(env, dyn)
        sel = np.broadcast_to(sel, self.grid)
        self.check_bounds(arrs, sel)
        out = np.full(self.grid, fill, dtype=data.dtype)
        out[sel] = data[tuple(a[sel] for a in arrs)]
        return out.reshape(self.shape)
