"""The compiled simulator's memory accesses and written-mask ("taint") helpers.

:class:`JaxAccess` reads and writes one IR access: (dynamic) slices when the lowering proves
the indices in range, checked gathers/scatters (returning an out-of-range flag) otherwise.
``taint_lanes`` / ``taint_rows`` carry the "written" masks through lane-wise and row-wise
instructions. What an instruction computes is not here (see ``semantics/``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..ir import Access
from ..ir import expr as E
from ..semantics.numerics_jax import is_traced
from ..semantics.registry import props
from .access import CompiledAccess

__all__ = ["JaxAccess", "is_traced", "xp", "fits", "fit", "lanewise", "taint_lanes",
           "taint_rows", "rowwise"]


# ----------------------------------------------------------------------------- memory access
def xp(*xs):
    """``jax.numpy`` when any argument is a JAX value, else ``numpy``."""
    if any(is_traced(x) for x in xs):
        import jax.numpy as jnp
        return jnp
    return np


# ----------------------------------------------------------------------------- written-masks
def lanewise(inst) -> bool:
    """Whether each output element depends only on the same element of the inputs."""
    info = props(inst.op)
    return info is not None and info.lanewise


def rowwise(inst) -> bool:
    """Whether the op reduces along free axes only (a result row is written when its row was)."""
    info = props(inst.op)
    return inst.attr("axis") is not None and info is not None and info.rowwise


def taint_rows(inst, taints, shape):
    """Written-mask of a reduction's result: a row is written when all its inputs were."""
    axes = tuple(inst.attr("axis"))
    keep = bool(inst.attr("keepdims", False)) or inst.op in ("softmax", "rms_norm")
    t = taints[0]
    for other in taints[1:]:
        if fits(other.shape, t.shape):
            t = t & jnp.broadcast_to(other, t.shape)
        else:
            t = t & jnp.all(other)
    row = jnp.all(t, axis=axes, keepdims=keep) if t.ndim > max(axes) else t
    return jnp.broadcast_to(row, shape) if keep else row.reshape(shape)


def taint_lanes(taints, shape):
    """Written-mask of a lane-wise result: the AND of the inputs' masks."""
    out = jnp.ones(shape, bool)
    for t in taints:
        if 0 < t.ndim < len(shape):
            t = t.reshape(t.shape + (1,) * (len(shape) - t.ndim))
        out = out & (jnp.broadcast_to(t, shape) if fits(t.shape, shape) else jnp.all(t))
    return out


# ----------------------------------------------------------------------------- accesses
class JaxAccess:
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
        if any(is_traced(lo) for lo in los):
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
        lib = xp(*xs)
        if lib is np:
            return [np.broadcast_to(np.asarray(a, np.int64), ca.grid) for a in xs]
        return [lib.broadcast_to(lib.asarray(a, lib.int32), ca.grid) for a in xs]

    def _inb(self, arrs):
        lib = xp(*arrs)
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

    def static_block(self, value, lw):
        """``(starts, block)`` of a write of one in-range, unit-stride block at static offsets.

        ``block`` is ``value`` laid out as that block; ``None`` for any other write.
        """
        ca = self.ca
        if ca.whole:
            return (0,) * len(ca.decl_shape), jnp.broadcast_to(value, ca.shape).reshape(
                ca.decl_shape)
        if not ca.fast or not self.in_range(lw.ranges):
            return None
        reg = self._region(lw.env)
        if any(is_traced(r[0]) or r[2] != 1 or r[3] for r in reg):
            return None
        return tuple(int(r[0]) for r in reg), self._to_region(value, reg, False)

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
            if any(is_traced(lo) for lo in los):
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


def fits(a, b) -> bool:
    """Whether shape ``a`` broadcasts to shape ``b``."""
    try:
        return np.broadcast_shapes(tuple(a), tuple(b)) == tuple(b)
    except ValueError:
        return False


def fit(sel, grid):
    """A mask broadcast to an access grid (``None`` when it does not broadcast)."""
    if not fits(np.shape(sel), grid):
        return None
    lib = xp(sel)
    return lib.broadcast_to(sel, grid)
