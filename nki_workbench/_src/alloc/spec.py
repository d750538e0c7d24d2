"""Direct allocation specs (``ncc.sbuf.alloc`` / ``mod_alloc``) and their trace-time evaluation.

An allocation buffer passed as ``buffer=`` carries a :class:`DirectSpec` (the user's function or
the modulo rule). ``nl.ndarray`` calls :func:`resolve_alloc`, which evaluates the function for
every logical block of the tensor *now*, checks each answer against the target's rules and
stores the concrete addresses as an IR literal in ``TensorDecl.alloc``::

    (kind, blocks, args)
    kind   "alloc" | "mod_alloc"
    blocks one tuple per logical block, row-major over the block dims:
           SBUF (start_partition, byte_addr), PSUM (bank, start_partition, byte_addr)
    args   sorted (name, literal) pairs: the mod_alloc arguments, or (("func", qualname),)

so the IR stays printable/parsable and later stages never call user code again.
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, NkiWarning, user_location, warn
from ..hw import get_target
from ..trace import context as C
from ..trace.buffers import Buffer
from ..trace.buffers import psum as _auto_psum
from ..trace.buffers import sbuf as _auto_sbuf

__all__ = ["AllocationConventionWarning", "DirectSpec", "DirectBuffer", "SBUFAllocation",
           "PSUMAllocation", "resolve_alloc", "is_direct", "direct_blocks", "modulo_index",
           "DIRECT_KINDS"]

DIRECT_KINDS = ("alloc", "mod_alloc")


@dataclass(frozen=True, eq=False)
class DirectSpec:
    """What an allocation buffer asks for: a placement function and how it was made.

    Attributes:
        kind: ``"alloc"`` (user function) or ``"mod_alloc"`` (modulo rule).
        func: ``func(idx, pdim_size, fdim_size)`` giving one block's address tuple.
        args: sorted ``(name, literal)`` pairs recorded in the IR.
    """

    kind: str
    func: object
    args: tuple

    def __repr__(self):
        return f"{self.kind}({', '.join(f'{k}={v!r}' for k, v in self.args)})"


class DirectBuffer(Buffer):
    """An allocation buffer (``ncc.sbuf.alloc(f)``...): a Buffer whose ``alloc`` is a spec."""

    __slots__ = ()


def _as_dims(value, what: str, api: str) -> tuple:
    if isinstance(value, (int, np.integer)):
        value = (value,)
    try:
        dims = tuple(int(v) for v in value)
    except TypeError:
        raise NkiError("wb_alloc_bad_argument", f"{api}: {what} must be a tuple of ints, got "
                       f"{value!r}", user_location()) from None
    if any(d <= 0 for d in dims):
        raise NkiError("wb_alloc_bad_argument", f"{api}: {what} entries must be positive, got "
                       f"{list(dims)}", user_location())
    return dims


def modulo_index(base: int, shape: tuple, scale: int, idx: tuple) -> int:
    """``base + scale * linear(idx mod shape)``: the documented modulo-allocation rule.

    Index and shape are paired from the left (extra block dims beyond ``shape`` are ignored);
    an empty ``shape`` means all ones, i.e. every block maps to ``base``.
    """
    shape = shape or (1,) * len(idx)
    pairs = list(zip(idx, shape, strict=False))  # why: unpaired dims are ignored
    linear = 0
    for (i, s) in pairs:
        linear = linear * s + i % s
    # why: linearisation is row-major over the paired dims only, so trailing unpaired shape
    # entries still scale the leading ones (as the reference implementation does)
    for s in shape[len(pairs):]:
        linear *= s
    return base + linear * scale


def _funcname(func) -> str:
    return getattr(func, "__qualname__", None) or type(func).__name__


class _Allocator:
    """Common part of ``ncc.sbuf`` / ``ncc.psum``."""

    buffer = ""
    _auto: Buffer

    def auto_alloc(self) -> Buffer:
        """The compiler-allocated marker (``nl.sbuf`` / ``nl.psum`` are exactly this object).

        Returns:
            Buffer: the automatic-allocation buffer.
        """
        return self._auto

    def alloc(self, func) -> DirectBuffer:
        """Direct allocation by a function evaluated at trace time for every logical block.

        Args:
            func: called as ``func(idx=..., pdim_size=..., fdim_size=...)`` (keywords, as NKI
                calls it); ``idx`` is the block index tuple, ``pdim_size`` the partitions of
                one tile, ``fdim_size`` its bytes per partition.
                Returns ``(start_partition, byte_addr)`` for SBUF and
                ``(bank_id, start_partition, byte_addr)`` for PSUM.

        Returns:
            DirectBuffer: pass it as ``buffer=`` to ``nl.ndarray``.
        """
        if not callable(func):
            raise NkiError("wb_alloc_bad_argument", f"ncc.{self.buffer}.alloc expects a "
                           f"callable, got {func!r}", user_location(),
                           "pass a function (idx, pdim_size, fdim_size) -> address tuple")
        return DirectBuffer(self.buffer, DirectSpec("alloc", func, (("func", _funcname(func)),)))

    def __repr__(self):
        return f"ncc.{self.buffer}"


class SBUFAllocation(_Allocator):
    """``ncc.sbuf``: SBUF allocation control (``auto_alloc``, ``alloc``, ``mod_alloc``)."""

    buffer = "sbuf"
    _auto = _auto_sbuf

    def mod_alloc(self, *, base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=()):
        """Modulo allocation: block ``idx`` lands on physical tile ``idx mod num_free_tiles``.

        Args:
            base_addr: byte address of physical tile 0 (per partition).
            base_partition: first partition (must be 0, as in NKI).
            num_par_tiles: physical tiles along the partition axis (per block dim).
            num_free_tiles: physical tiles along the free axis (per block dim); ``(2,)`` is
                double buffering.

        Returns:
            DirectBuffer: pass it as ``buffer=`` to ``nl.ndarray``.
        """
        api = "ncc.sbuf.mod_alloc"
        base_addr, base_partition = int(base_addr), int(base_partition)
        par, free = _as_dims(num_par_tiles, "num_par_tiles", api), \
            _as_dims(num_free_tiles, "num_free_tiles", api)
        if base_partition != 0:
            raise NkiError("wb_alloc_bad_argument", f"{api}: base_partition must be 0, got "
                           f"{base_partition}", user_location())

        def func(idx, pdim_size, fdim_size):
            return (modulo_index(base_partition, par, pdim_size, idx),
                    modulo_index(base_addr, free, fdim_size, idx))

        args = (("base_addr", base_addr), ("base_partition", base_partition),
                ("num_free_tiles", free), ("num_par_tiles", par))
        return DirectBuffer("sbuf", DirectSpec("mod_alloc", func, args))


class PSUMAllocation(_Allocator):
    """``ncc.psum``: PSUM allocation control (``auto_alloc``, ``alloc``, ``mod_alloc``)."""

    buffer = "psum"
    _auto = _auto_psum

    def mod_alloc(self, *, base_bank, base_addr=0, base_partition=0, num_bank_tiles=(),
                  num_par_tiles=(), num_free_tiles=()):
        """Modulo allocation over banks: block ``idx`` goes to bank ``base_bank + idx mod n``.

        Args:
            base_bank: first bank.
            base_addr: byte address inside the bank (must be 0).
            base_partition: first partition (must be 0).
            num_bank_tiles: banks cycled through (per block dim).
            num_par_tiles: must be empty or all ones.
            num_free_tiles: must be empty or all ones.

        Returns:
            DirectBuffer: pass it as ``buffer=`` to ``nl.ndarray``.
        """
        api = "ncc.psum.mod_alloc"
        base_bank = int(base_bank)
        banks = _as_dims(num_bank_tiles, "num_bank_tiles", api)
        for what, val in (("base_addr", base_addr), ("base_partition", base_partition)):
            if int(val) != 0:
                raise NkiError("wb_alloc_bad_argument", f"{api}: {what} must be 0 in this "
                               f"release, got {val}", user_location())
        for what, val in (("num_par_tiles", num_par_tiles), ("num_free_tiles", num_free_tiles)):
            if any(d != 1 for d in _as_dims(val, what, api)):
                raise NkiError("wb_alloc_bad_argument", f"{api}: {what} must be empty or all "
                               f"ones (no partial-bank allocation), got {val!r}", user_location())

        def func(idx, pdim_size, fdim_size):
            return (modulo_index(base_bank, banks, 1, idx), 0, 0)

        args = (("base_addr", 0), ("base_bank", base_bank), ("base_partition", 0),
                ("num_bank_tiles", banks))
        return DirectBuffer("psum", DirectSpec("mod_alloc", func, args))


# ----------------------------------------------------------------------------- evaluation
_KEYWORDS = ("idx", "pdim_size", "fdim_size")


class AllocationConventionWarning(NkiWarning):
    """An allocation function cannot take NKI's keyword call; it was called positionally."""


def _caller(spec: DirectSpec, name: str, loc):
    """How to call an allocation function: by keyword, as NKI does, else positionally.

    NKI calls ``func(idx=..., pdim_size=..., fdim_size=...)``, so a function declared with
    extra parameters bound by ``functools.partial`` (``partial(f, bank_map=m)`` with
    ``def f(bank_map, idx, pdim_size, fdim_size)``) works; a function whose parameters have
    other names would fail on NKI and is called positionally here with a warning.
    """
    func = spec.func
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):  # why: builtins/C callables have no signature to check
        return lambda idx, p, f: func(idx=idx, pdim_size=p, fdim_size=f)
    try:
        sig.bind(idx=(), pdim_size=0, fdim_size=0)
    except TypeError:
        pass
    else:
        return lambda idx, p, f: func(idx=idx, pdim_size=p, fdim_size=f)
    try:
        sig.bind((), 0, 0)
    except TypeError:
        raise NkiError("wb_alloc_bad_argument",
                       f"allocation function of '{name}' ({_funcname(func)}{sig}) cannot be "
                       "called as func(idx=..., pdim_size=..., fdim_size=...)", loc,
                       "declare it as def func(idx, pdim_size, fdim_size) (extra parameters "
                       "bound with functools.partial)") from None
    warn(AllocationConventionWarning,
         f"allocation function of '{name}' ({_funcname(func)}{sig}) does not take the keyword "
         "arguments idx, pdim_size, fdim_size that NKI passes; called positionally here, it "
         "fails on NKI", loc, "name its parameters idx, pdim_size, fdim_size")
    return func


def _ints(result, n: int, what: str, loc):
    ok = isinstance(result, (tuple, list)) and len(result) == n and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in result)
    if not ok:
        raise NkiError("wb_alloc_bad_result", f"allocation function must return {what}, got "
                       f"{result!r}", loc)
    return tuple(int(v) for v in result)


def _check_sbuf(name, idx, res, pdim, fdim, tgt, loc):
    start, addr = res
    starts = tgt.allowed_start_partitions(pdim)
    if start not in starts:
        raise NkiError("wb_alloc_start_partition",
                       f"SBUF tensor '{name}' block {idx}: start_partition {start} is not allowed "
                       f"for a tile of {pdim} partitions (allowed: {list(starts)})", loc,
                       "64 < P <= 128 starts at 0; 32 < P <= 64 at 0 or 64; P <= 32 at 0, 32, "
                       "64 or 96")
    usable, align = tgt.total_available_sbuf_size, tgt.sbuf_min_align
    if not 0 <= addr < usable:
        raise NkiError("wb_alloc_byte_addr",
                       f"SBUF tensor '{name}' block {idx}: byte_addr {addr} is outside the usable "
                       f"SBUF range [0, {usable}) per partition on {tgt.name}", loc)
    if addr % align:
        raise NkiError("wb_alloc_byte_addr",
                       f"SBUF tensor '{name}' block {idx}: byte_addr {addr} is not a multiple of "
                       f"sbuf_min_align ({align})", loc)
    if addr + fdim > usable:
        raise NkiError("wb_alloc_out_of_capacity",
                       f"SBUF tensor '{name}' block {idx}: bytes [{addr}, {addr + fdim}) per "
                       f"partition run past the usable SBUF size {usable} on {tgt.name}", loc,
                       "choose a lower byte_addr or a smaller tile")


def _check_psum(name, idx, res, pdim, fdim, tgt, loc):
    bank, start, addr = res
    if not 0 <= bank < tgt.psum_banks:
        raise NkiError("wb_alloc_psum_bank",
                       f"PSUM tensor '{name}' block {idx}: bank {bank} outside [0, "
                       f"{tgt.psum_banks})", loc)
    if start != 0 or addr != 0:
        raise NkiError("wb_alloc_psum_offset",
                       f"PSUM tensor '{name}' block {idx}: start_partition {start} and byte_addr "
                       f"{addr} must both be 0 (PSUM tiles start at the beginning of a bank)", loc)
    if fdim > tgt.psum_bank_bytes:
        raise NkiError("wb_alloc_psum_bank",
                       f"PSUM tensor '{name}': a tile of {fdim} bytes per partition does not fit "
                       f"one bank ({tgt.psum_bank_bytes} bytes)", loc)


_CHECKS = {"sbuf": (2, "(start_partition, byte_addr)", _check_sbuf),
           "psum": (3, "(bank_id, start_partition, byte_addr)", _check_psum)}


def resolve_alloc(buf: Buffer, shape: tuple, par_dim: int, dtype, name: str, api: str):
    """The IR ``alloc`` literal for a new tensor in ``buf`` (``None`` = automatic allocation).

    Evaluates a direct spec for every logical block and validates each address; under
    ``@ncc.force_auto_alloc`` direct specs are ignored (the tensor is auto-allocated).

    Args:
        buf: the normalised ``buffer=`` argument.
        shape: tensor dims (block dims, partition dim, free dims).
        par_dim: index of the partition dim.
        dtype: element dtype.
        name: tensor name (for messages).
        api: calling API name.

    Returns:
        ``None`` or ``(kind, blocks, args)``.
    """
    spec = buf.alloc
    if spec is None:
        return None
    if not isinstance(spec, DirectSpec):
        return spec  # why: an already-literal spec (e.g. from a parsed IR) passes through
    ctx = C.require(api)
    opts = dict(ctx.attrs.get("compile_opts", ()))
    if opts.get("force_auto_alloc"):
        return None
    if buf.name not in _CHECKS:
        raise NkiError("wb_alloc_bad_argument", f"{api}: direct allocation is only for SBUF and "
                       f"PSUM, not {buf.name}", user_location())
    loc = user_location()
    tgt = get_target(ctx.target)
    blocks, pdim = tuple(shape[:par_dim]), int(shape[par_dim])
    fdim = int(np.prod(shape[par_dim + 1:], dtype=np.int64)) * D.itemsize(D.canonical(dtype))
    n, what, check = _CHECKS[buf.name]
    call = _caller(spec, name, loc)
    out = []
    for idx in itertools.product(*[range(b) for b in blocks]):
        try:
            res = call(tuple(idx), pdim, fdim)
        except NkiError:
            raise
        except Exception as exc:  # why: any failure of user code is reported as such
            raise NkiError("wb_alloc_bad_result", f"allocation function of '{name}' raised "
                           f"{type(exc).__name__}: {exc} for block {tuple(idx)}", loc) from exc
        res = _ints(res, n, what, loc)
        check(name, tuple(idx), res, pdim, fdim, tgt, loc)
        out.append(res)
    return (spec.kind, tuple(out), spec.args)


def is_direct(alloc) -> bool:
    """Whether a decl's ``alloc`` literal is a direct allocation."""
    return isinstance(alloc, tuple) and bool(alloc) and alloc[0] in DIRECT_KINDS


def direct_blocks(decl) -> list:
    """``[(block_idx, address_tuple), ...]`` of a directly allocated decl, row-major."""
    blocks = tuple(decl.shape[:decl.par_dim])
    idxs = itertools.product(*[range(b) for b in blocks])
    return list(zip(idxs, decl.alloc[1], strict=True))
