"""Race tracking of the interpreter: ``affine_range`` iterations and SPMD programs.

Each tracked tensor carries an ``int64`` stamp per element, ``(writer << SITE_BITS) | site``:
``writer`` is the id of the innermost ``affine_range`` iteration that wrote it (``Buf.stamp``)
or the program's ordinal + 1 (``Buf.owner``, shared HBM only), ``site`` the writing
instruction (its kernel line is ``Program.sites[site]``). Iteration ids grow in execution
order and are unique across the whole run, so "written by an earlier iteration of loop ``v``
in this run of it" is ``loop_lo[v] < writer < iter_start[v]``.

Writes and reads through a view (``t.reshape(...)``, ``t.view(dtype)`` of any width, views of
views) are tracked on the tensor the view aliases: the view's stamps are the root's stamp arrays
in the view's shape (:func:`_arrays`), so an overlap is seen whichever name each write used. A
bitcast to a narrower dtype refines the root's stamps to that width (one stamp per narrow
element, so writes of separate halves of one wide element never overlap); an access of wider
elements sees each as its ``k`` stamps (``k`` component arrays).
Several destinations of one instruction (``activation_reduce``'s ``reduce_res``...) are each a
write with its own check. :func:`view_writes` names the tracked tensors a kernel writes
through a view, which the compiled executor leaves to the interpreter.

Which tensors are tracked is decided statically (:mod:`.analysis`): only writes the IR cannot
prove separate cost anything. An overlap that writes the value already there is no race (the
order cannot change the result), so only elements whose value changes are reported.
"""

from __future__ import annotations

import bisect

import numpy as np

from ..errors import LoopCarriedDependencyWarning, NkiError, SpmdRaceWarning, warn

__all__ = ["SITE_BITS", "RaceSpec", "before_write", "after_write", "on_read",
           "enter_iteration", "is_view", "tracked_read", "view_writes", "indexed_write",
           "view_fully_written", "push_init", "pull_init"]

SITE_BITS = 20
"""Low bits of a stamp naming the writing instruction (a kernel has fewer write sites)."""
_SITE_MASK = (1 << SITE_BITS) - 1


class RaceSpec:
    """What one instruction's write must stamp and check (built once per instruction)."""

    __slots__ = ("site", "waw", "stamp", "spmd")

    def __init__(self, site: int, waw: tuple, stamp: bool, spmd: bool):
        self.site = site
        self.waw = waw  # enclosing affine loop variables whose iterations must not overlap
        self.stamp = stamp  # keep affine iteration stamps (a read or write check needs them)
        self.spmd = spmd  # check and stamp the writing program


def enter_iteration(st, var, value):
    """Record that the current iteration id of loop ``var`` runs ``var = value``."""
    starts, values = st.iters[var]
    starts.append(st.iter_id)
    values.append(value)


def _value_of(st, var, writer):
    """The value of loop ``var`` in the iteration that produced ``writer`` (an id)."""
    starts, values = st.iters.get(var, ((), ()))
    k = bisect.bisect_right(starts, writer) - 1
    return values[k] if k >= 0 else "?"


def _report(prog, st, key, category, msg, loc, hint):
    done = st.shared.setdefault("__races__", set())
    if key in done:
        return  # why: a loop of many iterations reports one race once, not once per trip
    done.add(key)
    if st.params.races == "error":
        raise NkiError("wb_race", msg, loc, hint)
    warn(category, msg, loc, hint)


def is_view(buf) -> bool:
    """Whether ``buf`` is a view (its ``stamp`` slot holds the buffer it aliases)."""
    return buf.stamp is not None and not isinstance(buf.stamp, np.ndarray)


def _root(buf):
    while is_view(buf):
        buf = buf.stamp
    return buf


def _arrays(buf, attr, create=False):
    """The root's ``attr`` array (``stamp`` or ``owner``) seen in ``buf``'s shape, as components.

    A list of ``k`` arrays in ``buf``'s shape, each a numpy view of the root's stamps (so writes
    land there): component ``c`` holds stamp ``c`` of every element, ``k`` being how many stamps
    one element of ``buf`` spans (1 unless the root's stamps were refined by a narrower bitcast
    view). ``None`` when the root has none yet and ``create`` is false.
    """
    root = _root(buf)
    arr = getattr(root, attr)
    if arr is None:
        if not create:
            return None
        arr = np.zeros(root.data.shape, dtype=np.int64)
        setattr(root, attr, arr)
    if arr.size < buf.data.size:  # why: a narrower bitcast: one stamp per narrow element
        arr = np.repeat(arr.reshape(-1), buf.data.size // arr.size)
        setattr(root, attr, arr)
    k = arr.size // buf.data.size
    if k == 1:
        return [arr if arr.shape == buf.data.shape else arr.reshape(buf.data.shape)]
    flat = arr.reshape(-1, k)
    return [flat[:, c].reshape(buf.data.shape) for c in range(k)]


def _label(buf):
    root = _root(buf)
    return f"'{buf.name}'" if root is buf else f"'{root.name}' (through view '{buf.name}')"


def view_fully_written(buf) -> bool:
    """Whether ``buf`` is a view whose root has since been written whole (then drop its mask).

    A view's written-mask is its root's, seen in the view's shape; a whole write of the root
    drops the root's mask, which the view's copy must follow.
    """
    if is_view(buf) and _root(buf).init is None:
        buf.init = None
        return True
    return False


def _remask(mask, size, shape):
    """The written-mask ``mask`` of some elements seen as ``size`` elements of the same bytes.

    An element counts as written when every element it overlaps was (a wide element of two
    narrow ones needs both).
    """
    flat = mask.reshape(-1)
    if flat.size > size:
        flat = flat.reshape(size, -1).all(1)
    elif flat.size < size:
        flat = np.repeat(flat, size // flat.size)
    return flat.reshape(shape)


def push_init(buf):
    """After a write through view ``buf``: mark its written elements in the tensors it aliases.

    A same-width view's mask is its base's (shared); a bitcast to another width holds its own
    (another element count), so what it wrote must reach its base, up to the root.
    """
    while is_view(buf):
        base = buf.stamp
        if base.init is None or buf.init is None:
            return
        if not np.shares_memory(buf.init, base.init):
            base.init |= _remask(buf.init, base.init.size, base.init.shape)
        buf = base


def pull_init(buf):
    """Before a read through view ``buf``: add what was written through its root since."""
    root = _root(buf)
    if buf.init is not None and root.init is not None and root is not buf and \
            not np.shares_memory(buf.init, root.init):
        buf.init |= _remask(root.init, buf.init.size, buf.init.shape)


def tracked_read(buf, names) -> bool:
    """Whether a read of ``buf`` in an affine body must check its stamps (``names``: tracked)."""
    root = _root(buf)
    return isinstance(root.stamp, np.ndarray) and root.name in names


def view_writes(kernel) -> list:
    """Tracked tensors that an ``affine_range`` body writes (or reads) through a view, sorted.

    Tracked: race checks need their stamps. The compiled executor does not stamp views (nor
    check reads through them), so it leaves such kernels to the interpreter.
    """
    from ..ir import Access, Alloc, Loop, walk_insts
    from .analysis import overlapping_writes, read_and_written, root
    decls = kernel.decls()
    waw = set().union(*overlapping_writes(kernel).values())
    out = set()

    def walk(body, declared):
        declared = set(declared)
        for s in body:
            if isinstance(s, Alloc):
                declared.add(s.decl.name)
            elif isinstance(s, Loop):
                if s.kind == "affine":
                    raw = read_and_written(s.body, decls) & declared
                    carried = raw | waw
                    for inst in walk_insts(s.body):
                        for o in inst.outs:
                            r = root(o.tensor, decls)
                            if r != o.tensor and r in carried and inst.attr("acc") is None:
                                out.add(r)
                        for o in inst.ins:  # a read through a view may see another iteration
                            if isinstance(o, Access):
                                r = root(o.tensor, decls)
                                if r != o.tensor and r in raw:
                                    out.add(r)
                walk(s.body, declared)
    walk(kernel.body, {p.name for p in kernel.params})
    return sorted(out)


def _region(ca, arr, sel, st, fill):
    """The elements of ``arr`` the access touches (masked-out lanes read as ``fill``)."""
    if sel is None:
        return ca.read(arr, st.env, st.dyn)
    return ca.read_masked(arr, sel, st.env, st.dyn, fill=fill)


def _put(ca, arr, value, sel, st):
    if sel is None:
        ca.write(arr, value, st.env, st.dyn)
    else:
        ca.write_masked(arr, value, sel, st.env, st.dyn)


def before_write(st, ca, buf, sel, spec):
    """The elements this write overlaps with another iteration or program.

    :func:`after_write` checks them; ``None`` when the buffer is not tracked.
    """
    if buf.data.ndim == 0:
        return None
    hits = _hits(st, buf, spec, lambda arr: np.asarray(_region(ca, arr, sel, st, 0)))
    # why: masked-out lanes may lie outside the tensor (an edge guard): read only the selected ones
    before = np.array(_region(ca, buf.data, sel, st, 0)) if hits else None
    return sel, hits, before


def after_write(prog, st, ca, buf, spec, loc, token):
    """Report the overlaps that changed a value (equal values are no race), then stamp."""
    sel, hits, before = token
    if hits:
        _report_changed(prog, st, buf, hits, before,
                        np.asarray(_region(ca, buf.data, sel, st, 0)), loc)
    site = spec.site
    if spec.stamp or spec.waw:
        for arr in _arrays(buf, "stamp", True):
            _put(ca, arr, (st.iter_id << SITE_BITS) | site, sel, st)
    if spec.spmd:
        for arr in _arrays(buf, "owner", True):
            _put(ca, arr, ((st.ordinal + 1) << SITE_BITS) | site, sel, st)


def indexed_write(prog, st, buf, idx, spec, loc, write):
    """Run ``write()`` (a write of ``buf`` at the index arrays ``idx``), checked and stamped.

    The path of writes whose elements are only known as index arrays (``dma_copy`` with an
    ``.ap()`` pattern, run-time indices or ``oob_mode``): the same checks as
    :func:`before_write` / :func:`after_write`.
    """
    if spec is None or not st.params.detect_races or buf.data.ndim == 0:
        write()
        return
    hits = _hits(st, buf, spec, lambda arr: arr[idx])
    before = np.array(buf.data[idx]) if hits else None
    write()
    if hits:
        _report_changed(prog, st, buf, hits, before, buf.data[idx], loc)
    if spec.stamp or spec.waw:
        for arr in _arrays(buf, "stamp", True):
            arr[idx] = (st.iter_id << SITE_BITS) | spec.site
    if spec.spmd:
        for arr in _arrays(buf, "owner", True):
            arr[idx] = ((st.ordinal + 1) << SITE_BITS) | spec.site


def _hits(st, buf, spec, take):
    """Overlaps as ``(loop var or None, hit mask, old stamps)`` over the elements ``take`` selects.

    A hit is an element another iteration of an enclosing affine loop (or another SPMD program)
    already wrote.
    """
    hits = []
    stamps = _arrays(buf, "stamp") if spec.waw else None
    if stamps is not None:
        olds = [take(a) for a in stamps]
        for var in spec.waw:
            lo = st.loop_lo.get(var)
            if lo is not None:
                hit, old = _any_hit(olds, lambda w, lo=lo, var=var:
                                    (w > lo) & (w < st.iter_start[var]))
                if hit is not None:
                    hits.append((var, hit, old))
    owner = _arrays(buf, "owner") if spec.spmd else None
    if owner is not None:
        hit, old = _any_hit([take(a) for a in owner],
                            lambda w: (w != 0) & (w != st.ordinal + 1))
        if hit is not None:
            hits.append((None, hit, old))
    return hits


def _any_hit(olds, test):
    """``(hit mask, old stamps)`` over the components ``olds``; ``(None, None)`` if none hit.

    An element hits when any of its components does; its old stamp is then one that hit.
    """
    hit, old = None, None
    for o in olds:
        h = test(o >> SITE_BITS)
        if not h.any():
            continue
        if hit is None:
            hit, old = h, o
        else:
            old = np.where(h & ~hit, o, old)
            hit = hit | h
    return hit, old


def _report_changed(prog, st, buf, hits, before, after, loc):
    # why: an overlap that wrote the value already there is no race (NaN counts as equal)
    same = (before == after) | ((before != before) & (after != after))
    for var, hit, old in hits:
        hit = hit & ~same.reshape(hit.shape)
        if hit.any():
            _overlap(prog, st, buf, var, hit, old, loc)


def _overlap(prog, st, buf, var, hit, old, loc):
    first = int(old[tuple(np.argwhere(hit)[0])])
    where = prog.sites[first & _SITE_MASK]
    n = int(np.count_nonzero(hit))
    if var is None:
        other = np.unravel_index((first >> SITE_BITS) - 1, st.grid)
        msg = (f"{_label(buf)} is written at the same elements by SPMD programs "
               f"{tuple(int(x) for x in other)} (at {where}) and {tuple(st.pid)} (at {loc}) "
               f"with different values ({n} elements): programs run in any order, so the "
               "result depends on which one writes last")
        _report(prog, st, ("spmd", _root(buf).name, where, loc), SpmdRaceWarning, msg, loc,
                "index the shared tensor with nl.program_id(...) so that each program "
                "writes its own region")
        return
    msg = (f"{_label(buf)} is written at the same elements by iterations "
           f"{var}={_value_of(st, var, first >> SITE_BITS)} (at {where}) and "
           f"{var}={st.env[var]} (at {loc}) of nl.affine_range loop '{var}' with different "
           f"values ({n} elements): the value seen after the loop depends on the order the "
           "iterations run")
    _report(prog, st, ("waw", _root(buf).name, var, where, loc), LoopCarriedDependencyWarning, msg,
            loc, "give each iteration its own region (index with the loop variable) or use "
            "nl.sequential_range if the order matters")


def on_read(prog, st, ca, buf, loc, var):
    """Warn when this read sees a value an earlier iteration of loop ``var`` wrote."""
    lo = st.loop_lo.get(var)
    if lo is None:
        return
    carried, stamps = _any_hit([np.asarray(ca.read(a, st.env, st.dyn))
                                for a in _arrays(buf, "stamp")],
                               lambda w: (w > lo) & (w < st.iter_start[var]))
    if carried is not None:
        first = int(stamps[tuple(np.argwhere(carried)[0])])
        w = first >> SITE_BITS
        where = prog.sites[first & _SITE_MASK]
        msg = (f"{_label(buf)} is written in one nl.affine_range iteration and read in another "
               f"(loop '{var}': written by {var}={_value_of(st, var, w)} at {where}, read by "
               f"{var}={st.env[var]}): affine iterations may run in any order")
        _report(prog, st, ("raw", _root(buf).name, var, where, loc), LoopCarriedDependencyWarning,
                msg, loc, "use nl.sequential_range for loop-carried dependencies (or declare "
                "the tile inside the loop)")
