"""``nki.language`` tensor creation.

``ndarray``, ``zeros``/``ones``/``full``, ``*_like``,
``rand``/``random_seed``, ``shared_constant``/``shared_identity_matrix``.
"""

from __future__ import annotations

import base64

import numpy as np

from .. import dtypes as D
from ..alloc.spec import resolve_alloc
from ..errors import BlockDimensionWarning, NkiError, user_frame, user_location, warn
from ..hw import get_target
from ..trace import context as C
from ..trace import emit as M
from ..trace.index import ParDim
from .common import NkiTensor, buffer_of

__all__ = ["ndarray", "zeros", "ones", "full", "empty_like", "zeros_like", "rand",
           "random_seed", "shared_constant", "shared_identity_matrix"]


def _shape(shape, api):
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(shape)
    pars = [k for k, s in enumerate(shape) if isinstance(s, ParDim)]
    if len(pars) > 1:
        raise NkiError(None, f"{api}: more than one nl.par_dim in shape {shape}", user_location())
    try:
        dims = tuple(int(s) for s in shape)
    except TypeError:
        raise NkiError(None, f"{api}: shape must be compile-time ints, got {shape}",
                       user_location()) from None
    if any(d <= 0 for d in dims):
        raise NkiError(None, f"{api}: shape {list(dims)} has a non-positive dimension",
                       user_location())
    return dims, (pars[0] if pars else 0)


def ndarray(shape, dtype, *, buffer=None, name="", **kwargs):
    """An uninitialised tensor in ``buffer`` (default SBUF); the way to declare HBM outputs.

    Args:
        shape: dimensions; ``nl.par_dim(n)`` marks the partition dim (dims before it are
            block dims).
        dtype: element dtype.
        buffer: ``nl.sbuf`` / ``nl.psum`` / ``nl.hbm`` / ``nl.shared_hbm`` / an allocation.
        name: optional tensor name.

    Returns:
        The new tensor.
    """
    api = "nl.ndarray"
    ctx = C.require(api)
    dims, par = _shape(shape, api)
    buf = buffer_of(buffer, api)
    dt = D.canonical(dtype)
    if buf.name == "shared_hbm":
        frame = user_frame()
        helper = ctx.kernel_code is not None and frame is not None and \
            frame.f_code is not ctx.kernel_code
        # why: a Python ``if`` runs at trace time and emits no branch (nki-samples'
        # flash_attn_bwd declares its dsinks output under ``if sinks is not None:``); NKI 0.2+
        # kernels are Python, so helpers are allowed there too; only a loop kept in the IR is
        # refused, and a current-API trace then retries unrolled
        legacy = ctx.attrs.get("api") != "nki"
        if ctx.scope or (legacy and helper):
            raise NkiError("err_shared_hbm_must_in_kernel_level",
                           "shared_hbm tensor created inside a loop or helper function",
                           user_location(), "create shared_hbm outputs at the top level of the "
                           "kernel function, before any loop")
    M.check_onchip_shape(dims, par, dt, buf.name, api)
    if buf.name not in ("sbuf", "psum"):
        _check_hbm_capacity(ctx, dims, dt, buf.name, api)
    if par > 0 and buf.name in ("sbuf", "psum") and buf.alloc is None:
        _block_dims(ctx, dims, par, api)
    name = name or ctx.assigned_name()
    alloc = resolve_alloc(buf, dims, par, dt, name or "tensor", api)
    decl = ctx.declare(dims, D.name_of(dt), buf.name, name=name, par_dim=par, alloc=alloc)
    return NkiTensor(ctx, decl.name)


def _check_hbm_capacity(ctx, dims, dt, buffer, api):
    """An HBM tensor (and all of them together) must fit the target chip's device memory."""
    tgt = get_target(ctx.target)
    size = int(np.prod(dims, dtype=object)) * D.itemsize(dt)
    # why: all HBM tensors of a kernel live at once (a loop body is traced once)
    total = ctx.attrs.get("_hbm_bytes", 0) + size
    if size > tgt.hbm_bytes_per_chip or total > tgt.hbm_bytes_per_chip:
        what = "this tensor" if size > tgt.hbm_bytes_per_chip else "the kernel's HBM tensors"
        raise NkiError("wb_hbm_capacity",
                       f"{api}: {buffer} tensor of shape {list(dims)} ({size / 2**30:.4g} GiB): "
                       f"{what} would need {max(size, total) / 2**30:.4g} GiB, more than the "
                       f"{tgt.hbm_bytes_per_chip // 2**30} GiB of HBM of a {tgt.name} chip",
                       user_location(), "tile the problem: process it in pieces that fit")
    ctx.attrs["_hbm_bytes"] = total


def _block_dims(ctx, dims, par, api):
    """Block dims (before ``nl.par_dim``) of an on-chip tensor: deprecated, gone on trn3.

    NKI deprecated them in SDK 2.23 (a warning) and removed them with NKI Beta 2, the only
    NKI for trn3; direct allocation keeps its (B, P, F) shapes.
    """
    msg = (f"{api}: on-chip tensor of shape {list(dims)} has block dimensions "
           f"{list(dims[:par])} before its partition dimension")
    hint = (f"fold the blocks into the free dims (shape {[dims[par], *dims[:par], *dims[par + 1:]]}"
            ", index t[:, b, ...]) or declare the tile inside the loop")
    if ctx.target == "trn3":
        raise NkiError("err_leading_dimension_of_tensor_must_be_partition",
                       msg + ": the leading dimension must be the partition dimension",
                       user_location(), hint)
    warn(BlockDimensionWarning, msg + " (deprecated since NKI 2.23)", user_location(), hint)


def full(shape, fill_value, dtype, *, buffer=None, name="", **kwargs):
    """A tensor filled with ``fill_value`` (SBUF/PSUM only).

    Args:
        shape: dimensions.
        fill_value: compile-time scalar.
        dtype: element dtype.
        buffer: on-chip buffer (HBM is refused, as in NKI).
        name: optional tensor name.

    Returns:
        The new tensor.
    """
    buf = buffer_of(buffer, "nl.full")
    if buf.name not in ("sbuf", "psum"):
        raise NkiError("err_hbm_tensor_with_init_value_not_supported",
                       f"cannot create an HBM tensor with an initial value ({buf.name})",
                       user_location(), "create it with nl.ndarray and store values into it")
    if buf.alloc is not None:
        raise NkiError("err_tensor_creation_on_scratchpad_with_init_value_not_supported",
                       "cannot create a directly-allocated tensor with an initial value",
                       user_location(), "declare it with nl.ndarray, then t[...] = value")
    ctx = C.require("nl.full")
    t = ndarray(shape, dtype, buffer=buffer, name=name or ctx.assigned_name())
    t.mark_fresh()
    M.emit("memset", [t], [fill_value], attrs={"dtype": D.name_of(t.dtype)}, api="nl.full")
    return t


def zeros(shape, dtype, *, buffer=None, name="", **kwargs):
    """A tensor of zeros (SBUF/PSUM). See :func:`full`."""
    ctx = C.require("nl.zeros")
    return full(shape, 0, dtype, buffer=buffer, name=name or ctx.assigned_name())


def ones(shape, dtype, *, buffer=None, name="", **kwargs):
    """A tensor of ones (SBUF/PSUM). See :func:`full`."""
    ctx = C.require("nl.ones")
    return full(shape, 1, dtype, buffer=buffer, name=name or ctx.assigned_name())


def empty_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    """An uninitialised tensor with ``a``'s shape (and dtype unless given).

    Args:
        a: a tensor.
        dtype: element dtype (default ``a.dtype``).
        buffer: memory (default SBUF).
        name: optional name.

    Returns:
        The new tensor.
    """
    ctx = C.require("nl.empty_like")
    return ndarray(a.shape, dtype if dtype is not None else a.dtype, buffer=buffer,
                   name=name or ctx.assigned_name())


def zeros_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    """Zeros with ``a``'s shape (and dtype unless given)."""
    ctx = C.require("nl.zeros_like")
    return zeros(a.shape, dtype if dtype is not None else a.dtype, buffer=buffer,
                 name=name or ctx.assigned_name())


def rand(shape, dtype=np.float32, **kwargs):
    """A tile of uniform random values in [0, 1) from the generator seeded by ``random_seed``.

    Args:
        shape: tile shape.
        dtype: element dtype.

    Returns:
        A new SBUF tile.
    """
    ctx = C.require("nl.rand")
    ctx.rng_used = True
    return M.compute("rand", [], tuple(int(s) for s in shape), D.canonical(dtype), api="nl.rand")


def random_seed(seed, *, mask=None, **kwargs):
    """Seed the random generator used by ``rand``/``dropout`` (same seed, same sequence).

    Args:
        seed: 32-bit scalar, or a ``[1, 1]`` tile holding it.
        mask: compile-time predicate.
    """
    ctx = C.require("nl.random_seed")
    ctx.rng_used = True
    M.emit("random_seed", [], [seed], mask=mask, api="nl.random_seed")


def shared_constant(constant, dtype=None, **kwargs):
    """An HBM tensor holding a compile-time numpy constant (load it with ``nl.load``).

    Args:
        constant: array-like value.
        dtype: element dtype (default: the array's, which must be an NKI dtype).

    Returns:
        The constant HBM tensor.
    """
    ctx = C.require("nl.shared_constant")
    arr = np.asarray(constant)
    dt = D.canonical(dtype if dtype is not None else arr.dtype)
    data = np.ascontiguousarray(D.cast(arr, dt))
    payload = base64.b64encode(data.tobytes()).decode("ascii")
    decl = ctx.declare(arr.shape if arr.ndim else (1,), D.name_of(dt), "shared_hbm",
                       kind="const", name=ctx.assigned_name() or "const", data=payload)
    return NkiTensor(ctx, decl.name, scope=())


def shared_identity_matrix(n, dtype=np.uint8, **kwargs):
    """An ``n x n`` identity matrix constant in HBM.

    Args:
        n: size.
        dtype: element dtype.

    Returns:
        The constant HBM tensor.
    """
    return shared_constant(np.identity(int(n)), dtype=dtype)
