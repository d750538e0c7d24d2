"""Trace side of the collectives: validate a call, emit one IR instruction, mark the kernel.

:func:`emit_collective` is what every ``nki.nccl`` / ``nki.distributed`` function ends in. It
checks what can be checked at trace time (operands are NKI tensors, source/destination counts
and shapes agree with the kind, dims and ranks are in range, replica groups are well formed),
then appends ``<kind>_cc`` / ``<kind>_cc_raw`` (see :mod:`.kinds`) and sets the trace context's
``has_collectives`` flag, which the tracer copies into the kernel attributes and the encoder
into the backend_config.
"""

from __future__ import annotations

from ..errors import NkiError, user_location
from ..lang.alu import REDUCIBLE, alu_name
from ..trace import context as C
from ..trace import emit as M
from ..trace.tensor import NkiTensor
from .kinds import KINDS, normalize_groups, opcode

__all__ = ["emit_collective", "tensor_list", "reduce_op", "any_op", "int_arg"]


def tensor_list(x, api: str, arg: str) -> list:
    """``x`` (a tensor or a list/tuple of tensors) as a non-empty list of NKI tensors."""
    items = list(x) if isinstance(x, (list, tuple)) else [x]
    if not items:
        raise NkiError("wb_collective_operands", f"{api}: {arg} is empty", user_location(),
                       f"pass at least one tensor in {arg}=[...]")
    for i, t in enumerate(items):
        if not isinstance(t, NkiTensor):
            raise NkiError("wb_collective_operands", f"{api}: {arg}[{i}] must be an NKI tensor "
                           f"(HBM or SBUF), got {type(t).__name__}", user_location())
        if t.is_index_tensor:
            raise NkiError("wb_collective_operands", f"{api}: {arg}[{i}] is an index "
                           "expression, not a tensor", user_location(),
                           "materialise indices with nisa.iota first")
    return items


def int_arg(v, name: str) -> int:
    """An integer argument of a collective (``wb_collective_args`` for anything else)."""
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise NkiError("wb_collective_args", f"{name} must be an integer, got {v!r}",
                       user_location())
    return int(v)


def reduce_op(op, api: str) -> str:
    """Canonical name of a reduction operator (``np.add`` -> ``'add'``)."""
    name = alu_name(op, api)
    if name not in REDUCIBLE:
        raise NkiError("wb_collective_op", f"{api}: {name} is not a reduction operator",
                       user_location(), "use np.add, np.maximum, np.minimum, np.multiply, or a "
                                        "bitwise/logical and/or/xor")
    return name


def any_op(op, api: str) -> str | None:
    """Name of an operator that is recorded but does not reduce (``None`` stays ``None``)."""
    return None if op is None else alu_name(op, api)


def _dim(d, ndim: int, api: str, arg: str) -> int:
    if isinstance(d, bool) or not hasattr(d, "__index__"):
        raise NkiError("wb_collective_dim", f"{api}: {arg} must be an integer, got {d!r}",
                       user_location())
    d = int(d)
    if not -ndim <= d < ndim:
        raise NkiError("wb_collective_dim", f"{api}: {arg}={d} is out of range for "
                       f"{ndim}-d tensors", user_location())
    return d % ndim


def _sizes(groups) -> set:
    return {len(g) for g in groups} if groups else set()


def _shape_error(api, i, src, dst, what):
    return NkiError("wb_collective_shape",
                    f"{api}: srcs[{i}] has shape {list(src.shape)} and dsts[{i}] has shape "
                    f"{list(dst.shape)}: {what}", user_location())


def _check_pairs(kind, srcs, dsts, attrs, groups, api):
    """Per kind, source/destination shape rules that hold for every group size."""
    sizes = _sizes(groups)
    if len(sizes) > 1 and kind in ("all_gather", "reduce_scatter", "all_to_all"):
        raise NkiError("wb_collective_replica_groups",
                       f"{api}: replica groups of different sizes {sorted(sizes)} would need "
                       "different destination shapes", user_location())
    n = next(iter(sizes)) if len(sizes) == 1 else None
    for i, (s, d) in enumerate(zip(srcs, dsts, strict=True)):
        ss, ds = tuple(s.shape), tuple(d.shape)
        if kind in ("all_gather", "reduce_scatter", "all_to_all"):
            if len(ss) != len(ds):
                raise _shape_error(api, i, s, d, "ranks differ")
        if kind == "all_gather":
            dim = attrs["dim"] = _dim(attrs["dim"], len(ss), api, "all_gather_dim")
            same = all(a == b for k, (a, b) in enumerate(zip(ss, ds, strict=True)) if k != dim)
            if not same or ss[dim] == 0 or ds[dim] % ss[dim] or (n and ds[dim] != n * ss[dim]):
                want = f"{n} x {ss[dim]}" if n else f"a multiple of {ss[dim]}"
                raise _shape_error(api, i, s, d, f"dim {dim} of the destination must be {want} "
                                   "and the other dims equal")
        elif kind == "reduce_scatter":
            dim = attrs["dim"] = _dim(attrs["dim"], len(ss), api, "reduce_scatter_dim")
            same = all(a == b for k, (a, b) in enumerate(zip(ss, ds, strict=True)) if k != dim)
            if not same or ds[dim] == 0 or ss[dim] % ds[dim] or (n and ss[dim] != n * ds[dim]):
                want = f"{n} x {ds[dim]}" if n else f"a multiple of {ds[dim]}"
                raise _shape_error(api, i, s, d, f"dim {dim} of the source must be {want} "
                                   "and the other dims equal")
        elif kind == "all_to_all":
            sd = attrs["split_dim"] = _dim(attrs["split_dim"], len(ss), api, "split_dim")
            cd = attrs["concat_dim"] = _dim(attrs["concat_dim"], len(ss), api, "concat_dim")
            if sd == cd:
                ok = ss == ds
            else:
                f = ds[cd] // ss[cd] if ss[cd] else 0
                ok = (f > 0 and ds[cd] == f * ss[cd] and ss[sd] == f * ds[sd]
                      and all(a == b for k, (a, b) in enumerate(zip(ss, ds, strict=True))
                              if k not in (sd, cd))
                      and (n is None or f == n))
            if not ok:
                raise _shape_error(api, i, s, d, f"the destination must be the source split "
                                   f"by the group size along dim {sd} and concatenated along "
                                   f"dim {cd}")
        elif ss != ds:
            raise _shape_error(api, i, s, d, "they must be equal")


def emit_collective(kind: str, api: str, *, srcs=None, dsts=None, attrs=None,
                    replica_groups=None, dtype=None, mask=None):
    """Validate and append one collective instruction; sets ``has_collectives``.

    Args:
        kind: a key of :data:`.kinds.KINDS`.
        api: the user-facing name for messages (``nccl.all_reduce``...).
        srcs: source tensors (none for ``recv``).
        dsts: destination tensors (none for ``send``).
        attrs: kind-specific attributes (IR literals).
        replica_groups: explicit groups (``*_cc_raw``) or ``None`` (launch topology, ``*_cc``).
        dtype: optional result dtype the values are rounded to before the destination's.
        mask: compile-time predicate limiting the elements moved.

    Returns:
        The appended :class:`~nki_workbench.ir.Inst`.
    """
    ctx = C.require(api)
    k = KINDS[kind]
    loc = user_location()
    srcs = tensor_list(srcs, api, "srcs") if srcs is not None else []
    dsts = tensor_list(dsts, api, "dsts") if dsts is not None else []
    if kind != "recv" and not srcs:
        raise NkiError("wb_collective_operands", f"{api} needs source tensors", loc)
    if kind != "send" and not dsts:
        raise NkiError("wb_collective_operands", f"{api} needs destination tensors", loc)
    if not k.p2p and len(srcs) != len(dsts):
        raise NkiError("wb_collective_operands", f"{api}: {len(srcs)} source(s) but "
                       f"{len(dsts)} destination(s); they pair up one to one", loc)
    groups = normalize_groups(replica_groups, api, loc)
    attrs = dict(attrs or {})
    if not k.p2p:
        _check_pairs(kind, srcs, dsts, attrs, groups, api)
    if groups is not None:
        attrs["replica_groups"] = groups
    if dtype is not None:
        from .. import dtypes as D
        attrs["dtype"] = D.name_of(D.canonical(dtype))
    ctx.attrs["has_collectives"] = True
    return M.emit(opcode(kind, groups is not None), dsts, srcs, attrs=attrs, mask=mask, api=api)
