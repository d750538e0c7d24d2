"""The ``NkiTensor`` methods of NKI 0.2+: access patterns and view methods.

Installed on the shared :class:`~..trace.tensor.NkiTensor` (as ``lang/operators.py`` installs
the operators), so a view built with ``.ap()`` / ``.slice()`` / ``.select()`` is an ordinary
view: one index expression per declared dimension of the tensor it addresses. The access
pattern ``[[step, num], ...]`` reads ``flat[offset + sum(i_k * step_k)]`` of the storage; each
pair is mapped onto the declared dimension whose stride divides its step, and a pattern that
does not line up with the dimensions is expressed with ``//`` and ``%`` of the flat index.

In a current-API trace on-chip subscripts follow NKI 0.2+: an int never drops the partition
dim, and a free-dim int drops its dim unless the view would fall below 2-D.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..ir import expr as E
from ..trace.tensor import NkiTensor
from .kernel import current_trace

__all__ = ["install", "ap", "storage_strides"]

_ONCHIP = ("sbuf", "psum")
_LEGACY_GETITEM = NkiTensor.__getitem__
_LEGACY_DTYPE = NkiTensor.dtype


def storage_strides(shape) -> tuple:
    """Row-major element strides of a declared shape."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= int(s)
    return tuple(reversed(out))


def _origin(t: NkiTensor) -> list:
    """Per-dimension start expression of a view (its index with every iota at 0)."""
    decl = t.decl
    if t.index is None:
        return [E.const(0) for _ in decl.shape]
    zero = {io: E.const(0) for e in t.index for io in E.iotas(e)}
    return [E.substitute(e, zero) if zero else e for e in t.index]


def _offset_digits(offset: int, shape) -> list:
    digits = []
    for st in storage_strides(shape):
        digits.append(offset // st)
        offset %= st
    return digits


def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0,
       dtype=None):
    """A view through a raw access pattern ``[[step, num], ...]`` (outermost first).

    Args:
        self: the tensor (or view) whose storage the pattern addresses.
        pattern: ``[step, num]`` pairs; the result has shape ``(num_0, num_1, ...)``.
        offset: element offset into the storage (``None``: this view's own start).
        scalar_offset: a ``[1, 1]`` SBUF tile or a register (``rank_id()``, ``register_load``)
            whose value moves the start by that many rows of dim ``indirect_dim``.
        vector_offset: a ``[P, 1]`` SBUF index tile: row ``p`` of the result reads row
            ``vector_offset[p]`` of dim 0 (HBM gathers/scatters).
        indirect_dim: the dim ``scalar_offset`` steps along.
        dtype: reinterpret the storage as this dtype first (pattern in its elements).

    Returns:
        The view.
    """
    same = dtype is None or D.name_of(D.canonical(dtype)) == self.decl.dtype
    t = self if same else self.view(dtype)
    decl = t.decl
    shape = tuple(decl.shape)
    try:
        pairs = [(int(s), int(n)) for s, n in pattern]
    except (TypeError, ValueError):
        raise NkiError(None, f".ap(): pattern must be a list of [step, num] int pairs, got "
                       f"{pattern!r}", user_location()) from None
    if not pairs or any(n <= 0 for _, n in pairs):
        raise NkiError(None, f".ap(): pattern {pattern!r} needs at least one pair with num > 0",
                       user_location())
    nd = len(pairs)
    strides = storage_strides(shape)
    if offset is None:
        starts = _origin(t) if t is self else [E.const(0) for _ in shape]
    else:
        starts = [E.const(d) for d in _offset_digits(int(offset), shape)]
    index = _decompose(pairs, shape, strides, starts, nd)
    if index is None:
        flat = E.const(0)
        for st, s0 in zip(strides, starts, strict=True):
            flat = E.add(flat, E.mul(s0, st))
        for k, (step, num) in enumerate(pairs):
            flat = E.add(flat, E.mul(E.as_expr(E.Iota(num, k, nd)), step))
        index = [E.mod(E.floordiv(flat, st), int(d)) if i else E.floordiv(flat, st)
                 for i, (st, d) in enumerate(zip(strides, shape, strict=True))]
    if scalar_offset is not None:
        d = int(indirect_dim)
        index[d] = E.add(index[d], _scalar_offset(scalar_offset, nd))
    if vector_offset is not None:
        if int(indirect_dim) != 0 or scalar_offset is not None or nd != 2:
            raise NkiError(None, ".ap(): vector_offset needs indirect_dim=0, no scalar_offset "
                           "and a 2-D pattern [[row_step, P], [1, F]]", user_location())
        index[0] = _dyn(vector_offset, nd)
    return NkiTensor(t._ctx, t.name, tuple(index), tuple(n for _, n in pairs), t._scope)


def _scalar_offset(v, nd):
    """A ``scalar_offset=``: a register (its tile, or its trace-time int) or a ``[1, 1]`` tile."""
    from .registers import VirtualRegister
    if isinstance(v, VirtualRegister):
        if v.tile is None:
            return E.const(int(v))  # why: a register known while tracing (nccl.rank_id())
        v = v.tile
    return _dyn(v, nd)


def _dyn(tile, nd):
    if not isinstance(tile, NkiTensor):
        reg = getattr(tile, "__nki_index__", None)
        if reg is None:
            raise NkiError(None, f".ap(): a run-time offset must be an SBUF tile, got "
                           f"{type(tile).__name__}", user_location())
    return tile.__nki_index__()


def _decompose(pairs, shape, strides, starts, nd):
    """Per-dim index of an access pattern that lines up with the declared dims, else None."""
    index = list(starts)
    used: dict = {}
    for k, (step, num) in enumerate(pairs):
        io = E.as_expr(E.Iota(num, k, nd))
        if num == 1:
            continue
        if step == 0:
            # why: a broadcast pattern reads one element many times; iota // num is 0 on this
            # axis yet keeps the axis in the access grid
            index[0] = E.add(index[0], E.floordiv(io, num))
            continue
        for d, st in enumerate(strides):
            if step % st == 0 and (d == 0 or (step // st) * (num - 1) < shape[d]):
                break
        else:
            return None
        used[d] = used.get(d, 0) + (step // st) * (num - 1)
        if d and used[d] >= shape[d]:
            return None
        index[d] = E.add(index[d], E.mul(io, step // st))
    return index


def _slice(self, dim: int, start: int, end: int, step: int = 1):
    """A view of ``[start:end:step]`` along ``dim`` (``0 <= start < end <= shape[dim]``)."""
    key = [slice(None)] * self.ndim
    key[int(dim)] = slice(int(start), int(end), int(step))
    return _LEGACY_GETITEM(self, tuple(key))


def _select(self, dim: int, index):
    """The view at ``index`` along ``dim`` (dropping it; an on-chip dim 0 is kept at size 1)."""
    dim = int(dim)
    key = [slice(None)] * self.ndim
    if isinstance(index, NkiTensor):
        key[dim] = index
        return _LEGACY_GETITEM(self, tuple(key))
    key[dim] = int(index)
    if self.buffer in _ONCHIP and dim == 0:
        key[0] = slice(int(index), int(index) + 1)
    return _LEGACY_GETITEM(self, tuple(key))


def _getitem(self, key):
    if not current_trace() or self.buffer not in _ONCHIP or self.is_index_tensor:
        return _LEGACY_GETITEM(self, key)
    items = list(key) if isinstance(key, tuple) else [key]
    if any(k is Ellipsis for k in items):
        pos = next(i for i, k in enumerate(items) if k is Ellipsis)
        items[pos:pos + 1] = [slice(None)] * max(self.ndim - (len(items) - 1), 0)
    items += [slice(None)] * (self.ndim - len(items))

    def is_int(k):
        return isinstance(k, (int, np.integer)) and not isinstance(k, bool)

    if items and is_int(items[0]):
        items[0] = slice(int(items[0]), int(items[0]) + 1)  # why: dim 0 is never dropped
    kept = sum(1 for k in items if not is_int(k))
    for d in range(len(items) - 1, 0, -1):
        if kept >= 2:
            break
        if is_int(items[d]):
            items[d] = slice(int(items[d]), int(items[d]) + 1)
            kept += 1
    return _LEGACY_GETITEM(self, tuple(items))


def _get_pattern(self):
    """The ``[[step, num], ...]`` pattern of a view whose index lines up with the storage."""
    strides = storage_strides(self.decl.shape)
    if self.index is None:
        return [[st, int(n)] for st, n in zip(strides, self.decl.shape, strict=True)]
    out = [[0, int(n)] for n in self.shape]
    for d, e in enumerate(self.index):
        for atom, k in e.terms:
            if isinstance(atom, E.Iota):
                out[atom.axis + len(self.shape) - atom.ndim][0] += k * strides[d]
    return out


def _permute(self, dims):
    """A view with its dims reordered (on-chip: ``dims[0] == 0``)."""
    dims = tuple(int(d) for d in dims)
    if sorted(dims) != list(range(self.ndim)):
        raise NkiError(None, f"permute{dims}: not a permutation of {self.ndim} dims",
                       user_location())
    if self.buffer in _ONCHIP and dims[0] != 0:
        raise NkiError(None, f"permute{dims}: an on-chip tensor keeps its partition dim first",
                       user_location())
    pat = _get_pattern(self)
    return ap(self, [pat[d] for d in dims])


class DtypeName(str):
    """A dtype as NKI 0.2+ spells it (``"float8_e4m3"``), equal to its numpy dtype too.

    Kernels look dtypes up in dicts keyed by ``nl.<dtype>`` names and compare them with
    ``==``; both work, and numpy comparisons (``t.dtype == np.float32``) still hold.
    """

    __slots__ = ()

    def __eq__(self, other):
        if isinstance(other, str):
            return str.__eq__(self, other)
        try:
            return D.name_of(D.canonical(other)) == str(self)
        except (TypeError, ValueError, KeyError):
            return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = str.__hash__

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return D.itemsize(str(self))


def _dtype(self):
    legacy = _LEGACY_DTYPE.fget(self)
    return DtypeName(D.name_of(legacy)) if current_trace() else legacy


def _install_properties(cls):
    cls.dtype = property(_dtype, doc="Element dtype (a dtype name in a current-API trace).")
    cls.size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)),
                        doc="Number of elements of the view.")
    cls.strides = property(lambda self: tuple(p[0] for p in _get_pattern(self)),
                           doc="Element strides of the view into its storage.")


def install(cls=NkiTensor) -> None:
    """Put the NKI 0.2+ view methods and subscript rule on ``cls``."""
    cls.ap = ap
    cls.slice = _slice
    cls.select = _select
    cls.permute = _permute
    cls.get_pattern = _get_pattern
    cls.__getitem__ = _getitem
    _install_properties(cls)
