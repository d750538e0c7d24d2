"""Shared trace-side helpers of ``nki.isa``.

Shared trace-side helpers of ``nki.isa``: operand checks that speak NKI error codes, engine
selection, ALU operator resolution, and emission with the engine recorded on every instruction.

Every isa instruction carries the attribute ``engine`` (the engine that runs it: the explicit
``engine=`` or the documented default); the cost model and timelines read it in preference to
the opcode table's default.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..hw import get_target
from ..ir import Scalar
from ..lang.alu import alu_name
from ..trace import context as C
from ..trace import emit as M
from ..trace.index import IndexExpr
from ..trace.tensor import NkiTensor
from .enums import ENGINE_NAME, engine, reduce_cmd

__all__ = ["err", "tile", "free_size", "same_partitions", "same_free_size", "target",
           "pick_engine", "alu", "BITVEC", "ARITH_REDUCE", "scalar_or_vector", "compute",
           "emit", "out_dtype", "cmd_name", "no_both_psum", "is_tile", "flat_free",
           "require_psum_free", "start_partition", "fresh_tile", "reduce_res_tile"]

# ALU operators that work on raw integer bits (nki-api.md §4.1 "bitvec")
BITVEC = frozenset({"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
                    "invert"})
ARITH_REDUCE = frozenset({"add", "subtract", "multiply", "maximum", "minimum"})


def err(code, msg, hint=None):
    """An :class:`NkiError` located at the kernel line being traced."""
    return NkiError(code, msg, user_location(), hint)


def is_tile(x) -> bool:
    """Whether ``x`` is an NKI tensor (tile or view)."""
    return isinstance(x, NkiTensor)


def tile(x, api: str, arg: str) -> NkiTensor:
    """``x`` must be an SBUF/PSUM tile."""
    if not isinstance(x, NkiTensor):
        raise err(None, f"{api}: '{arg}' must be a tile (SBUF/PSUM tensor), got "
                  f"{type(x).__name__}")
    M.require_tile(x, api, arg)
    return x


def free_size(t) -> int:
    """Elements per partition."""
    return int(np.prod(t.shape[1:], dtype=np.int64)) if len(t.shape) > 1 else 1


def flat_free(shape) -> tuple:
    """``[P, f1, f2...]`` → ``(P, f1*f2*...)``."""
    return (shape[0], int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1)


def same_partitions(api: str, *named):
    """Tiles ``(name, tile)`` must have the same partition size (``err_num_partition_mismatch``)."""
    sizes = [(n, t.shape[0]) for n, t in named if isinstance(t, NkiTensor)]
    if len({s for _, s in sizes}) > 1:
        desc = ", ".join(f"'{n}' {s}" for n, s in sizes)
        raise err("err_num_partition_mismatch",
                  f"{api}: operands have different partition sizes ({desc})",
                  "broadcast along the partition dim first (e.g. nl.broadcast_to) or slice "
                  "the operands to the same number of partitions")


def same_free_size(api: str, *named):
    """Tiles must hold the same number of elements per partition."""
    sizes = [(n, free_size(t)) for n, t in named if isinstance(t, NkiTensor)]
    if len({s for _, s in sizes}) > 1:
        desc = ", ".join(f"'{n}' {s}" for n, s in sizes)
        raise err(None, f"{api}: operands have different numbers of elements per partition "
                  f"({desc})", "no implicit broadcasting along free dims: use "
                  "nisa.tensor_scalar with a [P, 1] operand, or nl.broadcast_to")


def no_both_psum(api: str, a, b, an: str, bn: str):
    """Two inputs of a Vector Engine instruction cannot both live in PSUM."""
    if is_tile(a) and is_tile(b) and a.buffer == "psum" and b.buffer == "psum":
        raise err("err_unsupported_memory", f"{api}: '{an}' and '{bn}' are both in PSUM; at "
                  "most one input may be read from PSUM", "copy one of them to SBUF first")


def require_psum_free(api: str, eng: str, *tiles):
    """GpSimd cannot access PSUM (hw target fact ``gpsimd_psum_access``)."""
    if eng != "gpsimd" or target().gpsimd_psum_access:
        return
    for t in tiles:
        if is_tile(t) and t.buffer == "psum":
            raise err("err_unsupported_memory", f"{api}: GpSimd Engine cannot access PSUM "
                      f"tile '{t.name}'", "use engine=nisa.vector_engine, or copy to SBUF")


def target():
    """Facts of the kernel's target."""
    return get_target(C.require("nki.isa").target)


def pick_engine(api: str, eng, default: str, allowed) -> str:
    """IR engine name of an ``engine=`` argument (``unknown``/None/0 → ``default``)."""
    if eng is None or (isinstance(eng, int) and int(eng) == engine.unknown):
        return default
    try:
        name = ENGINE_NAME[engine(int(eng))]
    except (ValueError, KeyError, TypeError):
        raise err(None, f"{api}: engine must be a nisa.engine value, got {eng!r}") from None
    if name not in allowed:
        raise err("wb_isa_engine_unsupported", f"{api} cannot run on the {name} engine",
                  f"allowed engines: {', '.join(sorted(allowed))}")
    return name


def alu(op, api: str, arg: str = "op") -> str:
    """Canonical ALU operator name of ``op`` (numpy ufunc, ``nl`` function or name)."""
    return alu_name(op, f"{api} {arg}")


def cmd_name(cmd, api: str) -> str:
    """Name of a ``reduce_cmd`` value."""
    try:
        return reduce_cmd(int(cmd)).name
    except (ValueError, TypeError):
        raise err(None, f"{api}: reduce_cmd must be a nisa.reduce_cmd value, got "
                  f"{cmd!r}") from None


def scalar_or_vector(x, p: int, api: str, arg: str, code_type=None, code_shape=None,
                     dtypes=None):
    """A compile-time scalar, or a ``[P, 1]`` tile broadcast along the free dims.

    Returns the IR-ready operand (``Scalar`` or the tile).
    """
    if isinstance(x, (bool, np.bool_)):
        raise err(code_type, f"{api}: '{arg}' must be a number or a [P, 1] tile, got a bool")
    if isinstance(x, (int, float, np.integer, np.floating)):
        return Scalar(float(x)) if isinstance(x, (float, np.floating)) else Scalar(int(x))
    if isinstance(x, IndexExpr):
        raise err(code_type, f"{api}: '{arg}' must be a compile-time number or a [P, 1] tile, "
                  "got an index expression", "materialise indices with nisa.iota first")
    if not isinstance(x, NkiTensor):
        raise err(code_type, f"{api}: '{arg}' must be a number or a [P, 1] tile, got "
                  f"{type(x).__name__}")
    M.require_tile(x, api, arg)
    if dtypes is not None and D.name_of(x.dtype) not in dtypes:
        raise err(code_type, f"{api}: '{arg}' tile has dtype {D.name_of(x.dtype)}; allowed: "
                  f"{', '.join(dtypes)}")
    if free_size(x) != 1:
        raise err(code_shape, f"{api}: '{arg}' must be a scalar or a [P, 1] vector, got a tile "
                  f"of shape {list(x.shape)}", "pass one element per partition")
    if x.shape[0] != p:
        raise err("err_num_partition_mismatch", f"{api}: '{arg}' has {x.shape[0]} partitions, "
                  f"the data has {p}", "give one value per partition of the data")
    return x


def out_dtype(dtype, *operands):
    """``dtype=`` or the promotion of the operands (scalars weakly typed)."""
    if dtype is not None:
        return D.canonical(dtype)
    return D.result_type(*[M.dtype_of(o) for o in operands if o is not None])


def start_partition(t) -> int | None:
    """The first partition a tile view addresses, when it is a compile-time constant."""
    if not is_tile(t) or t.index is None:
        return 0
    from ..ir import expr as E
    try:
        lo, _ = E.bounds(t.index[t.decl.par_dim], {})
    except (ValueError, KeyError):
        return None
    return lo


def _with_engine(attrs, eng, dtype=None):
    a = dict(attrs or {})
    a["engine"] = eng
    if dtype is not None:
        a.setdefault("dtype", D.name_of(D.canonical(dtype)))
    return a


def compute(op, ins, shape, dtype, eng, *, attrs=None, mask=None, buffer="sbuf", api=None):
    """Emit ``op`` writing a fresh tile; records ``engine``."""
    return M.compute(op, ins, shape, dtype, attrs=_with_engine(attrs, eng), mask=mask,
                     buffer=buffer, api=api or f"nisa.{op}")


def emit(op, outs, ins, eng, *, attrs=None, mask=None, api=None):
    """Emit ``op`` writing given destinations; records ``engine``."""
    return M.emit(op, outs, ins, attrs=_with_engine(attrs, eng), mask=mask,
                  api=api or f"nisa.{op}")


def fresh_tile(shape, dtype, api: str, buffer: str = "sbuf") -> NkiTensor:
    """A new result tile named after the kernel's assignment target (for multi-output emits)."""
    ctx = C.require(api)
    t = M.new_tile(shape, dtype, buffer, name=ctx.assigned_name(), api=api)
    t.mark_fresh()
    return t


def reduce_res_tile(x, p: int, api: str, arg: str = "reduce_res"):
    """A ``[P, 1]`` SBUF/PSUM destination of a per-partition reduction."""
    tile(x, api, arg)
    if x.shape[0] != p:
        raise err("err_num_partition_mismatch", f"{api}: '{arg}' has {x.shape[0]} partitions, "
                  f"the data has {p}")
    if free_size(x) != 1:
        raise err(None, f"{api}: '{arg}' must hold one element per partition ([P, 1]), got "
                  f"shape {list(x.shape)}")
    return x
