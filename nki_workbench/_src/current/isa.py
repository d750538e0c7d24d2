"""Today's ``nki.isa`` (NKI 0.2+): every instruction takes its destination first.

Each instruction is the legacy front end's (:mod:`..isa`: same checks, opcode, attributes, value
rule and cost) written into ``dst`` by :func:`.emit.into`; arguments are translated from the
current spelling (enums of :mod:`.enums`, ``pattern=`` for ``iota``/``affine_select``,
``accumulate=`` for ``nc_matmul``). The data-movement and selection instructions live in
:mod:`.isa_data`.
"""

from __future__ import annotations

from .. import dtypes as D
from .. import isa as L
from ..errors import NkiError, user_location
from ..ir import expr as E
from ..trace import context as C
from ..trace.index import IndexExpr
from ..trace.tensor import NkiTensor
from . import enums as N
from .emit import into, require_dst, zero_fill

__all__ = ["nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_tensor",
           "tensor_scalar", "scalar_tensor_tensor", "tensor_scalar_reduce", "tensor_tensor_scan",
           "tensor_reduce", "tensor_partition_reduce", "reciprocal", "bn_stats", "bn_aggr",
           "max8", "nc_find_index8", "nc_match_replace8", "exponential"]


def _engine(v, api):
    return N.enum_member(N.engine, v, api, "engine") if v is not None else N.engine.unknown


# ----------------------------------------------------------------------------- Tensor Engine
def _accumulate(dst, accumulate, api) -> str | None:
    """``acc`` attribute of an ``nc_matmul`` into ``dst`` (NKI 0.3+ ``accumulate=`` rules).

    ``True`` adds, ``False`` overwrites, ``None`` (or a loop-variable condition such as
    ``k > 0``) lets the first write to the location overwrite and later ones add. Inside a loop
    over a PSUM tile declared outside it, the "first write" is every first iteration of the
    loops not indexing ``dst``: the tile is zeroed before them and every write adds.
    """
    if accumulate is not None and not isinstance(accumulate, IndexExpr):
        return "add" if bool(accumulate) else None
    ctx = C.require(api)
    written = ctx.attrs.setdefault("nki_matmul_written", set())
    key = (ctx.root(dst.name), dst.access())
    whole = (ctx.root(dst.name), None)
    if key in written or whole in written:
        return "add"
    written.add(key if dst.index is not None else whole)
    depth = len(dst._scope)
    used = set()
    for e in dst.index or ():
        used |= E.free_vars(e)
    target = None
    for j in range(len(ctx.loops) - 1, depth - 1, -1):
        if ctx.loops[j]["var"] in used:
            break
        target = j
    if target is None:
        return None
    zero_fill(dst, ctx.blocks[target], user_location())
    return "add"


def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=N.matmul_perf_mode.none, name=None, **kwargs):
    """``dst (PSUM) = stationary.T @ moving`` on Tensor Engine, optionally accumulating.

    Args:
        dst: PSUM tile ``[M, N]``.
        stationary: SBUF tile ``[K, M]``.
        moving: SBUF tile ``[K, N]``.
        is_stationary_onezero: hint that ``stationary`` holds only 0/1.
        is_moving_onezero: hint that ``moving`` holds only 0/1.
        is_transpose: bit-exact PE transpose (``moving`` an identity).
        accumulate: ``True`` add, ``False`` overwrite, ``None`` first write overwrites.
        tile_position: ``(row, col)`` PE-array offset.
        tile_size: ``(rows, cols)`` PE tile.
        perf_mode: ``nisa.matmul_perf_mode``.
        name: instruction name (scheduling; ignored).
        **kwargs: 0.2 spellings (``is_moving_zero``) accepted.
    """
    api = "nisa.nc_matmul"
    require_dst(dst, api)
    if dst.buffer != "psum":
        raise NkiError("err_unsupported_memory", f"{api}: 'dst' must be in PSUM, got "
                       f"{dst.buffer}", user_location(), "allocate it with buffer=nl.psum")
    mode = perf_mode.value if isinstance(perf_mode, N.matmul_perf_mode) else perf_mode
    value = L.nc_matmul(stationary, moving, is_stationary_onezero=is_stationary_onezero,
                        is_moving_onezero=is_moving_onezero or kwargs.get("is_moving_zero",
                                                                          False),
                        is_transpose=is_transpose, tile_position=tile_position,
                        tile_size=tile_size,
                        perf_mode=None if mode in (None, "none") else "double_row_gen3")
    into(dst, value, api, acc=_accumulate(dst, accumulate, api))


def nc_transpose(dst, data, engine=N.engine.unknown, name=None):
    """Partition/free transpose of ``data`` into ``dst`` (Tensor Engine to PSUM, or Vector).

    Args:
        dst: ``[F, P]`` tile (PSUM for Tensor Engine).
        data: ``[P, F]`` tile.
        engine: ``nisa.engine.tensor`` / ``vector`` (default: by ``dst``'s buffer).
        name: instruction name (ignored).
    """
    api = "nisa.nc_transpose"
    require_dst(dst, api)
    eng = _engine(engine, api)
    if eng == N.engine.unknown:
        eng = N.engine.tensor if dst.buffer == "psum" else N.engine.vector
    into(dst, L.nc_transpose(data, dtype=dst.dtype, engine=L.engine[eng.name]), api)


# ----------------------------------------------------------------------------- Scalar Engine
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=N.reduce_cmd.idle, name=None):
    """``dst = op(data * scale + bias)`` on Scalar Engine, optional free-dim reduction.

    Args:
        dst: destination tile.
        op: activation function (``nl.exp``, ``nl.copy``...).
        data: input tile.
        bias: ``[P, 1]`` tile or scalar.
        scale: scalar or ``[P, 1]`` tile.
        reduce_op: ``nl.add`` to reduce along the free dims.
        reduce_res: ``[P, 1]`` tile receiving the reduction.
        reduce_cmd: accumulator command.
        name: instruction name (ignored).
    """
    api = "nisa.activation"
    require_dst(dst, api)
    value = L.activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                         reduce_res=reduce_res, reduce_cmd=N.legacy_cmd(reduce_cmd, api),
                         dtype=dst.dtype)
    into(dst, value, api, extra=(reduce_res,))


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """``activation`` plus a reduction of every free element into ``reduce_res``."""
    api = "nisa.activation_reduce"
    require_dst(dst, api)
    value = L.activation_reduce(op, data, reduce_op=reduce_op, reduce_res=reduce_res,
                                bias=bias, scale=scale, dtype=dst.dtype)
    into(dst, value, api, extra=(reduce_res,))


# ----------------------------------------------------------------------------- Vector Engine
def _like_dst(t, dst):
    """``t`` viewed with ``dst``'s shape when only the split of its free elements differs.

    Today's instructions pair operands element by element along each partition (access
    patterns, not numpy broadcasting): ``[128, 1, 128]`` and ``[128, 128]`` are the same
    128 elements per partition.
    """
    shape, want = tuple(getattr(t, "shape", ())), tuple(dst.shape)
    if not isinstance(t, NkiTensor) or shape == want or len(shape) < 2 or shape[0] != want[0]:
        return t
    if _prod(shape[1:]) != _prod(want[1:]):
        return t
    try:
        return t.reshape(want)
    except NkiError:
        return t  # why: a strided view cannot be re-split; the legacy pairing applies as before


def _prod(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def tensor_tensor(dst, data1, data2, op, engine=N.engine.unknown, name=None):
    """``dst = op(data1, data2)`` element-wise (fp32 arithmetic, integer bitvec ops)."""
    api = "nisa.tensor_tensor"
    require_dst(dst, api)
    data1, data2 = _like_dst(data1, dst), _like_dst(data2, dst)
    into(dst, L.tensor_tensor(data1, data2, op, dtype=dst.dtype,
                              engine=int(_engine(engine, api))), api)


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=N.engine.unknown, name=None):
    """``dst = (data op0 operand0) op1 operand1`` with scalar or ``[P, 1]`` operands."""
    api = "nisa.tensor_scalar"
    require_dst(dst, api)
    into(dst, L.tensor_scalar(data, op0, operand0, reverse0=reverse0, op1=op1,
                              operand1=operand1, reverse1=reverse1, dtype=dst.dtype,
                              engine=int(_engine(engine, api))), api)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False,
                         reverse1=False, name=None):
    """``dst = (data op0 operand0) op1 operand1`` with ``operand1`` a full tile."""
    api = "nisa.scalar_tensor_tensor"
    require_dst(dst, api)
    into(dst, L.scalar_tensor_tensor(data=data, op0=op0, operand0=operand0, op1=op1,
                                     operand1=operand1, reverse0=reverse0, reverse1=reverse1,
                                     dtype=dst.dtype), api)


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=N.reduce_cmd.reset_reduce, reduce_init=None,
                         reduce_res_negate=False, name=None):
    """``dst = data op0 operand0`` and its free-dim reduction into ``reduce_res``."""
    api = "nisa.tensor_scalar_reduce"
    require_dst(dst, api)
    cmd = N.enum_member(N.reduce_cmd, reduce_cmd, api, "reduce_cmd")
    if cmd is not N.reduce_cmd.reset_reduce or reduce_init is not None or reduce_res_negate:
        raise NkiError("wb_isa_unsupported", f"{api}: only reduce_cmd=reset_reduce without "
                       "reduce_init/reduce_res_negate is modelled", user_location())
    if reduce_res is None:
        raise NkiError("wb_isa_unsupported", f"{api}: reduce_res=None (keeping the result in "
                       "the accumulator) is not modelled", user_location())
    value = L.tensor_scalar_reduce(data=data, op0=op0, operand0=operand0, reduce_op=reduce_op,
                                   reduce_res=reduce_res, reverse0=reverse0, dtype=dst.dtype)
    into(dst, value, api, extra=(reduce_res,))


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       name=None):
    """Scan along the free dim: ``r[i] = op1(op0(data0[i], r[i-1]), data1[i])``."""
    api = "nisa.tensor_tensor_scan"
    require_dst(dst, api)
    into(dst, L.tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=reverse0,
                                   reverse1=reverse1, dtype=dst.dtype), api)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """Reduce ``data`` along trailing free ``axis`` into ``dst``."""
    api = "nisa.tensor_reduce"
    require_dst(dst, api)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    kept = tuple(1 if k in axes else s for k, s in enumerate(data.shape))
    keep = bool(keepdims) or tuple(dst.shape) == kept
    into(dst, L.tensor_reduce(op, data, axes, negate=negate, keepdims=keep, dtype=dst.dtype),
         api)


def tensor_partition_reduce(dst, op, data, name=None):
    """Reduce across partitions (GpSimd) into ``dst``."""
    api = "nisa.tensor_partition_reduce"
    require_dst(dst, api)
    into(dst, L.tensor_partition_reduce(op, data, dtype=dst.dtype), api)


def reciprocal(dst, data, name=None):
    """``dst = 1 / data`` on Vector Engine."""
    api = "nisa.reciprocal"
    require_dst(dst, api)
    into(dst, L.reciprocal(data, dtype=dst.dtype), api)


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=N.reduce_cmd.idle,
                reduce_init=0.0, name=None):
    """``dst = exp(src - max_value)`` (NKI 0.4+, Vector Engine on gen4).

    Traced as the Scalar Engine's ``exp`` activation with bias ``-max_value`` (same value
    rule); a tile ``max_value`` is negated first.
    """
    api = "nisa.exponential"
    require_dst(dst, api)
    if reduce_res is not None or float(reduce_init) != 0.0:
        raise NkiError("wb_isa_unsupported", f"{api}: reduce_res/reduce_init are not modelled",
                       user_location(), "reduce with nisa.tensor_reduce afterwards")
    from ..lang import exp as _exp
    if isinstance(max_value, (int, float)):
        bias = -float(max_value)
    else:
        bias = L.tensor_scalar(max_value, "multiply", -1.0, dtype=D.canonical("float32"))
    into(dst, L.activation(_exp, src, bias=bias, dtype=dst.dtype), api)


# ----------------------------------------------------------------------------- statistics
def bn_stats(dst, data, name=None):
    """Per-partition (count, mean, var*count) of even and odd elements into ``dst``."""
    api = "nisa.bn_stats"
    require_dst(dst, api)
    into(dst, L.bn_stats(data, dtype=dst.dtype), api)


def bn_aggr(dst, data, name=None):
    """Aggregate ``bn_stats`` rows into (mean, variance)."""
    api = "nisa.bn_aggr"
    require_dst(dst, api)
    into(dst, L.bn_aggr(data, dtype=dst.dtype), api)


def max8(dst, src, name=None):
    """The 8 largest values per partition, descending."""
    api = "nisa.max8"
    require_dst(dst, api)
    into(dst, L.max8(src=src, dtype=dst.dtype), api)


def nc_find_index8(dst, data, vals, name=None):
    """Index of the first occurrence of each of 8 values per partition."""
    api = "nisa.nc_find_index8"
    require_dst(dst, api)
    into(dst, L.nc_find_index8(data=data, vals=vals, dtype=dst.dtype), api)


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """Replace the first occurrence of each of 8 values with ``imm`` (indices to ``dst_idx``)."""
    api = "nisa.nc_match_replace8"
    require_dst(dst, api)
    into(dst, L.nc_match_replace8(data=data, vals=vals, imm=imm, dst_idx=dst_idx,
                                  dtype=dst.dtype), api, extra=(dst_idx,))
