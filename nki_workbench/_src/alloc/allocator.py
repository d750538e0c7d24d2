"""Placing every SBUF/PSUM tensor of a kernel: direct addresses, an auto allocator, a stack one.

``allocate(kernel)`` is a pure function of the IR (cached per kernel object):

* **direct** tensors (``ncc.sbuf.alloc`` / ``mod_alloc``...) sit where their trace-time addresses
  say; one record per distinct physical tile (modulo allocation maps many blocks to one tile).
* **auto** tensors are placed first-fit in order of their first use: SBUF per partition range
  (start partitions follow the 0/32/64/96 quantisation) and byte address in the target's usable
  size; PSUM tiles never cross a bank, and a tile written by TensorE (an accumulation group) holds
  its bank alone while live, so at most ``psum_banks`` groups are open at once.
* **stack** (``@ncc.enable_stack_allocator``): a bump pointer per scope; a tensor lives from its
  ``Alloc`` to the end of its block, freed in LIFO order.

Failure to place is an over-subscription error naming the buffer, the peak bytes per partition,
the capacity and the five largest tensors live at the peak with their source lines.
``allocate_pending_tensors`` (called at the end of every trace, as NKI's
``TraceKernel.allocate_pending_tensors``) also enforces the kernel-level rules.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, NkiWarning, warn
from ..hw import get_target
from .kernel_opts import check_kernel_fields
from .liveness import ONCHIP, Liveness, liveness
from .spec import direct_blocks, is_direct

__all__ = ["Allocation", "AllocationResult", "AllocationOverlapWarning", "allocate",
           "allocate_pending_tensors", "demand"]


class AllocationOverlapWarning(NkiWarning):
    """Two directly allocated tensors that are live together share SBUF/PSUM bytes."""


@dataclass(frozen=True)
class Allocation:
    """One placed region of SBUF or PSUM.

    Attributes:
        name: display name (tensor, with ``[block]`` / ``#copy`` when it is one of several).
        tensor: the tensor's IR name.
        buffer: ``"sbuf"`` or ``"psum"``.
        loc: the tensor's ``file:line``.
        start_partition: first partition.
        num_partitions: partitions spanned.
        byte_addr: bytes into the partition (SBUF) or into the bank (PSUM).
        size_bytes: bytes per partition.
        bank: PSUM bank (``None`` for SBUF).
        offset: bytes into the partition's whole buffer (PSUM: ``bank * bank_bytes + byte_addr``).
        live: ``(first, last)`` instruction positions, inclusive.
        kind: ``"auto"``, ``"stack"``, ``"alloc"`` or ``"mod_alloc"``.
        blocks: logical block indices stored here.
        copies: ``multi_buffer`` copies included in ``size_bytes``.
        accumulation: holds a PSUM accumulation group (TensorE output).
        live_ns: ``(start_ns, end_ns)`` once a time model supplied it (else ``None``).
    """

    name: str
    tensor: str
    buffer: str
    loc: str | None
    start_partition: int
    num_partitions: int
    byte_addr: int
    size_bytes: int
    bank: int | None
    offset: int
    live: tuple
    kind: str
    blocks: tuple = ()
    copies: int = 1
    accumulation: bool = False
    live_ns: tuple | None = None


@dataclass(frozen=True)
class AllocationResult:
    """Placement of a kernel's on-chip tensors.

    Attributes:
        sbuf: SBUF allocations.
        psum: PSUM allocations.
        liveness: the static liveness it was computed from.
        target: target name.
        strategy: ``{"sbuf": "auto"|"stack"|"direct"|"none", "psum": ...}``.
    """

    sbuf: tuple
    psum: tuple
    liveness: Liveness
    target: str
    strategy: dict = field(default_factory=dict)


@dataclass
class _Item:
    tensor: str
    name: str
    life: object
    pdim: int
    size: int
    blocks: tuple
    copies: int
    exclusive: bool = False
    starts: tuple = (0,)


def _geom(decl):
    blocks = tuple(decl.shape[:decl.par_dim])
    pdim = int(decl.shape[decl.par_dim]) if decl.shape else 1
    fdim = int(np.prod(decl.shape[decl.par_dim + 1:], dtype=np.int64)) * \
        D.itemsize(D.canonical(decl.dtype))
    return blocks, pdim, fdim


def _overlap(a0, a1, b0, b1) -> bool:
    return a0 < b1 and b0 < a1


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def demand(allocs, num_positions: int, num_partitions: int) -> np.ndarray:
    """Bytes live per ``[position, partition]`` (the sum of live allocations' sizes)."""
    diff = np.zeros((num_positions + 1, num_partitions), dtype=np.int64)
    for a in allocs:
        p0, p1 = a.start_partition, a.start_partition + a.num_partitions
        diff[a.live[0], p0:p1] += a.size_bytes
        diff[a.live[1] + 1, p0:p1] -= a.size_bytes
    return np.cumsum(diff, axis=0)[:num_positions]


def _record(it: _Item, buffer, start, addr, kind, bank=None, bank_bytes=0, live=None):
    life = it.life
    return Allocation(it.name, it.tensor, buffer, life.decl.loc, start, it.pdim, addr, it.size,
                      bank, (bank or 0) * bank_bytes + addr, live or (life.start, life.end), kind,
                      it.blocks, it.copies, it.exclusive)


# ----------------------------------------------------------------------------- auto SBUF
def _place_sbuf(items, cap, align, insts, placed_fixed=()):
    # why: items come in order of their first position, so a placement whose life ended
    # before this item's start is dead for every later item too: dropping it keeps the scan
    # to what is live (linear in the kernel size, where scanning every placement was quadratic)
    active = list(placed_fixed)
    out = []
    for it in sorted(items, key=lambda i: (i.life.start, i.life.order, i.name)):
        lo, hi = it.life.start, it.life.end
        active = [p for p in active if p.live[1] >= lo]
        live = [p for p in active if p.live[0] <= hi]
        best = None
        for sp in it.starts:
            near = [p for p in live if _overlap(sp, sp + it.pdim, p.start_partition,
                                                p.start_partition + p.num_partitions)]
            for a in sorted({0} | {_align(p.byte_addr + p.size_bytes, align) for p in near}):
                if a + it.size > cap:
                    break
                if not any(_overlap(a, a + it.size, p.byte_addr, p.byte_addr + p.size_bytes)
                           for p in near):
                    if best is None or (a, sp) < best:
                        best = (a, sp)
                    break
        if best is None:
            _oversubscribed("sbuf", it, list(placed_fixed) + out, cap, insts, 128)
        rec = _record(it, "sbuf", best[1], best[0], "auto")
        out.append(rec)
        active.append(rec)
    return out


# ----------------------------------------------------------------------------- auto PSUM
def _place_psum(items, tgt, insts, placed_fixed=()):
    banks: list[list] = [[] for _ in range(tgt.psum_banks)]
    for p in placed_fixed:
        banks[p.bank].append(p)
    out = []
    bb = tgt.psum_bank_bytes
    for it in sorted(items, key=lambda i: (i.life.start, i.life.order, i.name)):
        lo, hi = it.life.start, it.life.end
        spot = None
        for b, held in enumerate(banks):
            live = [p for p in held if p.live[0] <= hi and lo <= p.live[1]]
            if it.exclusive:
                if not live:
                    spot = (b, 0)
            elif not any(p.accumulation for p in live):
                for a in sorted({0} | {_align(p.byte_addr + p.size_bytes, tgt.psum_min_align)
                                       for p in live}):
                    if a + it.size <= bb and not any(
                            _overlap(a, a + it.size, p.byte_addr, p.byte_addr + p.size_bytes)
                            for p in live):
                        spot = (b, a)
                        break
            if spot is not None:
                break
        if spot is None:
            _oversubscribed("psum", it, list(placed_fixed) + out, tgt.psum_bytes_per_partition,
                            insts, 128,
                            banks=tgt.psum_banks)
        rec = _record(it, "psum", 0, spot[1], "auto", spot[0], bb)
        out.append(rec)
        banks[spot[0]].append(rec)
    return out


# ----------------------------------------------------------------------------- stack
def _place_stack(items, buffer, tgt, insts):
    out = []
    bb = tgt.psum_bank_bytes
    cap = tgt.total_available_sbuf_size if buffer == "sbuf" else tgt.psum_bytes_per_partition
    for it in sorted(items, key=lambda i: (i.life.alloc_pos, i.life.order, i.name)):
        live = (min(it.life.alloc_pos, it.life.start), it.life.scope_end)
        top = max([p.offset + (bb if p.accumulation else p.size_bytes) for p in out
                   if p.live[0] <= live[1] and live[0] <= p.live[1]] or [0])
        if buffer == "psum":
            top = _align(top, tgt.psum_min_align)
            if it.exclusive or top % bb + it.size > bb:
                top = _align(top, bb)
        else:
            top = _align(top, tgt.sbuf_min_align)
        if top + it.size > cap:
            _oversubscribed(buffer, it, out, cap, insts, 128, live=live)
        if buffer == "psum":
            rec = _record(it, buffer, 0, top % bb, "stack", top // bb, bb, live=live)
        else:
            rec = _record(it, buffer, 0, top, "stack", live=live)
        out.append(rec)
    return out


# ----------------------------------------------------------------------------- direct
def _direct(life, buffer, bank_bytes):
    decl = life.decl
    _, pdim, fdim = _geom(decl)
    regions: dict = {}
    for idx, addr in direct_blocks(decl):
        regions.setdefault(tuple(addr), []).append(idx)
    out = []
    many = len(regions) > 1
    for addr, idxs in regions.items():
        bank, start, byte = (addr if buffer == "psum" else (None,) + addr)
        name = f"{decl.name}[{','.join(map(str, idxs[0]))}]" if many else decl.name
        out.append(Allocation(name, decl.name, buffer, decl.loc, start, pdim, byte, fdim, bank,
                              (bank or 0) * bank_bytes + byte, (life.start, life.end),
                              decl.alloc[0], tuple(idxs), 1, life.tensor_engine))
    return out


def _check_direct_overlaps(recs, buffer):
    for a, b in itertools.combinations(recs, 2):
        if a.tensor == b.tensor or not _overlap(a.live[0], a.live[1] + 1, b.live[0], b.live[1] + 1):
            continue
        if _overlap(a.start_partition, a.start_partition + a.num_partitions, b.start_partition,
                    b.start_partition + b.num_partitions) and \
                _overlap(a.offset, a.offset + a.size_bytes, b.offset, b.offset + b.size_bytes):
            warn(AllocationOverlapWarning,
                 f"{buffer.upper()} tensors '{a.name}' ({a.loc}) and '{b.name}' ({b.loc}) are live "
                 f"at the same time and share bytes [{max(a.offset, b.offset)}, "
                 f"{min(a.offset + a.size_bytes, b.offset + b.size_bytes)}) per partition; on "
                 "hardware one overwrites the other", a.loc,
                 "give them disjoint addresses or make their lifetimes disjoint")


# ----------------------------------------------------------------------------- errors
def _oversubscribed(buffer, it, placed, cap, insts, nparts, banks=None, live=None):
    live = live or (it.life.start, it.life.end)
    fake = Allocation(it.name, it.tensor, buffer, it.life.decl.loc, 0, it.pdim, 0, it.size, None,
                      0, live, "auto", it.blocks, it.copies, it.exclusive)
    allrecs = list(placed) + [fake]
    npos = max(1, len(insts), max(a.live[1] for a in allrecs) + 1)
    dem = demand(allrecs, npos, nparts)
    window = dem[live[0]:live[1] + 1]
    pos = live[0] + int(np.unravel_index(int(np.argmax(window)), window.shape)[0])
    peak = int(dem.max())
    at = [a for a in allrecs if a.live[0] <= pos <= a.live[1]]
    top = sorted(at, key=lambda a: (-a.size_bytes, a.name))[:5]
    largest = "; ".join(f"'{a.name}' {a.size_bytes} B/partition"
                        + (f" x{a.copies} buffers" if a.copies > 1 else "") + f" at {a.loc}"
                        for a in top)
    where = insts[pos].loc if pos < len(insts) else None
    if buffer == "psum" and it.exclusive:
        groups = sum(1 for a in at if a.accumulation)
        msg = (f"PSUM over-subscribed: {groups} accumulation groups are open at once (each holds "
               f"one of the {banks} banks), peak {int(window.max())} bytes per partition live, "
               f"capacity {cap} bytes per partition ({banks} banks)")
    else:
        frag = "" if peak > cap else (f"; '{it.name}' ({it.size} B) found no contiguous gap "
                                      "(fragmentation)")
        msg = (f"{buffer.upper()} over-subscribed: peak {max(peak, int(window.max()))} bytes per "
               f"partition live at once, capacity {cap} bytes per partition{frag}")
    raise NkiError("wb_alloc_oversubscribed", f"{msg}; largest live tensors at instruction {pos}"
                   f" ({where}): {largest}", it.life.decl.loc,
                   "use smaller tiles, end tile lifetimes earlier (declare tiles inside the loop "
                   "that uses them) or lower the multi_buffer factor")


# ----------------------------------------------------------------------------- driver
def _items(lives, buffer):
    out = []
    for life in lives:
        decl = life.decl
        blocks, pdim, fdim = _geom(decl)
        nblk = int(np.prod(blocks, dtype=np.int64)) if blocks else 1
        if buffer == "sbuf":
            out.append(_Item(decl.name, decl.name, life, pdim, nblk * fdim * life.copies,
                             tuple(itertools.product(*[range(b) for b in blocks])), life.copies,
                             False, ()))
            continue
        keys = list(itertools.product(*[range(b) for b in blocks]))
        for idx, c in itertools.product(keys, range(life.copies)):
            suffix = (f"[{','.join(map(str, idx))}]" if len(keys) > 1 else "") + \
                (f"#{c}" if life.copies > 1 else "")
            out.append(_Item(decl.name, decl.name + suffix, life, pdim, fdim, (idx,), 1,
                             life.tensor_engine))
    return out


_CACHE: dict = {}


def allocate(kernel) -> AllocationResult:
    """Place every SBUF/PSUM tensor of ``kernel`` (cached per kernel object).

    Args:
        kernel: the IR.

    Returns:
        AllocationResult

    Raises:
        NkiError: ``wb_alloc_oversubscribed`` when the tensors live at once do not fit.
    """
    hit = _CACHE.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    tgt = get_target(kernel.target)
    live = liveness(kernel)
    stack = dict(kernel.attr("allocator", ()) or ()).get("kind") == "stack"
    res, strategy = {}, {}
    for buffer in ONCHIP:
        lives = [t for t in live.tensors.values() if t.decl.buffer == buffer]
        direct = [t for t in lives if is_direct(t.decl.alloc)]
        auto = [t for t in lives if not is_direct(t.decl.alloc)]
        recs = [r for t in direct for r in _direct(t, buffer, tgt.psum_bank_bytes)]
        _check_direct_overlaps(recs, buffer)
        items = _items(auto, buffer)
        for it in items:
            if buffer == "sbuf":
                it.starts = tgt.allowed_start_partitions(it.pdim)
        if stack and items:
            recs += _place_stack(items, buffer, tgt, live.insts)
        elif buffer == "sbuf" and items:
            # why: in a directly allocated kernel the auto tensors are instruction results,
            # placed in the space the direct tensors leave free while they are live
            recs += _place_sbuf(items, tgt.total_available_sbuf_size, tgt.sbuf_min_align,
                                live.insts, placed_fixed=tuple(recs))
        elif items:
            recs += _place_psum(items, tgt, live.insts, placed_fixed=tuple(recs))
        strategy[buffer] = ("stack" if stack else "auto") if auto else \
            ("direct" if direct else "none")
        res[buffer] = tuple(sorted(recs, key=lambda a: (a.live[0], a.offset, a.name)))
    out = AllocationResult(res["sbuf"], res["psum"], live, tgt.name, strategy)
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[id(kernel)] = (kernel, out)
    return out


def allocate_pending_tensors(kernel, loc=None):
    """End-of-trace allocation: kernel-level rules, then placement (errors raise).

    Args:
        kernel: the freshly traced IR.
        loc: the kernel definition's ``file:line`` (for kernel-level errors).

    Returns:
        AllocationResult
    """
    check_kernel_fields(kernel, loc)
    return allocate(kernel)
