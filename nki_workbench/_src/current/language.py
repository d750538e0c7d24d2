"""Today's ``nki.language`` (NKI 0.2+) over the legacy implementation.

Dtypes are strings (``nl.float32 == "float32"``), buffers are the legacy markers
(``nl.sbuf``, ``nl.psum``, ``nl.hbm`` = ``nl.private_hbm``, ``nl.shared_hbm``) with the NKI 0.3
default ``buffer=nl.sbuf``; creation, load/store, math, reductions and activations are the
legacy ``nl`` functions (one opcode and one value rule each). What changed: ``affine_range`` /
``sequential_range`` / ``static_range`` (loops of a current trace; unrolled when the kernel uses
the loop variable as a Python value), ``program_id(axis=0)``, ``num_programs(axes=0)``,
``tile_size`` with the 0.4+ byte constants, ``no_reorder``, ``NKIObject``, buffer predicates.
"""

from __future__ import annotations

import os

import numpy as np

from .. import lang as _L
from ..alloc.spec import DirectBuffer, DirectSpec
from ..errors import NkiError, user_location
from ..hw import DEFAULT_TARGET, get_target
from ..trace import context as C
from ..trace import iterators as _it
from ..trace.buffers import Buffer
from ..trace.tensor import NkiTensor
from .kernel import program_guarded, unrolling

__all__ = ["affine_range", "sequential_range", "static_range", "program_id", "num_programs",
           "program_ndim", "tile_size", "no_reorder", "NKIObject", "is_hbm", "is_on_chip",
           "is_psum", "is_sbuf", "ndarray", "zeros", "DTYPES", "MemoryRegion",
           "shared_identity_matrix", "broadcast_to", "shared_constant"]

DTYPES = ("bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32",
          "bfloat16", "tfloat32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
          "float8_e8m0fnu", "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4")
"""The dtype names of NKI 0.6 (``nl.<name> == "<name>"``; ``bool_`` is ``"bool"``)."""


class MemoryRegion:
    """The memory regions of NKI 0.3+ (members are the ``nl.*`` buffer markers)."""

    sbuf = _L.sbuf
    psum = _L.psum
    private_hbm = _L.private_hbm
    shared_hbm = _L.shared_hbm


def _buffer_name(buffer) -> str:
    return buffer.name if isinstance(buffer, Buffer) else str(getattr(buffer, "value", buffer))


def is_hbm(buffer) -> bool:
    """Whether ``buffer`` is an HBM region (private or shared)."""
    return _buffer_name(buffer) in ("hbm", "private_hbm", "shared_hbm")


def is_psum(buffer) -> bool:
    """Whether ``buffer`` is PSUM."""
    return _buffer_name(buffer) == "psum"


def is_sbuf(buffer) -> bool:
    """Whether ``buffer`` is SBUF."""
    return _buffer_name(buffer) == "sbuf"


def is_on_chip(buffer) -> bool:
    """Whether ``buffer`` is SBUF or PSUM."""
    return is_sbuf(buffer) or is_psum(buffer)


def ndarray(shape, dtype, buffer=_L.sbuf, name="", address=None, **kwargs):
    """An uninitialised tensor (default SBUF); outputs use ``buffer=nl.shared_hbm``.

    Args:
        shape: dimensions (dim 0 is the partition dim on chip).
        dtype: dtype name or numpy dtype.
        buffer: ``nl.sbuf`` / ``nl.psum`` / ``nl.hbm`` / ``nl.shared_hbm``.
        name: optional tensor name.
        address: ``(partition_offset, free_byte_offset)``: an SBUF/PSUM tensor placed there
            (NKI 0.3+; PSUM at a bank boundary, ``(0, bank * 2048)``) instead of by the
            allocator, which places the other tensors around it; ignored for HBM.
        **kwargs: other keywords (accepted).

    Returns:
        The new tensor.
    """
    ctx = C.require("nl.ndarray")
    if address is not None and is_on_chip(buffer):
        buffer = _placed(buffer, address, ctx)
    shared = _buffer_name(buffer) == "shared_hbm" and "shared_next" in ctx.attrs
    if shared:
        t = _shared_of_earlier_core(ctx, shape, dtype)
        if t is not None:
            return t
    code, ctx.kernel_code = ctx.kernel_code, None  # why: NKI 0.2+ inlines helper functions
    try:
        t = _L.ndarray(shape, dtype, buffer=buffer, name=name)
    finally:
        ctx.kernel_code = code
    if shared:
        ctx.attrs.setdefault("shared_tensors", []).append(t.name)
        ctx.attrs["shared_next"] += 1
    return t


def _placed(buffer, address, ctx):
    """The direct-allocation buffer of ``nl.ndarray(..., address=(p, f))``.

    One literal address per tensor (today's tensors have no block dims), validated by the same
    rules as ``ncc.sbuf.alloc`` / ``ncc.psum.alloc``: PSUM's byte offset is split into a bank
    and an offset in it, which must be 0.
    """
    ok = isinstance(address, (tuple, list)) and len(address) == 2 and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in address)
    if not ok:
        raise NkiError("wb_alloc_bad_argument", "nl.ndarray: address must be a tuple "
                       f"(partition_offset, free_byte_offset) of ints, got {address!r}",
                       user_location())
    part, free = (int(v) for v in address)
    if is_psum(buffer):
        bank_bytes = get_target(ctx.target).psum_bank_bytes
        where = (free // bank_bytes, part, free % bank_bytes)
        kind = "psum"
    else:
        where, kind = (part, free), "sbuf"
    spec = DirectSpec("alloc", lambda idx, pdim_size, fdim_size: where,
                      (("address", (part, free)),))
    return DirectBuffer(kind, spec)


def _shared_of_earlier_core(ctx, shape, dtype):
    """In per-core tracing, core c's k-th shared-HBM tensor is core 0's k-th (one memory)."""
    k, names = ctx.attrs["shared_next"], ctx.attrs.get("shared_tensors", [])
    if k >= len(names):
        return None
    decl = ctx.decls[names[k]]
    if tuple(decl.shape) != tuple(int(d) for d in shape):
        raise NkiError(None, f"nl.ndarray(shared_hbm): core {ctx.attrs['program_id']} "
                       f"allocates {list(shape)} where core 0 allocated {list(decl.shape)}",
                       user_location(), "every core allocates the same shared_hbm tensors")
    ctx.attrs["shared_next"] = k + 1
    return NkiTensor(ctx, names[k])


def shared_identity_matrix(n, dtype="uint8", **kwargs):
    """An ``n x n`` identity matrix in SBUF (nki-library feeds it to ``nc_matmul`` directly).

    The constant lives in HBM; one ``dma_copy`` brings it on chip.
    """
    from .isa_data import dma_copy
    const = _L.shared_identity_matrix(n, dtype=dtype)
    t = ndarray((int(n), int(n)), dtype, buffer=_L.sbuf)
    dma_copy(dst=t, src=const)
    return t


def shared_constant(constant, dtype=None, **kwargs):
    """A ``shared_hbm`` constant from a numpy array or the path of a ``.npy`` file (NKI 0.2+).

    Args:
        constant: array-like value, or a ``str`` / path-like naming a ``.npy`` file.
        dtype: element dtype (2.27's optional argument; default: the array's).
        **kwargs: other keywords (passed on to the legacy ``shared_constant``).

    Returns:
        The constant HBM tensor.
    """
    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(os.fspath(constant), allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise NkiError(None, f"nl.shared_constant: cannot read the .npy file "
                           f"{os.fspath(constant)!r}: {exc}", user_location()) from None
    return _L.shared_constant(constant, dtype=dtype, **kwargs)


def broadcast_to(x, shape, dtype=None):
    """``x`` broadcast to ``shape`` (size-1 dims expand); NKI 0.3+ takes ``shape`` by position."""
    kw = {} if dtype is None else {"dtype": dtype}
    return _L.broadcast_to(x, shape=tuple(shape), **kw)


def zeros(shape, dtype, buffer=_L.sbuf, name="", **kwargs):
    """A zero-filled tensor (default SBUF)."""
    return _L.zeros(shape, dtype, buffer=buffer, name=name)


def _range(kind, args, kwargs):
    if unrolling():
        return _it.static_range(*args)
    return getattr(_it, f"{kind}_range")(*args, **kwargs)


def affine_range(start, stop=None, step=1, **kwargs):
    """``range(start, stop, step)`` (deprecated alias since NKI 0.2); an IR loop when possible."""
    return _range("affine", _args(start, stop, step), kwargs)


def sequential_range(start, stop=None, step=1, **kwargs):
    """``range(start, stop, step)`` executed in order (deprecated alias since NKI 0.2)."""
    return _range("sequential", _args(start, stop, step), kwargs)


def static_range(start, stop=None, step=1):
    """``range(start, stop, step)``, unrolled at trace time."""
    return _it.static_range(*_args(start, stop, step))


def _args(start, stop, step):
    return (start,) if stop is None and step == 1 else \
        ((0, start, step) if stop is None else (start, stop, step))


def program_id(axis=0):
    """This program's index along launch-grid ``axis`` (the LNC core id for ``kernel[2]``).

    Symbolic while the trace serves every core; a Python int when the kernel needed one and
    is traced per core.
    """
    c = program_guarded()
    return c if c is not None and int(axis) == 0 else _L.program_id(axis)


def num_programs(axes=0):
    """Launch-grid size along ``axes`` (1 or 2 for an LNC launch)."""
    return _L.num_programs(axes)


def program_ndim():
    """Number of launch-grid dimensions (0 without a grid)."""
    return _L.program_ndim()


class _TileSize:
    """Tile-size limits of the target being traced (NKI 0.4+ names included).

    Attributes:
        pmax: partitions of a tile (128).
        psum_fmax: fp32 elements of one PSUM bank (deprecated in 0.4).
        psum_bank_fmax: fp32 elements of one PSUM bank (512).
        psum_bank_fmax_bytes: bytes of one PSUM bank per partition (2048).
        psum_num_banks: PSUM banks (8).
        gemm_stationary_fmax: matmul stationary free size (128).
        gemm_moving_fmax: matmul moving free size (512).
        bn_stats_fmax: ``bn_stats`` input free size (512).
        sbuf_fmax_bytes: usable SBUF bytes per partition.
        sbuf_fmax: usable SBUF fp32 elements per partition.
        sbuf_size_bytes: usable SBUF bytes in all partitions.
        total_available_sbuf_size: usable SBUF bytes per partition (deprecated in 0.4).
        psum_min_align: PSUM byte alignment.
        sbuf_min_align: SBUF byte alignment.
    """

    def _t(self):
        ctx = C.current()
        return get_target(ctx.target if ctx else DEFAULT_TARGET)

    def __getattr__(self, name):
        t = self._t()
        table = {
            "psum_bank_fmax": t.psum_bank_bytes // 4, "psum_bank_fmax_bytes": t.psum_bank_bytes,
            "psum_num_banks": t.psum_banks, "sbuf_fmax_bytes": t.total_available_sbuf_size,
            "sbuf_fmax": t.total_available_sbuf_size // 4,
            "sbuf_size_bytes": t.total_available_sbuf_size * t.num_partitions,
        }
        if name in table:
            return table[name]
        if name in _L.constants.TileSize._FIELDS:
            return getattr(t, name)
        raise AttributeError(f"nl.tile_size has no attribute {name!r}")


tile_size = _TileSize()


class no_reorder:  # noqa: N801 - NKI's spelling
    """``with nl.no_reorder():`` keeps program order; the workbench's scheduler already does."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class NKIObject:
    """Base class of user classes passed to NKI 0.2+ kernels.

    Annotated fields without a default get ``None``, and a subclass without its own
    ``__init__`` takes its fields (annotated ones, then plain class attributes such as
    ``idx = None``) by position or keyword (``Cfg(rows=128)``), so fields may be left out;
    a ``@dataclass`` on the subclass works as usual (nki-library uses both).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__annotations__" not in cls.__dict__:
            cls.__annotations__ = {}
        ann = cls.__dict__["__annotations__"]
        for name, value in list(cls.__dict__.items()):
            # why: nki-library writes `@dataclass class P(nl.NKIObject): idx = None` and
            # builds P(idx=...): a plain (hashable) class attribute is a field of the
            # dataclass too, so @dataclass, applied after this hook, generates it
            if name not in ann and _plain_field(name, value) and type(value).__hash__:
                ann[name] = object
        for name in cls.__dict__.get("__annotations__", {}):
            if name not in cls.__dict__:
                setattr(cls, name, None)

    def __init__(self, *args, **kwargs):
        fields = _fields_of(type(self))
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} positional "
                            f"arguments but {len(args)} were given")
        for name, value in zip(fields, args, strict=False):
            setattr(self, name, value)
        for name, value in kwargs.items():
            if name not in fields:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument "
                                f"{name!r}")
            setattr(self, name, value)
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()


def _plain_field(name, value) -> bool:
    return not name.startswith("_") and not callable(value) and \
        not isinstance(value, (property, classmethod, staticmethod))


def _fields_of(cls) -> list:
    names: list = []
    for klass in reversed(cls.__mro__):
        if klass is NKIObject or not issubclass(klass, NKIObject):
            continue
        for name in klass.__dict__.get("__annotations__", {}):
            if name not in names:
                names.append(name)
        # why: nki-library also declares fields as plain class attributes (`idx = None`)
        # and passes them by keyword
        for name, value in klass.__dict__.items():
            if name not in names and _plain_field(name, value):
                names.append(name)
    return names
