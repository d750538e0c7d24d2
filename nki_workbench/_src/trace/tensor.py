"""``nki.tensor``: the frontend object for every NKI tensor, tile and view during a trace.

A tensor is a declaration (name, shape, dtype, buffer) plus, for views, one index expression
per declared dimension. Subscripts compose views symbolically (basic slicing, ``nl.ds``,
arange/mgrid advanced indexing, indirect indices from SBUF tiles); operators call the matching
``nl`` function; assignment writes through :func:`.emit.assign`.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, user_frame, user_location
from ..ir import Access
from ..ir import expr as E
from . import context as C
from .index import DynSlice, IndexExpr

__all__ = ["NkiTensor"]


class NkiTensor:
    """An NKI tensor (HBM tensor, SBUF/PSUM tile, or a view of one) inside a kernel trace.

    Attributes:
        shape: tuple of dimension sizes of this view.
        dtype: numpy dtype (``ml_dtypes`` for bf16/fp8).
        ndim: number of dimensions.
        itemsize: bytes per element.
        buffer: ``"hbm"``, ``"shared_hbm"``, ``"sbuf"`` or ``"psum"``.
    """

    __slots__ = ("_ctx", "_name", "_index", "_shape", "_scope", "_prod", "_inplace", "_dead",
                 "_fresh", "_is_index_tensor", "_mutable", "_iota_map")
    __array_priority__ = 1000  # why: `np.float32(2) * tile` must call our __rmul__

    def __init__(self, ctx, name: str, index=None, shape=None, scope=None):
        self._ctx = ctx
        self._name = name
        self._index = index
        self._shape = tuple(shape) if shape is not None else tuple(ctx.decls[name].shape)
        self._scope = ctx.scope if scope is None else scope
        self._prod = None
        self._inplace = False
        self._dead = False
        self._fresh = False
        self._is_index_tensor = False
        self._mutable = False
        self._iota_map = None  # user iota -> its axis in this view's grid (advanced indexing)

    # ------------------------------------------------------------------ properties
    @property
    def _decl(self):
        return self._ctx.decls[self._name]

    @property
    def shape(self) -> tuple:
        """Dimension sizes of this view."""
        return self._shape

    @property
    def dtype(self):
        """Element dtype."""
        return D.from_name(self._decl.dtype)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return D.itemsize(self.dtype)

    @property
    def buffer(self) -> str:
        """Memory holding the tensor."""
        return self._decl.buffer

    @property
    def name(self) -> str:
        """IR name of the underlying tensor."""
        return self._name

    # read-only face for the front ends (nl, nisa, collectives): no reach-ins to the slots
    @property
    def decl(self):
        """The IR declaration (:class:`~nki_workbench.ir.TensorDecl`) of the tensor viewed."""
        return self._decl

    @property
    def index(self):
        """One index expression per declared dimension, or ``None`` for the whole tensor."""
        return self._index

    @property
    def is_index_tensor(self) -> bool:
        """Whether this is an index expression (``nl.arange`` grid), not data."""
        return self._is_index_tensor

    def access(self) -> Access:
        """The IR :class:`~nki_workbench.ir.Access` this view reads or writes."""
        return self._access()

    def check_live(self, api: str) -> None:
        """Raise if the tensor may not be used here (other trace, out of scope, fused away)."""
        self._check_live(api)

    def mark_fresh(self) -> None:
        """Mark a just-created result tile that an assignment may write straight into."""
        self._fresh = True

    def __repr__(self):
        d = self._decl
        view = "" if self._index is None else " view"
        return f"<nki.tensor {self._name}{view} {d.buffer} {d.dtype}{list(self._shape)}>"

    # ------------------------------------------------------------------ IR plumbing
    def _access(self) -> Access:
        if self._index is None:
            return Access(self._name, None, None)
        grid = E.grid_shape(self._index)
        return Access(self._name, self._index, None if grid == self._shape else self._shape)

    def _check_live(self, api: str):
        if self._dead:
            raise NkiError(None, f"internal: tensor '{self._name}' was fused into an assignment "
                           "and cannot be used again", user_location())
        ctx = C.current()
        if ctx is not self._ctx:
            raise NkiError("err_nki_api_outside_of_nki_kernel",
                           f"tensor '{self._name}' belongs to another kernel trace",
                           user_location())
        if ctx.scope[:len(self._scope)] != self._scope:
            raise NkiError("err_local_variable_used_out_of_scope",
                           f"tensor '{self._name}' was created inside a loop body and is used "
                           "outside of it", user_location(),
                           "declare it before the loop (e.g. nl.ndarray/nl.zeros) and write it "
                           "with t[...] = value inside the loop")

    def _check_tile(self, api: str, arg: str):
        d = self._decl
        if d.par_dim == 0:
            return
        if self._index is None:
            raise NkiError("err_failed_to_infer_tile_from_local_tensor",
                           f"operand '{arg}' of '{api}' is tensor '{d.name}' whose partition "
                           f"dim is dim {d.par_dim}, not the first", user_location(),
                           f"index the block dims first, e.g. {d.name}[i]")
        axes = {io.axis for io in E.iotas(self._index[d.par_dim])}
        if axes and axes != {0}:
            raise NkiError("err_failed_to_infer_tile_from_local_tensor",
                           f"operand '{arg}' of '{api}' does not have the partition dim of "
                           f"'{d.name}' first", user_location(), f"index the block dims of "
                           f"{d.name} with integers or loop variables")

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, key):
        return _subscript(self, key)

    def __iter__(self):
        raise TypeError("NKI tensors are not iterable; loop over indices with nl.affine_range")

    def __len__(self):
        return self._shape[0] if self._shape else 0

    def __array__(self, *args, **kwargs):
        raise NkiError(None, f"tensor '{self._name}' is symbolic inside a kernel and has no "
                       "numpy value", user_location(),
                       "use nl.device_print to look at values during simulation")

    def __bool__(self):
        if self._decl.kind in ("input", "inout") and self._index is None:
            return True  # why: `x if imm else None` on a kernel argument tests presence in NKI
        from .source import condition_source
        kind, text = condition_source(user_frame())
        if kind != "while" and self._ctx.attrs.get("api") == "nki":
            return True  # why: NKI 0.2+ kernels are Python: `cfg.bias and ...` tests presence
        what = f"'{text}' (a tile)" if text else f"tensor '{self._name}'"
        if kind == "while":
            raise NkiError("err_while_loop_requires_unconditional_entry",
                           f"'while {text}:' tests a tensor before the first iteration; NKI "
                           "loops on run-time values only in the do-while form (the body "
                           "runs once before the condition is read)", user_location(),
                           "loop with nl.sequential_range and a static trip count, masking "
                           "the iterations that should not run")
        raise NkiError("err_ambiguous_tensor_truth_value",
                       f"the truth value of {what} is ambiguous: a tensor has no single "
                       "Python truth value while tracing", user_location(),
                       "use ~, &, | for element-wise logic, mask= or nl.where for conditions, "
                       "and 'is not None' to test presence")

    __hash__ = object.__hash__

    # ------------------------------------------------------------------ methods (nki.tensor API)
    def reshape(self, shape) -> NkiTensor:
        """A view with another shape (same elements, no copy)."""
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if int(np.prod(shape)) != int(np.prod(self._shape)):
            raise NkiError(None, f"cannot reshape tensor '{self._name}' of shape "
                           f"{list(self._shape)} into {list(shape)}", user_location())
        if self._index is not None:
            if [s for s in shape if s != 1] == [s for s in self._shape if s != 1]:
                t = NkiTensor(self._ctx, self._name, self._index, shape, self._scope)
                return t
            raise NkiError(None, "reshape of an indexed view is only possible by adding or "
                           "removing unit dims", user_location(), "reshape the whole tensor")
        ctx = C.require("reshape")
        d = self._decl
        decl = ctx.declare(shape, d.dtype, d.buffer, kind="local", name=ctx.assigned_name() or
                           f"{d.name}_r", base=d.name, view="reshape")
        return NkiTensor(ctx, decl.name, scope=self._scope)

    def view(self, dtype) -> NkiTensor:
        """The same bytes reinterpreted as ``dtype`` (no copy)."""
        new = D.canonical(dtype)
        if self._index is not None:
            raise NkiError(None, "view(dtype) applies to a whole tensor", user_location())
        old = D.itemsize(self.dtype)
        size = D.itemsize(new)
        last = self._shape[-1] * old
        if last % size:
            raise NkiError(None, f"cannot view {D.name_of(self.dtype)} tensor '{self._name}' as "
                           f"{D.name_of(new)}: last dim bytes {last} not divisible by {size}",
                           user_location())
        ctx = C.require("view")
        d = self._decl
        decl = ctx.declare(self._shape[:-1] + (last // size,), D.name_of(new), d.buffer,
                           name=ctx.assigned_name() or f"{d.name}_v", base=d.name,
                           view="bitcast", par_dim=d.par_dim)
        return NkiTensor(ctx, decl.name, scope=self._scope)

    def expand_dims(self, axis) -> NkiTensor:
        """Insert size-1 dims at ``axis`` (int or tuple)."""
        axes = axis if isinstance(axis, (tuple, list)) else (axis,)
        nd = self.ndim + len(axes)
        axes = sorted(a % nd for a in axes)
        shape = list(self._shape)
        for a in axes:
            shape.insert(a, 1)
        return self.reshape(tuple(shape))

    def assert_shape(self, shape) -> NkiTensor:
        """Check the shape and return self."""
        if tuple(shape) != self._shape:
            raise NkiError("err_annotation_shape_mismatch", f"tensor '{self._name}' has shape "
                           f"{list(self._shape)}, expected {list(shape)}", user_location())
        return self

    # Arithmetic, comparison and in-place operators, ``__setitem__``, ``astype`` and
    # ``broadcast_to`` are installed by the front end (``nki_workbench._src.lang.operators``),
    # as jax.numpy installs array methods on tracers: they are ``nl`` functions.

    def inplace_view(self) -> NkiTensor:
        """A new handle on this view, marked as the result of an in-place update (``t += x``).

        Python re-assigns what ``__iadd__`` returns (``t[i] = <result>``); the mark lets that
        assignment recognise it has already been written through.
        """
        view = NkiTensor(self._ctx, self._name, self._index, self._shape, self._scope)
        view._inplace = True
        return view

    def __nki_index__(self):
        """The run-time index expression this SBUF tile stands for (``offsets[0, i] + iy``)."""
        return _dyn_expr(self)


# ----------------------------------------------------------------------------- subscripts
def _expand(key, ndim):
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        pos = next(i for i, k in enumerate(key) if k is Ellipsis)
        fill = ndim - (len(key) - 1)
        key = key[:pos] + (slice(None),) * max(fill, 0) + key[pos + 1:]
    return key


def _slice_parts(item, size, dim, t):
    """(start expr, count, step) of a basic slice item over a dim of ``size``."""
    if isinstance(item, DynSlice):
        return _index_operand(item.start, "nl.ds") if isinstance(item.start, IndexExpr) \
            else E.const(int(item.start)), item.size, 1
    step = 1 if item.step is None else int(item.step)
    if step == 0:
        raise NkiError(None, "slice step cannot be zero", user_location())
    start, stop = item.start, item.stop
    if isinstance(start, IndexExpr) or isinstance(stop, IndexExpr):
        s = E.const(0) if start is None else _int_expr(start)
        e = E.const(size) if stop is None else _int_expr(stop)
        n = E.const_value(E.sub(e, s))
        if n is None:
            raise NkiError(None, f"slice {E.to_str(s)}:{E.to_str(e)} of '{t._name}' has a "
                           "symbolic length", user_location(),
                           "slices must have a compile-time size; use nl.ds(start, size)")
        count = max(0, -(-n // step)) if step > 0 else max(0, -(-n // step))
        return s, count, step
    # why: NKI reports out-of-range slices as errors instead of clipping them like numpy
    s = 0 if start is None else int(start)
    e = (size if step > 0 else -1) if stop is None else int(stop)
    s = s + size if s < 0 else s
    if stop is not None and e < 0:
        e += size
    count = max(0, -(-(e - s) // step))
    return E.const(s), count, step


def _int_expr(x):
    return _index_operand(x, "subscript") if isinstance(x, IndexExpr) else E.const(int(x))


def _index_operand(x: IndexExpr, api: str):
    # why: an index expression is only meaningful inside a trace (same check as emit.operand)
    C.require(api)
    return x.expr


def _classify(item):
    from .tensor import NkiTensor as T
    if isinstance(item, (slice, DynSlice)):
        return "slice"
    if isinstance(item, T):
        return "dyn"
    if isinstance(item, IndexExpr):
        if isinstance(item.expr, E.Pred):
            raise NkiError(None, "a comparison cannot be used as an index", user_location(),
                           "pass it as mask=... instead")
        return "adv" if (E.iotas(item.expr) or E.dyns(item.expr)) else "int"
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        return "int"
    if item is None:
        raise NkiError(None, "None (new axis) is not supported in NKI tensor subscripts",
                       user_location(), "use t.expand_dims(axis)")
    raise NkiError(None, f"unsupported index {item!r} of type {type(item).__name__}",
                   user_location())


def _dyn_expr(tile, t=None):
    """An indirect index from an SBUF tile (or a view of it).

    Run-time indices into on-chip tensors are refused where they are used (``emit.emit``),
    since ``nisa.tensor_copy_dynamic_src/dst`` accept them.
    """
    ctx = C.require("indirect index")
    tile._check_live("indirect index")
    if tile.buffer != "sbuf":
        raise NkiError("err_unsupported_memory", f"indirect indices must live in SBUF, got "
                       f"'{tile._name}' in {tile.buffer}", user_location())
    ctx.note_read(tile._name)
    acc = tile._access()
    return E.as_expr(E.Dyn(acc.tensor, acc.index, tuple(tile.shape)))


def _subscript(t: NkiTensor, key) -> NkiTensor:
    shape = t._shape
    key = _expand(key, len(shape))
    if len(key) > len(shape):
        raise NkiError("err_tensor_access_out_of_bound", f"too many indices ({len(key)}) for "
                       f"tensor '{t._name}' of shape {list(shape)}", user_location())
    kinds = [_classify(k) for k in key]
    advanced = any(k in ("adv", "dyn") for k in kinds)
    if advanced and "slice" in kinds:
        raise NkiError("err_unsupported_mixing_basic_advanced_tensor_indexing",
                       f"subscript of '{t._name}' mixes slices and arange/mgrid indices",
                       user_location(), "use nl.arange/nl.mgrid for every dimension, or "
                       "slices/nl.ds for every dimension")
    new = []  # expression per view dim
    if advanced:
        exprs = []
        for item, kind in zip(key, kinds, strict=True):
            if kind == "dyn":
                exprs.append(_dyn_expr(item, t))
            elif kind == "adv":
                exprs.append(item.expr)
            else:
                exprs.append(_int_expr(item))
        for e in exprs:
            if any(io.ndim == 1 for io in E.iotas(e)):
                raise NkiError("err_1d_arange_not_supported",
                               f"tensor '{t._name}' indexed with a 1-D nl.arange",
                               user_location(), "add an axis: nl.arange(n)[:, None] or "
                               "nl.arange(n)[None, :]")
        ndim = max([len(E.grid_shape([e])) for e in exprs] + [0])
        extra = len(shape) - len(exprs)
        out_nd = ndim + extra
        iota_map = {}
        for e in exprs:
            for io in E.iotas(e):
                # why: a mask written with the same aranges must land on the same grid axes
                iota_map[io] = E.as_expr(E.Iota(io.size, io.axis + ndim - io.ndim, out_nd))
        for e in exprs:
            e = E.align_iotas(e, ndim)
            e = _pad_iotas(e, out_nd) if extra else e
            e = _align_dyn(e, out_nd)
            new.append(e)
        for j in range(extra):
            new.append(E.as_expr(E.Iota(shape[len(exprs) + j], ndim + j, out_nd)))
        for d, e in enumerate(new):
            if E.dyns(e):
                grid = E.grid_shape([e])
                if any(s != 1 for s in grid[1:]):
                    raise NkiError("err_indirect_indices_free_dim",
                                   f"indirect index on dim {d} of '{t._name}' varies along a "
                                   "free dimension", user_location(),
                                   "indirect indices select partitions (rows): use an [N, 1] "
                                   "index tile")
        _check_dyn_after_partition(t, new)
        out_shape = E.grid_shape(new) if new else ()
        if len(out_shape) < out_nd:
            out_shape = (1,) * (out_nd - len(out_shape)) + tuple(out_shape)
    else:
        key = key + (slice(None),) * (len(shape) - len(key))
        n_out = sum(1 for k in kinds if k == "slice") + (len(shape) - len(kinds))
        axis = 0
        out_shape = []
        for d, item in enumerate(key):
            if isinstance(item, (slice, DynSlice)):
                start, count, step = _slice_parts(item, shape[d], d, t)
                io = E.Iota(count, axis, n_out)
                new.append(E.add(E.mul(io, step), start))
                out_shape.append(count)
                axis += 1
            else:
                e = _int_expr(item)
                c = E.const_value(e)
                if c is not None and c < 0:
                    e = E.const(c + shape[d])
                new.append(e)
        out_shape = tuple(out_shape)
        if len(out_shape) == 1 and len(shape) == 2 and t.buffer in ("sbuf", "psum") \
                and not isinstance(key[-1], (slice, DynSlice)):
            # why: as in NKI, a tile keeps a free dimension: t[:, j] of a [P, F] tile is
            # [P, 1] (the attention kernels then index it again with [:, 0])
            out_shape = out_shape + (1,)
    if t._index is None:
        index = tuple(new)
    else:
        old_nd = len(shape)
        mapping = {}
        for j, e in enumerate(new):
            mapping[E.Iota(shape[j], j, old_nd)] = e
        index = tuple(E.substitute(e, mapping) for e in _normalize_view(t._index, shape))
    view = NkiTensor(t._ctx, t._name, index, tuple(out_shape), t._scope)
    view._is_index_tensor = t._is_index_tensor
    if advanced and any(k != v for k, v in ((E.as_expr(k), v) for k, v in iota_map.items())):
        view._iota_map = iota_map
    return view


def _normalize_view(index, shape):
    """Re-express a view's index so its iotas live in the view's own ``shape`` grid."""
    grid = E.grid_shape(index)
    nd = len(shape)
    if tuple(grid) == tuple(shape) and all(io.ndim == nd for e in index for io in E.iotas(e)):
        return index
    # why: after reshape (unit dims added/removed) grid axes and view axes differ; match the
    # non-unit axes in order, and unit-size iotas are the constant 0.
    g_axes = [a for a, s in enumerate(grid) if s != 1]
    s_axes = [a for a, s in enumerate(shape) if s != 1]
    mapping = {}
    for e in index:
        for io in E.iotas(e):
            if io.size == 1:
                mapping[io] = E.const(0)
            else:
                ga = io.axis + len(grid) - io.ndim
                mapping[io] = E.as_expr(E.Iota(io.size, s_axes[g_axes.index(ga)], nd))
    return tuple(E.substitute(e, mapping) for e in index)


def _check_dyn_after_partition(t, exprs):
    """A run-time index on a dim after the partition dim is a free-dim indirect index.

    The partition dim of an HBM access is the first dim whose index varies along the access
    grid's first axis; the dims before it are block dims. NKI's DMA takes indirect indices on
    those only (``a[i_p, idx[i_p, 0]]`` gathers within a row: not expressible).
    """
    if t.buffer in ("sbuf", "psum"):
        return  # why: on-chip run-time indices have their own rule (DYNAMIC_ONCHIP_OPS)
    part = next((d for d, e in enumerate(exprs) if (E.grid_shape([e]) or (1,))[0] > 1), None)
    if part is None:
        return
    for d, e in enumerate(exprs[part + 1:], start=part + 1):
        if E.dyns(e):
            raise NkiError("err_indirect_indices_free_dim",
                           f"run-time (indirect) index on dim {d} of '{t._name}', a free "
                           f"dimension (dim {part} is the partition dimension of this access)",
                           user_location(), "indirect indices select rows (the partition dim or "
                           "the block dims before it); load whole rows and select on chip")


def _pad_iotas(e, out_nd):
    mapping = {}
    for io in E.iotas(e):
        mapping[io] = E.as_expr(E.Iota(io.size, io.axis, out_nd))
    return E.substitute(e, mapping) if mapping else e


def _align_dyn(e, ndim):
    mapping = {}
    for d in E.dyns(e):
        if len(d.shape) < ndim:
            idx = None if d.index is None else tuple(E.align_iotas(i, ndim) for i in d.index)
            mapping[d] = E.as_expr(E.Dyn(d.tensor, idx, (1,) * (ndim - len(d.shape)) +
                                         tuple(d.shape)))
    if not mapping:
        return e
    return _subst_dyn(e, mapping)


def _subst_dyn(e, mapping):
    if isinstance(e, E.Affine):
        out = E.const(e.const)
        for atom, k in e.terms:
            a = mapping.get(atom, E.as_expr(atom))
            out = E.add(out, E.mul(a, k))
        return out
    return e
