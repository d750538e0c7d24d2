"""The time model's instruction stream: each executed instruction as a priced record.

Step 1 of :mod:`.timing` (which re-exports :func:`collect` and ``TRACK_NAMES``): the kernel runs
in :class:`~.interp.Program` with an observer, or, when no index is read from data, its loops
are walked without numerics; each executed instruction becomes a :class:`Record` with its static
price (computed once per IR instruction) and the exact ``(start, step, count)`` regions it reads
and writes, which :func:`regions_overlap` compares for the scheduler's dependencies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import warnings

import numpy as np

from .. import dtypes as D
from ..hw.cost import CostTarget, OpView, cost_target, partition_broadcast, price
from ..ir import Access, Alloc, Inst, Kernel, Loop, Scalar, walk_stmts
from ..ir import expr as E
from .interp import Program, SimParams

TRACK_NAMES = {"tensor": "Tensor", "vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd",
               "sync": "Sync"}


# ------------------------------------------------------------------------------ regions
def ap_overlap(a0, s0, n0, a1, s1, n1) -> bool:
    """Whether two arithmetic progressions (start, step > 0, count) share an element."""
    h0, h1 = a0 + s0 * (n0 - 1), a1 + s1 * (n1 - 1)
    lo, hi = max(a0, a1), min(h0, h1)
    if lo > hi:
        return False
    if s0 == 1 or n0 == 1:
        if n0 == 1:
            return (a0 - a1) % s1 == 0 and a1 <= a0 <= h1
        first = a1 + -(-(lo - a1) // s1) * s1  # why: first element of AP1 at or after lo
        return first <= hi
    if s1 == 1 or n1 == 1:
        return ap_overlap(a1, s1, n1, a0, s0, n0)
    g = math.gcd(s0, s1)
    if (a1 - a0) % g:
        return False
    # x = a0 + s0*i ≡ a1 (mod s1): solve for the smallest x >= lo (CRT)
    m = s1 // g
    i = ((a1 - a0) // g * pow(s0 // g, -1, m)) % m if m > 1 else 0
    x, period = a0 + s0 * i, s0 * m
    if x < lo:
        x += -(-(lo - x) // period) * period
    return x <= hi


def regions_overlap(r0, r1) -> bool:
    """Whether two regions (one ``(start, step, count)`` per dimension) share an element."""
    if r0 == r1:
        return True
    for (a0, s0, n0), (a1, s1, n1) in zip(r0, r1, strict=False):
        if a0 + s0 * (n0 - 1) < a1 or a1 + s1 * (n1 - 1) < a0:
            return False
        if (s0 != 1 or s1 != 1) and not ap_overlap(a0, s0, n0, a1, s1, n1):
            return False
    return True


def _dim_fn(e, size):
    """A function ``(env, dyn) -> (start, step, count)`` for one dimension's index."""
    if e is None:
        const = (0, 1, int(size))
        return const, None
    lin = None
    if isinstance(e, E.Affine):
        vars_, io = [], None
        for atom, k in e.terms:
            if isinstance(atom, E.Var):
                vars_.append((atom.name, k))
            elif isinstance(atom, E.Iota) and io is None:
                io = (atom.size, k)
            else:
                vars_ = None
                break
        if vars_ is not None:
            lin = (e.const, tuple(vars_), io or (1, 0))
    if lin is None:  # non-affine or indirect: exact bounds of the evaluated indices
        def ev(env, dyn):
            vals = np.asarray(E.evaluate(e, env, dyn))
            lo, hi = int(vals.min()), int(vals.max())
            return (lo, 1, hi - lo + 1)
        return None, ev
    c, vars_, (cnt, k) = lin
    step = abs(k) if cnt > 1 else 1
    back = k * (cnt - 1) if k < 0 else 0  # why: a negative step covers [start + k*(n-1), start]
    if not vars_:
        return (c + back, step, cnt), None

    def lin_fn(env, dyn):
        s = c + back
        for v, kv in vars_:
            s += kv * env[v]
        return (s, step, cnt)
    return None, lin_fn


class _AccSpec:
    """One access of an instruction, compiled: which tile instance, which region."""

    __slots__ = ("name", "scope", "shared", "const", "fns", "psum_bytes", "on_chip", "par_dim",
                 "renamed")

    def __init__(self, acc: Access, decls: dict, scopes: dict):
        decl = decls[acc.tensor]
        root = decl
        while root.base is not None:
            root = decls[root.base]
        self.name = root.name
        self.scope = scopes.get(root.name, ())
        self.shared = root.kind in ("input", "inout", "output") or root.buffer == "shared_hbm"
        self.psum_bytes = 0
        self.on_chip = root.buffer in ("sbuf", "psum")
        # why: automatically allocated SBUF is multi-buffered by the compiler
        # (assume:sbuf_renamed), so writes to it skip WAR/WAW waits
        self.renamed = root.buffer == "sbuf" and root.alloc is None
        self.par_dim = root.par_dim
        if root.buffer == "psum":
            parts = root.shape[root.par_dim] if root.shape else 1
            total = math.prod(root.shape) * D.itemsize(D.from_name(root.dtype))
            self.psum_bytes = max(1, total // max(1, parts))
        if root is not decl or acc.index is None:  # views and whole tensors: the whole root
            self.const = tuple((0, 1, int(s)) for s in root.shape)
            self.fns = None
            return
        dims = [_dim_fn(e, s) for e, s in zip(acc.index, decl.shape, strict=False)]
        if all(fn is None for _, fn in dims):
            self.const, self.fns = tuple(c for c, _ in dims), None
        else:
            self.const = None
            self.fns = tuple((c, fn) for c, fn in dims)

    def key(self, env, pid):
        """The tile instance: root name, enclosing loop values at its allocation, program."""
        vals = tuple([env[v] for v in self.scope]) if self.scope else ()
        return (self.name, vals, None if self.shared else pid)

    def region(self, env, dyn):
        """Per-dimension ``(start, step, count)`` of the accessed elements."""
        if self.fns is None:
            return self.const
        return tuple([c if fn is None else fn(env, dyn) for c, fn in self.fns])


class _Static:
    """Everything about one IR instruction that does not change between executions."""

    __slots__ = ("inst", "price", "reads", "writes", "loops", "track", "engine", "acc",
                 "ports", "psum", "part")

    def __init__(self, inst, decls, scopes, loops, t: CostTarget, pdecls=None):
        self.inst = inst
        self.price = price(inst, decls if pdecls is None else pdecls, t)
        self.engine = self.price.engine
        self.track = TRACK_NAMES.get(self.engine, self.engine)
        self.loops = loops
        self.acc = inst.attr("acc") is not None
        dyn_tiles = [a for x in (*inst.ins, *inst.outs) if isinstance(x, (Access, E.Affine))
                     for e in ((x.index or ()) if isinstance(x, Access) else (x,))
                     for a in E.dyns(e)]
        reads = [x for x in inst.ins if isinstance(x, Access)]
        reads += [Access(d.tensor, d.index) for d in dyn_tiles]
        if self.acc:  # why: accumulation reads the old destination value
            reads += list(inst.outs)
        self.reads = [_AccSpec(a, decls, scopes) for a in reads]
        self.writes = [_AccSpec(a, decls, scopes) for a in inst.outs]
        self.ports = _ports(self, decls, t)
        both = self.writes + self.reads  # the order of a record's ``writes + reads``
        self.psum = tuple((i, a.psum_bytes) for i, a in enumerate(both) if a.psum_bytes)
        nw = len(self.writes)  # why: (writes or reads, index, partition dim) of the tile side
        self.part = next(((i < nw, i if i < nw else i - nw, a.par_dim)
                          for i, a in enumerate(both) if a.on_chip), None)


def _ports(s: _Static, decls, t: CostTarget) -> tuple:
    """Shared ports the instruction needs (hw §1.3): ``sbuf_vg``, ``psum_vs``, ``psum_bank``."""
    bufs = set()
    for x in (*s.inst.ins, *s.inst.outs):
        if isinstance(x, Access):
            d = decls[x.tensor]
            while d.base is not None:
                d = decls[d.base]
            bufs.add(d.buffer)
    ports = []
    eng = s.engine
    if "sbuf" in bufs and eng in ("vector", "gpsimd"):
        if t.port_sbuf_vector_gpsimd == "always" or eng == "gpsimd" or s.price.perf_mode > 1:
            ports.append("sbuf_vg")  # v3+: only VectorE's perf modes share GpSimd's bus
    if "psum" in bufs and eng in ("vector", "scalar"):
        ports.append("psum_vs" if t.port_psum_vector_scalar == "always" else "psum_bank")
    return tuple(ports)


class Record:
    """One executed instruction: its static part, program id, loop values and regions."""

    __slots__ = ("s", "pid", "env", "reads", "writes")

    def __init__(self, s, pid, env, reads, writes):
        self.s, self.pid, self.env, self.reads, self.writes = s, pid, env, reads, writes


# ------------------------------------------------------------------------------ stream
def _scopes_and_loops(body, stack=(), scopes=None, loops=None):
    """Loop variables enclosing each Alloc (tile instance identity) and each Inst."""
    scopes = {} if scopes is None else scopes
    loops = {} if loops is None else loops
    for s in body:
        if isinstance(s, Alloc):
            scopes[s.decl.name] = stack
        elif isinstance(s, Loop):
            _scopes_and_loops(s.body, stack + (s.var,), scopes, loops)
        else:
            loops[id(s)] = stack
    return scopes, loops


def _priced_decls(kernel: Kernel, decls: dict, t: CostTarget) -> dict:
    """Declarations as the cost formulas see them: a partition broadcast's result in PSUM.

    why: a partition broadcast runs as a TensorE matmul whose result stays in PSUM, so its
    consumers read one operand from PSUM (hw §2.2 [A1] partition broadcast; hw §3
    tensor_tensor's one-PSUM-input case).
    """
    moved = {}
    for st in walk_stmts(kernel.body):
        if isinstance(st, Inst) and st.op == "broadcast_to" and \
                partition_broadcast(OpView.of(st, decls), t):
            for x in st.outs:
                d = decls.get(getattr(x, "tensor", None))
                if d is not None and d.buffer == "sbuf" and d.base is None:
                    moved[d.name] = dataclasses.replace(d, buffer="psum")
    return {**decls, **moved} if moved else decls


def _zeros(kernel: Kernel) -> dict:
    return {p.name: np.zeros(p.shape, dtype=D.storage_dtype(D.from_name(p.dtype)))
            for p in kernel.params}


@contextlib.contextmanager
def no_gc():
    """Pauses the cyclic garbage collector (why: 100k small records trigger it constantly).

    On the way out the objects made meanwhile go straight to the oldest generation
    (``gc.freeze`` + ``gc.unfreeze``, no scan): the records and events live as long as the
    timeline, and scanning a million of them through the young generations cost as much as
    scheduling them. Nothing is leaked: the next full collection sees them as usual.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was:
            gc.enable()


def data_dependent(kernel: Kernel) -> bool:
    """Whether the instruction stream depends on tensor data (run-time indices, dynamic loops)."""
    for st in walk_stmts(kernel.body):
        if isinstance(st, Loop) and st.kind == "dynamic":
            return True
        if isinstance(st, Inst):
            for x in (*st.ins, *st.outs, st.mask):
                exprs = (x.index or ()) if isinstance(x, Access) else (x,)
                if any(e is not None and not isinstance(e, Scalar) and E.dyns(e)
                       for e in exprs):
                    return True
    return False


class _WalkState:
    __slots__ = ("env", "pid", "dyn")

    def __init__(self, pid):
        self.env = {f"pid{a}": int(v) for a, v in enumerate(pid)}
        self.pid, self.dyn = pid, None


def _walk(body, st, observe) -> None:
    """Visits the instruction stream of a data-independent kernel, without computing values.

    The order is the simulator's: statements in order, loop iterations in order.
    """
    env = st.env
    for s in body:
        if isinstance(s, Inst):
            observe(s, st)
        elif isinstance(s, Loop):
            for v in range(s.start, s.stop, s.step):
                env[s.var] = v
                _walk(s.body, st, observe)


def collect(kernel: Kernel, inputs=None, target=None, *, simulate: bool | None = None) -> list:
    """Returns the executed instruction records of the kernel, in program order per program.

    Args:
        kernel: the IR kernel.
        inputs: parameter name -> array (or a sequence in parameter order); zeros when ``None``.
        target: cost target (default: the kernel's).
        simulate: run the simulator with an observer (``True``), or walk the loops without
            computing values (``False``; exact only when no index is read from data). ``None``:
            simulate when the kernel has run-time indices or inputs are given.

    Returns:
        Records for :func:`schedule`.
    """
    t = cost_target(target or kernel.target)
    if simulate is None:
        simulate = inputs is not None or data_dependent(kernel)
    decls = kernel.decls()
    pdecls = _priced_decls(kernel, decls, t)
    scopes, loops = _scopes_and_loops(kernel.body)
    statics: dict = {}
    per_pid: dict = {}

    def observe(inst, st):
        s = statics.get(id(inst))
        if s is None:
            s = statics[id(inst)] = _Static(inst, decls, scopes, loops.get(id(inst), ()), t,
                                                 pdecls)
        if s.engine == "none":
            return
        env, pid, dyn = st.env, st.pid, st.dyn
        recs = per_pid.get(pid)
        if recs is None:
            recs = per_pid[pid] = []
        reads, writes = [], []
        for accs, out in ((s.reads, reads), (s.writes, writes)):
            for a in accs:
                # why: the scheduler looks each tile instance up several times per record; a
                # small int hashes in no time, the (name, loop values, program) tuple does not
                key = a.key(env, pid)
                i = ids.get(key)
                if i is None:
                    i = ids[key] = len(ids)
                out.append((i, a.region(env, dyn)))
        recs.append(Record(s, pid, tuple([env[v] for v in s.loops]), reads, writes))

    ids: dict = {}

    grid = tuple(kernel.grid) or (1,)
    with no_gc():
        _run_stream(kernel, inputs, simulate, grid, observe)
    # why: programs with collectives run as threads; keep each program's own order
    return [r for pid in sorted(per_pid) for r in per_pid[pid]]


def _run_stream(kernel, inputs, simulate, grid, observe) -> None:
    if simulate:
        if inputs is None:
            inputs = _zeros(kernel)
        elif not isinstance(inputs, dict):
            inputs = {p.name: np.asarray(x) for p, x in zip(kernel.params, inputs, strict=True)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # why: numerics warnings are the simulator's business
            Program(kernel).run(inputs, SimParams(detect_races=False), observer=observe)
    else:
        for pid in np.ndindex(*grid):
            _walk(kernel.body, _WalkState(tuple(int(x) for x in pid)), observe)
