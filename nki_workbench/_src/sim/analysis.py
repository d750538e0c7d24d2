"""IR facts both executors need about loops and programs (pure functions of the IR).

Race tracking is paid only where the IR cannot prove a kernel race-free:

* :func:`read_and_written`: tensors an ``affine_range`` body both reads and writes (a value
  may be carried from one iteration to another: read-after-write races);
* :func:`overlapping_writes`: per ``affine_range`` loop, outer tensors two iterations may write
  at the same element, when the result is seen after the loop (an output, or a later read):
  which iteration wins depends on the order (write-after-write races);
* :func:`shared_overlaps`: tensors in shared HBM that two SPMD programs may write at the same
  element;
* :func:`fully_written_outputs`: outputs every run writes whole, which need no written-mask
  (nor a poison fill).

A write is proven separate across the values of a variable ``v`` when one dimension indexes
every write to the tensor as ``c * v + rest``, one ``c`` for all, with ``rest`` (free of ``v``)
spanning less than ``|c * step|`` over every value of the loops inside; the terms in enclosing
loop variables must be the same in every write (they are constants while ``v`` varies).
"""

from __future__ import annotations

import itertools

import numpy as np

from ..ir import Access, Alloc, Inst, Loop, Scalar, walk_insts, walk_stmts
from ..ir import expr as E
from ..ir.opcodes import OPCODES
from .access import CompiledAccess, OOBError

__all__ = ["read_and_written", "overlapping_writes", "shared_overlaps", "root",
           "starts_accumulation_group", "fully_written_outputs", "COVERAGE_BUDGET"]


def root(name, decls):
    """The tensor a view ultimately aliases (``name`` itself when it is no view)."""
    while decls[name].base is not None:
        name = decls[name].base
    return name


def starts_accumulation_group(inst, decls) -> bool:
    """Whether ``inst`` is a TensorE ``+=`` into PSUM, whose unwritten elements count as 0.

    The first matmul of a PSUM accumulation group overwrites the bank instead of adding to it,
    so ``psum[...] += nisa.nc_matmul(...)`` into a fresh ``nl.ndarray`` (the only way in a
    directly allocated kernel, where ``nl.zeros`` is refused) accumulates from zero, as NKI's
    own simulator and published allocated kernels rely on.
    """
    if inst.attr("acc") != "add" or not inst.outs:
        return False
    info = OPCODES.get(inst.op)
    if info is None or info.engine != "tensor":
        return False
    decl = decls[inst.outs[0].tensor]
    while decl.base is not None:
        decl = decls[decl.base]
    return decl.buffer == "psum"


def read_and_written(body, decls) -> set:
    """Root tensor names that the statements both read and write (not by accumulation)."""
    reads, writes = set(), set()
    for inst in walk_insts(body):
        for o in inst.ins:
            if isinstance(o, Access):
                reads.add(root(o.tensor, decls))
        if inst.attr("acc") is None:
            for o in inst.outs:
                writes.add(root(o.tensor, decls))
    return reads & writes


def _reads(body, decls) -> dict:
    """Root tensor -> number of reads (operands and run-time index tiles) in ``body``."""
    out: dict = {}
    for inst in walk_insts(body):
        exprs = [] if inst.mask is None else [inst.mask]
        for o in inst.ins + inst.outs:
            if isinstance(o, Access):
                exprs += [e for e in (o.index or ()) if e is not None]
            elif isinstance(o, (E.Affine, E.Pred)):
                exprs.append(o)
        names = [o.tensor for o in inst.ins if isinstance(o, Access)]
        names += [d.tensor for e in exprs for d in E.dyns(E.as_expr(e))]
        for n in names:
            r = root(n, decls)
            out[r] = out.get(r, 0) + 1
    return out


def _writes(body, decls) -> dict:
    """Root tensor -> its non-accumulating write accesses in ``body``.

    ``None``: written under two names (a view and its root, or two views).
    """
    out: dict = {}
    via: dict = {}
    for inst in walk_insts(body):
        if inst.attr("acc") is not None:
            continue
        for o in inst.outs:
            r = root(o.tensor, decls)
            if via.setdefault(r, o.tensor) != o.tensor:
                out[r] = None  # why: indices of two names (a view and its root) do not compare
            elif out.get(r, ()) is not None:
                # why: a view is a bijection of elements, so accesses all through the same
                # view that are separate in its coordinates are separate in the root's
                out.setdefault(r, []).append(o)
    return out


def _ranges(body, extra=None) -> dict:
    """``var -> (lo, hi)`` of every loop in ``body`` (sibling loops sharing a name: the union)."""
    out = dict(extra or {})
    for s in walk_stmts(body):
        if isinstance(s, Loop) and s.trip_count:
            r = range(s.start, s.stop, s.step)
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1])
            if s.var in out:
                lo, hi = min(lo, out[s.var][0]), max(hi, out[s.var][1])
            out[s.var] = (lo, hi)
    return out


def separate(accs, var: str, step: int, inner: dict) -> bool:
    """Whether the accesses of different values of ``var`` never touch the same element.

    ``inner``: ranges of the variables that vary within one value of ``var``; any other
    variable is a constant then and must appear alike in every access.
    """
    v = E.Var(var)
    ndim = {len(a.index) for a in accs if a.index is not None}
    if any(a.index is None for a in accs) or len(ndim) != 1:
        return False
    for d in range(ndim.pop()):
        coef, lo, hi, fixed = None, None, None, None
        for a in accs:
            e = a.index[d]
            if e is None:
                break
            e = E.as_expr(e)
            if not isinstance(e, E.Affine):
                break
            terms = dict(e.terms)
            k = terms.pop(v, None)
            if k is None or (coef is not None and k != coef):
                break
            const = {t: c for t, c in terms.items() if isinstance(t, E.Var) and t.name not in inner}
            rest = E.Affine(tuple((t, c) for t, c in terms.items() if t not in const), e.const)
            if var in E.free_vars(rest) or (fixed is not None and const != fixed):
                break
            try:
                a_lo, a_hi = E.bounds(rest, inner)
            except (ValueError, KeyError):
                break
            coef, fixed = k, const
            lo = a_lo if lo is None else min(lo, a_lo)
            hi = a_hi if hi is None else max(hi, a_hi)
        else:
            if coef is not None and hi - lo < abs(coef * step):
                return True
    return False


def overlapping_writes(kernel) -> dict:
    """``{affine Loop: root tensors its iterations may write at the same element}``.

    Only tensors declared before the loop count, and only when the result is observed after
    the loop: a kernel output, an ``inout`` parameter, or a tensor read outside the loop.
    Loops are keyed structurally (equal loops share their set).
    """
    decls = kernel.decls()
    total = _reads(kernel.body, decls)
    seen = set(kernel.outputs) | {p.name for p in kernel.params if p.kind == "inout"}
    out: dict = {}

    def walk(body, declared):
        declared = set(declared)
        for s in body:
            if isinstance(s, Alloc):
                declared.add(s.decl.name)
            elif isinstance(s, Loop):
                if s.kind == "affine" and s.trip_count > 1:
                    inside = _reads(s.body, decls)
                    inner = _ranges(s.body)
                    hits = set()
                    for name, accs in _writes(s.body, decls).items():
                        if name not in declared or decls[name].kind == "const":
                            continue
                        if name not in seen and total.get(name, 0) <= inside.get(name, 0):
                            continue  # why: nothing after the loop sees which iteration won
                        if accs is None or not separate(accs, s.var, s.step, inner):
                            hits.add(name)
                    if hits:
                        out[s] = out.get(s, frozenset()) | frozenset(hits)
                walk(s.body, declared)
    walk(kernel.body, {p.name for p in kernel.params})
    return out


def shared_overlaps(kernel) -> frozenset:
    """Shared tensors two SPMD programs may write at the same element.

    Shared: outputs, ``shared_hbm`` tensors and ``inout`` parameters. Empty for one program.
    """
    grid = tuple(kernel.grid)
    axes = [a for a, n in enumerate(grid) if n > 1]
    if not axes:
        return frozenset()
    decls = kernel.decls()
    shared = {n for n, d in decls.items() if d.base is None and (
        d.kind in ("output", "inout") or d.buffer == "shared_hbm")}
    pid_ranges = {f"pid{a}": (0, n - 1) for a, n in enumerate(grid)}
    inner = _ranges(kernel.body, pid_ranges)
    hits = set()
    for name, accs in _writes(kernel.body, decls).items():
        if name not in shared:
            continue
        if accs is None or not all(
                separate(accs, f"pid{a}", 1, {k: r for k, r in inner.items() if k != f"pid{a}"})
                for a in axes):
            hits.add(name)
    return frozenset(hits)


# ----------------------------------------------------------------------------- coverage
COVERAGE_BUDGET = 1 << 24
"""Most index elements :func:`fully_written_outputs` enumerates before it gives up (sound)."""


def fully_written_outputs(kernel, max_writes: int | None = None) -> frozenset:
    """Outputs that every run provably writes whole, so the program needs no written-mask.

    An output qualifies when nothing reads it or views it, every write to it is unmasked,
    non-accumulating, has no run-time (``Dyn``) index, stays in bounds, and the writes of all
    loop iterations and SPMD programs together cover every element. The IR has no branches,
    so an unmasked instruction runs once per value of its enclosing loop variables; the
    coverage is enumerated with those values (within :data:`COVERAGE_BUDGET`). Writes inside
    a ``dynamic`` loop (which may run zero times) add no coverage.

    Args:
        kernel: the traced kernel.
        max_writes: when given, an output whose writes run more than this many times in all
            (iterations times programs) is not enumerated and does not qualify: the bound
            keeps the proof cheap where it is run on every new specialisation.
    """
    decls = kernel.decls()
    names = {n for n in kernel.outputs if decls[n].base is None and (
        decls[n].kind == "output" or decls[n].buffer == "shared_hbm")}
    names -= {d.base for d in decls.values() if d.base is not None}
    grid = tuple(kernel.grid) or (1,)
    pids = [{f"pid{a}": int(v) for a, v in enumerate(p)} for p in np.ndindex(*grid)]
    writes = {n: [] for n in names}

    def refs(inst):
        exprs = [] if inst.mask is None else [inst.mask]
        for a in inst.ins + inst.outs:
            if isinstance(a, Access):
                exprs += list(a.index or ())
            elif not isinstance(a, Scalar):
                exprs.append(a)
        return {d.tensor for e in exprs for d in E.dyns(e)}

    def walk(body, loops):
        for s in body:
            if isinstance(s, Loop):
                # why: a dynamic loop's iterations are decided at run time (maybe none)
                r = range(0) if s.kind == "dynamic" else range(s.start, s.stop, s.step)
                walk(s.body, loops + [(s.var, r)])
            elif isinstance(s, Inst):
                names.difference_update(refs(s))
                names.difference_update(a.tensor for a in s.ins if isinstance(a, Access))
                for o in s.outs:
                    if o.tensor in writes:
                        if s.mask is not None or s.attr("acc") is not None or any(
                                E.dyns(e) for e in (o.index or ()) if e is not None):
                            names.discard(o.tensor)
                        writes[o.tensor].append((o, loops))
    walk(kernel.body, [])
    if max_writes is not None:
        names = {n for n in names if len(pids) * sum(
            int(np.prod([len(r) for _, r in loops])) for _, loops in writes[n]) <= max_writes}
    return frozenset(n for n in names if _covers(decls[n].shape, writes[n], pids))


def _covers(shape, writes, pids) -> bool:
    shape = tuple(shape)
    seen = np.zeros(shape, bool)
    budget = COVERAGE_BUDGET
    for acc, loops in writes:
        idx = acc.index
        if idx is None:
            if all(len(r) for _, r in loops):
                return True  # (a whole-tensor write that runs at least once)
            continue
        n = int(np.prod(E.grid_shape(idx) or (1,)))
        ca = CompiledAccess(acc, shape)
        for pid in pids:
            for vals in itertools.product(*(r for _, r in loops)):
                budget -= n
                if budget < 0:
                    return False
                env = dict(pid, **{v: x for (v, _), x in zip(loops, vals, strict=True)})
                if ca.fast and ca.slice_shape:  # (no slice: one element, below)
                    # why: a basic-slice region is marked as a view (index arrays of a
                    # [128, 1024] store cost ~0.8 ms each); the slices are bounds-checked
                    try:
                        ca.view_for_write(seen, env)[...] = True
                        continue
                    except OOBError:
                        return False
                    except ValueError:
                        pass  # (an unusual slice: the index arrays decide)
                try:
                    arrs = [np.asarray(E.evaluate(e, env), np.int64) for e in idx]
                except (ValueError, KeyError):
                    return False
                arrs = np.broadcast_arrays(*arrs)
                if any(a.size and (a.min() < 0 or a.max() >= s)
                       for a, s in zip(arrs, shape, strict=True)):
                    return False
                seen[tuple(arrs)] = True
    return bool(seen.all())
