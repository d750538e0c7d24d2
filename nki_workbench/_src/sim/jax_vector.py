"""Vectorised ``affine_range`` loops in the compiled simulator: one ``jax.vmap`` per loop.

A loop whose iterations are provably independent runs as one batched computation instead of
a ``fori_loop`` or an unrolled sequence: the tiled matmul's ``m``/``n`` loops become one
``1024x128x1024`` dot per ``k`` step, a row-tiled element-wise kernel one element-wise op.

The proof is about memory, since the IR has no branches. Every tensor the loop body touches
that lives outside the loop (an *outer* tensor) is either

* *passed through*: no access to it depends on the loop variable, and the loop never writes
  it (every iteration sees the same, unchanged values); or
* *blocked*: every access to it indexes one and the same dimension ``d`` with
  ``coef * var + rest``, where ``rest`` (free of the loop variable) stays within
  ``[c0, c0 + coef * step)`` for every value of the inner loops. Iteration ``j`` then touches
  only its own block ``[o + j * B, o + (j + 1) * B)`` of that dimension (``B = coef * step``,
  ``o`` the first block's origin), and the blocks are disjoint.

One more pattern is batched although its iterations are not independent: TensorE's PSUM
accumulation, ``psum[...] += nl.matmul(a_k, b_k)`` (or ``nisa.nc_matmul``) over the loop (a
*reduced* tensor: only such accumulations, unmasked, in float32, directly in the loop body,
touch it, always at the same place). The loop's matmuls become one dot that contracts the
iterations too (``K * n`` long) and is added to the accumulator once: the float32 sum is
rounded in another order than the interpreter's, far below the output's precision once
rounded to bf16 (a few float32 ulps of the largest output in float32).

A blocked tensor is handed to the batched body as a stack of its blocks (dimension ``d`` cut
into ``B``-sized pieces, the stack axis first); the body's accesses are rewritten to index a
block (``rest - c0``); written blocks are put back after the loop. Tensors allocated inside
the loop are per-iteration values under ``vmap`` by construction. Bounds are proven before
anything is cut: an access that may leave its tensor keeps the loop on the general path, where
the run-time checks live, unless its mask bounds the index (the ragged last tile's
``mask=(i < n)``): then the last block is padded and the mask keeps the padding unused.

Written-element masks travel with the blocks; race tracking and indirect (``Dyn``) indices
keep a loop on the general path. Results are those of the iteration-by-iteration program:
the same instructions on the same values, only batched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir import Access, Alloc, Inst, Loop, Scalar, walk_stmts
from ..ir import expr as E
from .analysis import starts_accumulation_group
from .jax_access import lanewise

__all__ = ["Blocking", "VectorPlan", "vector_plan", "vectorise", "contract_partials"]


@dataclass(frozen=True)
class Blocking:
    """How an outer tensor is cut into per-iteration blocks along dimension ``d``."""

    d: int
    size: int  # B: block length (coef * step)
    origin: int  # first block's first index along d
    count: int  # number of blocks (the loop's trip count)
    extent: int  # the dimension's length in the tensor


@dataclass(frozen=True)
class VectorPlan:
    """A vectorisable loop: its blocked tensors, the ones it writes, the rewritten body."""

    blocked: dict
    reduced: frozenset
    written: tuple
    body: tuple
    decls: dict
    origin: dict  # id(rewritten loop) -> original loop (for liveness questions)


def _root(name, decls):
    while decls[name].base is not None:
        name = decls[name].base
    return name


def _operand_exprs(inst):
    exprs = [] if inst.mask is None else [inst.mask]
    for a in inst.ins + inst.outs:
        if isinstance(a, Access):
            exprs += [e for e in (a.index or ()) if e is not None]
        elif not isinstance(a, Scalar):
            exprs.append(a)
    return exprs


def _ranges(loop, outer: dict) -> dict:
    """Value ranges of the loop variable, every loop nested in it and the enclosing ones."""
    ranges = dict(outer)
    for s in [loop, *walk_stmts(loop.body)]:
        if isinstance(s, Loop) and s.trip_count:
            r = range(s.start, s.stop, s.step)
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1])
            if s is not loop and s.var in ranges:  # why: sibling loops may reuse a name
                lo, hi = min(lo, ranges[s.var][0]), max(hi, ranges[s.var][1])
            ranges[s.var] = (lo, hi)
    return ranges


def _caps(mask) -> dict:
    """Exclusive upper bounds a mask guarantees: ``{index expression: bound}``."""
    if mask is None:
        return {}
    if mask.op == "and":
        out = _caps(mask.args[0])
        for e, c in _caps(mask.args[1]).items():
            out[e] = min(c, out.get(e, c))
        return out
    flip = {"gt": "lt", "ge": "le"}
    if mask.op not in ("lt", "le", "gt", "ge"):
        return {}  # why: a negation or a disjunction bounds nothing for sure
    op, (lhs, rhs) = mask.op, mask.args
    if op in flip:
        op, lhs, rhs = flip[op], rhs, lhs
    c = E.const_value(rhs) if op in ("lt", "le") else None
    return {} if c is None else {E.as_expr(lhs): c + (op == "le")}


def _blocking(accs, loop, shape, ranges):
    """``(Blocking, {access: rewritten access})`` when every access cuts one dim, else None.

    ``accs``: ``(access, mask)`` pairs; a mask bounding the index (the ragged last tile's
    ``i < n``) proves the access in range where its unmasked bounds do not.
    """
    var = E.Var(loop.var)
    d = coef = None
    rests = []
    for a, mask in accs:
        if a.index is None:
            return None
        dims = [i for i, e in enumerate(a.index) if loop.var in E.free_vars(e)]
        if len(dims) != 1:
            return None
        e = E.as_expr(a.index[dims[0]])
        k = dict(e.terms).get(var)
        if k is None:  # why: the variable sits inside a non-affine atom (// % min max)
            return None
        if d is None:
            d, coef = dims[0], k
        elif (d, coef) != (dims[0], k):
            return None
        rest = E.sub(e, E.mul(var, k))
        if loop.var in E.free_vars(rest):
            return None
        try:
            lo, hi = E.bounds(e, ranges)
            rests.append(((a, mask), rest, E.bounds(rest, ranges)))
        except (ValueError, KeyError):
            return None
        if hi >= shape[d] and _caps(mask).get(e, shape[d] + 1) <= shape[d]:
            hi = shape[d] - 1  # the mask keeps the lanes past the end from running
        if lo < 0 or hi >= shape[d]:
            return None  # why: a possibly out-of-bounds access needs the run-time checks
    size = coef * loop.step
    c0 = min(b[0] for _, _, b in rests)
    if size <= 0 or max(b[1] for _, _, b in rests) - c0 >= size:
        return None
    spec = Blocking(d, size, c0 + coef * loop.start, loop.trip_count, int(shape[d]))
    new = {}
    for (a, _), rest, _b in rests:
        index = list(a.index)
        index[d] = E.sub(rest, c0)
        new[a] = Access(a.tensor, tuple(index), a.shape)
    return spec, new


def _rewrite(body, new, origin):
    out = []
    for s in body:
        if isinstance(s, Inst):
            s = replace(s, ins=tuple(new.get(o, o) if isinstance(o, Access) else o
                                     for o in s.ins),
                        outs=tuple(new.get(o, o) for o in s.outs))
        elif isinstance(s, Loop):
            orig = origin.get(id(s), s)
            s = replace(s, body=tuple(_rewrite(s.body, new, origin)))
            origin[id(s)] = orig
        out.append(s)
    return out


def vector_plan(loop: Loop, lw) -> VectorPlan | None:
    """The plan that runs ``loop`` as one batched computation, or ``None`` when none is sound.

    Args:
        loop: an ``affine_range`` loop of the kernel being lowered.
        lw: the lowering (``jax_lower.Lower``) at the point where the loop starts.
    """
    if loop.kind != "affine" or loop.trip_count < 2:
        return None
    decls = lw.decls
    stmts = list(walk_stmts(loop.body))
    inner = {s.decl.name for s in stmts if isinstance(s, Alloc)}
    if any(isinstance(s, Alloc) and (s.decl.buffer == "shared_hbm" or s.decl.kind == "output")
           for s in stmts):
        return None  # why: shared memory is one buffer for all iterations, not one each
    accs: dict = {}
    written, reads, plain, touched = set(), set(), set(), set()
    direct = {id(s) for s in loop.body}
    for s in stmts:
        if not isinstance(s, Inst):
            continue
        if s.op == "all_reduce" or any(E.dyns(e) for e in _operand_exprs(s)):
            return None
        for a in s.ins + s.outs:
            if isinstance(a, Access):
                root = _root(a.tensor, decls)
                touched.add(root)
                if root not in inner:
                    # why: only a lane-wise op's mask decides which lanes its operands touch
                    accs.setdefault(root, []).append((a, s.mask if lanewise(s) else None))
        reads.update(_root(a.tensor, decls) for a in s.ins if isinstance(a, Access))
        outs = {_root(o.tensor, decls) for o in s.outs}
        written |= outs
        if not (id(s) in direct and _accumulating_matmul(s, decls)):
            plain |= outs
    reduced = frozenset(written - plain - reads - inner)
    if lw.races and touched & lw.tracked:
        return None  # why: race stamps count iterations one by one
    if inner & lw.used_outside(loop):
        return None  # why: the last iteration's tile would be needed after the loop
    ranges = _ranges(loop, lw.ranges)
    blocked, new = {}, {}
    for root, alist in accs.items():
        uses = [loop.var in E.free_vars(e) for a, _ in alist for e in (a.index or ())]
        if not any(uses):
            if root in reduced and root in lw.bufs and lw.bufs[root][2] is None:
                continue
            if root in written:
                return None  # why: every iteration writes the same place (order matters)
            continue
        if any(a.tensor != root for a, _ in alist) or root not in lw.bufs or root in lw.views:
            return None
        if lw.bufs[root][2] is not None:
            return None
        got = _blocking(alist, loop, decls[root].shape, ranges)
        if got is None:
            return None
        blocked[root], more = got
        new.update(more)
    reduced = frozenset(r for r in reduced if r not in blocked)
    if not blocked and not reduced:
        return None
    origin = dict(lw.origin)
    body = tuple(_rewrite(loop.body, new, origin))
    vdecls = dict(decls)
    for root, b in blocked.items():
        shape = list(decls[root].shape)
        shape[b.d] = b.size
        vdecls[root] = replace(decls[root], shape=tuple(shape))
    return VectorPlan(blocked, reduced, tuple(sorted(r for r in written if r in blocked)), body,
                      vdecls, origin)


_NC_HINTS = ("is_stationary_onezero", "is_moving_onezero", "is_transpose")


def _accumulating_matmul(inst, decls) -> bool:
    """``psum += nl.matmul(a, b)`` (or ``nisa.nc_matmul``) on 2-D tiles, unmasked, in float32."""
    if inst.op not in ("matmul", "nc_matmul") or inst.attr("acc") != "add" or inst.mask:
        return False
    if inst.op == "nc_matmul" and (inst.attr("perf_mode") is not None or any(
            inst.attr(h) for h in _NC_HINTS)):
        return False  # why: those variants have rules of their own (or the interpreter)
    if inst.attr("dtype") not in (None, "float32") or len(inst.outs) != 1:
        return False
    if decls[inst.outs[0].tensor].dtype != "float32":
        return False
    return all(isinstance(a, Access) and len(a.grid(decls[a.tensor])) == 2 for a in inst.ins)


def contract_partials(inst, x, y):
    """The sum over the batch axis of ``matmul(x[j], y[j])``: one dot, iterations contracted."""
    import jax.numpy as jnp
    from jax import lax

    from ..semantics import jax_numerics
    P = jax_numerics()
    x, y = P.f32(x), P.f32(y)
    # why: nc_matmul(stationary, moving) is stationary.T @ moving, matmul(transpose_x=True) too
    lhs_k = 1 if inst.op == "nc_matmul" or inst.attr("transpose_x") else 2
    # why: full fp32 products and sums everywhere, as the per-tile rule (no TF32 on GPUs)
    return lax.dot_general(x, y, (((0, lhs_k), (0, 1)), ((), ())),
                           precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)


# ----------------------------------------------------------------------------- blocks
def _cut(x, b: Blocking):
    """``x`` as a stack of its blocks along ``b.d`` (the stack axis first)."""
    import jax.numpy as jnp
    from jax import lax
    end = b.origin + b.count * b.size
    w = lax.slice_in_dim(x, b.origin, min(end, b.extent), axis=b.d)
    if end > b.extent:  # why: the last block may stop short of its full size
        pad = [(0, 0)] * x.ndim
        pad[b.d] = (0, end - b.extent)
        w = jnp.pad(w, pad)
    shape = x.shape[:b.d] + (b.count, b.size) + x.shape[b.d + 1:]
    return jnp.moveaxis(w.reshape(shape), b.d, 0)


def _join(y, b: Blocking):
    """The inverse of :func:`_cut`: the blocks laid back along ``b.d`` (padding dropped)."""
    import jax.numpy as jnp
    from jax import lax
    y = jnp.moveaxis(y, 0, b.d)
    shape = y.shape[:b.d] + (b.count * b.size,) + y.shape[b.d + 2:]
    y = y.reshape(shape)
    end = b.origin + b.count * b.size
    if end > b.extent:
        y = lax.slice_in_dim(y, 0, b.extent - b.origin, axis=b.d)
    return y


def vectorise(lw, loop: Loop, plan: VectorPlan) -> None:
    """Lower ``loop`` as one ``jax.vmap`` over its iterations (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    for name in list(lw.pending):
        lw._flush(name)  # why: nothing may update lowering state from inside the vmap trace
    blocks = []
    for root, b in plan.blocked.items():
        data, init = lw.bufs[root][:2]
        blocks.append((_cut(data, b), None if init is None else _cut(init, b)))
    r = range(loop.start, loop.stop, loop.step)
    lo, hi = min(r[0], r[-1]), max(r[0], r[-1])
    iters = jnp.asarray(np.arange(loop.start, loop.stop, loop.step, dtype=np.int32))
    state = ("bufs", "flag", "iter_id", "declared", "decls", "origin", "reducing", "partials")
    partial_insts, flagged = [], [False]

    def one(it, blocks):
        saved = {k: getattr(lw, k) for k in state}
        maps = (dict(lw.env), dict(lw.ranges), dict(lw.iter_start))
        lw.bufs = dict(lw.bufs)
        for root, (data, init) in zip(plan.blocked, blocks, strict=True):
            lw.bufs[root] = [data, init, None]
        lw.flag = False
        lw.decls, lw.origin = plan.decls, plan.origin
        lw.reducing, lw.partials = plan.reduced, []
        lw.env[loop.var] = it
        lw.ranges[loop.var] = (lo, hi)
        lw.vec += 1
        try:
            lw.iter_id = lw.iter_id + 1
            lw.iter_start[loop.var] = lw.iter_id
            lw.block(plan.body)
            partial_insts[:] = [inst for inst, _ in lw.partials]
            flagged[:] = [lw.flag is not False]
            return ([tuple(lw.bufs[root][:2]) for root in plan.written], jnp.asarray(lw.flag),
                    [vals for _, vals in lw.partials])
        finally:
            lw.vec -= 1
            for k, v in saved.items():
                setattr(lw, k, v)
            for d, v in zip((lw.env, lw.ranges, lw.iter_start), maps, strict=True):
                d.clear()
                d.update(v)

    outs, flag, partials = jax.vmap(one)(iters, blocks)
    if flagged[0]:
        lw.flag = lw.flag | jnp.any(flag)
    for inst, (x, y) in zip(partial_insts, partials, strict=True):
        out = inst.outs[0]
        lw.write(lw.jacc(out, inst.loc), lw.decls[out.tensor], contract_partials(inst, x, y),
                 inst.attr("dtype"), "add", None, False,
                 zero_start=starts_accumulation_group(inst, lw.decls))
    for root, (data, init) in zip(plan.written, outs, strict=True):
        b = plan.blocked[root]
        lw.put_block(root, b.d, b.origin, _join(data, b),
                     None if init is None else _join(init, b))
