"""The time model: schedule the simulated instruction stream on engines and DMA queues.

Pipeline:
  1. **Stream.** :class:`~.interp.Program` runs the kernel (zeros unless inputs are given) with an
     observer that sees every executed instruction with its loop-variable values; when no index
     is read from data, the same stream comes from walking the loops without numerics (the
     default then; ``simulate=True`` forces the simulator). Each instruction becomes a record:
     the static price (:func:`~..hw.cost.price`, computed once per IR instruction) and the
     exact regions it reads and writes (one ``(start, step, count)`` triple per tensor
     dimension, run-time indices evaluated on the simulated data).
  2. **Schedule.** Records are placed in program order. Each compute engine runs its own
     instructions in order; DMAs go round-robin to the core's 16 queues and occupy the DMA
     engines that serve their partitions. An instruction starts when its engine (or queue and DMA
     engines) is free, when every RAW / WAR / WAW predecessor on an overlapping region of the
     same tile instance has finished (plus the semaphore latency; automatically allocated SBUF
     tensors are renamed by the compiler, so their writes skip WAR / WAW,
     ``assume:sbuf_renamed``), when its PSUM banks are
     released by the previous accumulation group, and when a shared port (hw §1.3) is free.
  3. **Timeline** (:mod:`.perfetto`). Events (engine or queue, start/end ns, opcode,
     operands, bytes, FLOPs, kernel line, loop indices, the formula that priced it, and what
     it waited for), with per-engine busy time, a roofline summary, the critical path, a
     matplotlib Gantt chart and a Perfetto (Chrome trace-event JSON) export.

Every figure comes from :mod:`..hw.cost`; the named assumptions there (``ASSUMPTIONS``) say
where public facts end.
"""

from __future__ import annotations

import bisect
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
from .perfetto import Event, Timeline

__all__ = ["Event", "Timeline", "timeline", "estimate_latency_us", "collect", "schedule",
           "TRACK_NAMES"]

TRACK_NAMES = {"tensor": "Tensor", "vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd",
               "sync": "Sync"}
_DMA = "dma"


# ------------------------------------------------------------------------------ regions
def _ap_overlap(a0, s0, n0, a1, s1, n1) -> bool:
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
        return _ap_overlap(a1, s1, n1, a0, s0, n0)
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


def _overlap(r0, r1) -> bool:
    if r0 == r1:
        return True
    for (a0, s0, n0), (a1, s1, n1) in zip(r0, r1, strict=False):
        if a0 + s0 * (n0 - 1) < a1 or a1 + s1 * (n1 - 1) < a0:
            return False
        if (s0 != 1 or s1 != 1) and not _ap_overlap(a0, s0, n0, a1, s1, n1):
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


class _Rec:
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
def _no_gc():
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


def _data_dependent(kernel: Kernel) -> bool:
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
        simulate = inputs is not None or _data_dependent(kernel)
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
        recs.append(_Rec(s, pid, tuple([env[v] for v in s.loops]), reads, writes))

    ids: dict = {}

    grid = tuple(kernel.grid) or (1,)
    with _no_gc():
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


# ------------------------------------------------------------------------------ scheduler
class _Intervals:
    """Busy time of a core's DMA engines: merged busy blocks sorted by start.

    DMA engines serve their 16 queues round-robin, so a transfer whose data is ready takes the
    first gap long enough on all the engines it needs, even before a transfer issued earlier in
    program order that is still waiting for its data (why: backfilling, unlike an engine's own
    in-order instruction stream). Back-to-back transfers merge into one block, and engines with
    the same history share one block list (copied when their histories part), so a saturated
    128-partition DMA stream stays one short list.
    """

    __slots__ = ("lists", "uniform")

    def __init__(self, engines: int):
        shared = ([], [])  # (starts, blocks [start, end, last event idx])
        self.lists = [shared] * engines
        self.uniform = True  # why: every engine still shares one list (the common case)

    def _distinct(self, e0: int, e1: int) -> list:
        if self.uniform:
            return [self.lists[0]]
        out, seen = [], set()
        for lst in self.lists[e0:e1]:
            if id(lst) not in seen:
                seen.add(id(lst))
                out.append(lst)
        return out

    def find(self, t: float, dur: float, e0: int, e1: int) -> tuple:
        """Earliest ``start >= t`` free for ``dur`` on engines ``e0..e1-1``, and its blocker.

        The blocker is the event ending the busy block that pushed the start last (-1: none).
        """
        lists = self._distinct(e0, e1)
        blocker, moved = -1, True
        while moved:
            moved = False
            for starts, bl in lists:
                j = bisect.bisect_right(starts, t) - 1
                if j < 0 or bl[j][1] <= t:
                    j += 1
                while j < len(bl) and bl[j][0] < t + dur:
                    t, blocker, moved = bl[j][1], bl[j][2], True
                    j += 1
        return t, blocker

    def add(self, start: float, end: float, e0: int, e1: int, idx: int) -> None:
        """Marks engines ``e0..e1-1`` busy over ``[start, end)`` (a gap ``find`` returned)."""
        full = e0 == 0 and e1 == len(self.lists)
        for lst in self._distinct(e0, e1):
            users = () if full else [e for e, x in enumerate(self.lists) if x is lst]
            if users and (users[0] < e0 or users[-1] >= e1):  # shared outside: split it
                self.uniform = False
                lst = (list(lst[0]), [list(b) for b in lst[1]])
                for e in users:
                    if e0 <= e < e1:
                        self.lists[e] = lst
            starts, bl = lst
            j = bisect.bisect_right(starts, start) - 1
            if j >= 0 and bl[j][1] == start:
                bl[j][1], bl[j][2] = end, idx
            else:
                j += 1
                starts.insert(j, start)
                bl.insert(j, [start, end, idx])
            if j + 1 < len(bl) and bl[j + 1][0] == end:
                bl[j][1], bl[j][2] = bl[j + 1][1], bl[j + 1][2]
                del bl[j + 1], starts[j + 1]


class _Core:
    """Per-core resource state: engines, DMA queues and engines, ports, PSUM banks."""

    __slots__ = ("eng", "q", "dma", "rr", "ports", "bank_t", "bank_i", "bank_next")

    def __init__(self, t: CostTarget):
        self.eng: dict = {}  # engine -> (free time, last event)
        self.q = [(0.0, -1)] * t.dma_queues
        self.dma = _Intervals(t.dma_engines)
        self.rr = 0
        self.ports: dict = {}
        self.bank_t = [0.0] * t.hw.psum_banks
        self.bank_i = [-1] * t.hw.psum_banks
        self.bank_next = 0


class _Sched:
    """Greedy in-order list scheduler over engines, DMA queues/engines, ports and PSUM banks."""

    def __init__(self, t: CostTarget, cores: int, grid: tuple):
        self.t = t
        self.cores = cores
        self.grid = grid or (1,)
        self.hist: dict = {}  # tile instance -> ({region: (end, idx, engine)} writers, readers)
        self.state = [_Core(t) for _ in range(cores)]
        self.banks: dict = {}  # PSUM tile instance -> banks
        self.events: list = []
        self.core_of: dict = {}
        self.read_only: set = set()
        self.lat = {e: t.dep_latency_cycles / g for e, g in t.clock_ghz.items()}
        self.plans: dict = {}  # id(static) -> facts unpacked by place (see prepare)
        self.dma_ns: dict = {}  # (id(DMA plan), engines) -> engine time
        self.qnames = [f"q{q}" for q in range(t.dma_queues)]

    def _core(self, pid) -> int:
        c = self.core_of.get(pid)
        if c is None:
            lin = int(np.ravel_multi_index(pid, self.grid)) if pid else 0
            c = self.core_of[pid] = lin % self.cores
        return c

    def _claim(self, cs: _Core, key, nbytes):
        """Banks of a PSUM tile instance; ``fresh`` when this access allocates them."""
        banks = self.banks.get(key)
        if banks is not None:
            return banks, False
        hw = self.t.hw
        n = min(hw.psum_banks, max(1, -(-nbytes // hw.psum_bank_bytes)))
        start = cs.bank_next if cs.bank_next + n <= hw.psum_banks else 0
        banks = self.banks[key] = tuple(range(start, start + n))
        cs.bank_next = (start + n) % hw.psum_banks
        return banks, True

    def prepare(self, statics) -> None:
        """Per-static facts of this schedule, unpacked once (why: ``place`` runs 100k times).

        ``(engine, track, dependency latency, accumulation chain, indices of the writes that
        wait for earlier accesses, indices of the reads to record (``None``: all), PSUM
        accesses, ports, duration, DMA plan, partition operand)``.
        """
        ro = self.read_only
        for st in statics:
            eng = st.engine
            lat = 0.0 if eng == _DMA else self.lat.get(eng, 0.0)
            wchk = tuple(i for i, a in enumerate(st.writes) if not (a.renamed and not st.acc))
            rrec = tuple(i for i, a in enumerate(st.reads) if a.name not in ro)
            self.plans[id(st)] = (eng, st.track, lat, st.acc and eng == "tensor", wchk,
                                  None if len(rrec) == len(st.reads) else rrec, st.psum,
                                  st.ports, st.price.ns, st.price.dma, st.part)

    def place(self, rec: _Rec) -> None:
        """Places one record: its start is the latest of everything it waits for."""
        eng, track, lat, chain, wchk, rrec, psum, ports, ns, plan, part = self.plans[id(rec.s)]
        core = 0 if self.cores == 1 else self._core(rec.pid)
        cs = self.state[core]
        best, why, after = 0.0, "start", -1
        hist = self.hist
        reads, writes = rec.reads, rec.writes
        # why: chain: PSUM accumulation groups pipeline on TensorE
        for key, reg in reads:
            h = hist.get(key)
            if h is None:
                continue
            for wreg, (end, idx, weng) in h[0].items():
                d = end if (chain and weng == eng) else end + lat
                if d > best and _overlap(reg, wreg):
                    best, why, after = d, "raw", idx
        for i in wchk:
            key, reg = writes[i]
            h = hist.get(key)
            if h is None:
                continue
            for wreg, (end, idx, weng) in h[0].items():
                d = end if weng == eng else end + lat
                if d > best and _overlap(reg, wreg):
                    best, why, after = d, "waw", idx
            for wreg, (end, idx, weng) in h[1].items():
                d = end if weng == eng else end + lat
                if d > best and _overlap(reg, wreg):
                    best, why, after = d, "war", idx
        banks = ()
        events = self.events
        if psum:
            both = writes + reads
            for i, nbytes in psum:
                got, fresh = self._claim(cs, both[i][0], nbytes)
                banks += got
                if fresh:  # a new accumulation group waits for the banks' previous owner
                    for b in got:
                        i = cs.bank_i[b]
                        if i < 0:
                            continue
                        d = cs.bank_t[b] + (0.0 if events[i].engine == eng else lat)
                        if d > best:
                            best, why, after = d, "psum_bank", i
        idx = len(events)
        if eng == _DMA:
            end = self._place_dma(rec, core, cs, best, why, after, plan, part, idx)
        else:
            if ports:
                ports = [(p, b) for p in ports for b in (banks if p == "psum_bank" else (0,))]
                for pk in ports:  # why: a port is shared between engines, not in one
                    for e2, (tp, ip) in cs.ports.get(pk, {}).items():
                        if e2 != eng and tp > best:
                            best, why, after = tp, "port", ip
            te, ie = cs.eng.get(eng, (0.0, -1))
            if te > best:
                best, why, after = te, "engine", ie
            end = best + ns
            events.append(Event(idx, core, track, best, end, why, after, rec))
            cs.eng[eng] = (end, idx)
            for pk in ports:
                held = cs.ports.setdefault(pk, {})
                if end > held.get(eng, (0.0, -1))[0]:
                    held[eng] = (end, idx)
        # why: per tile instance, one entry per distinct region; a later write of the same
        # region subsumes older writers and readers (it waited for them)
        entry = (end, idx, eng)
        for key, reg in writes:
            h = hist.get(key)
            if h is None:
                hist[key] = ({reg: entry}, {})
                continue
            h[0][reg] = entry
            h[1].pop(reg, None)
        # why: a tensor nothing ever writes needs no readers recorded (nothing waits for them)
        for key, reg in (reads if rrec is None else [reads[i] for i in rrec]):
            h = hist.get(key)
            if h is None:
                hist[key] = ({}, {reg: entry})
                continue
            old = h[1].get(reg)
            if old is None or old[0] <= end:
                h[1][reg] = entry
        for b in banks:
            if end >= cs.bank_t[b]:
                cs.bank_t[b], cs.bank_i[b] = end, idx

    def _place_dma(self, rec, core, cs: _Core, ready, why, after, plan, part, idx) -> float:
        t = self.t
        q = cs.rr
        cs.rr = (q + 1) % t.dma_queues
        start = ready + plan.fixed_ns
        if why == "start":
            why = "fixed"
        tq, iq = cs.q[q]
        if tq > start:
            start, why, after = tq, "queue", iq
        if plan.partitions:
            p0 = 0
            if part is not None:
                w, i, d = part
                p0 = (rec.writes if w else rec.reads)[i][1][d][0]
            ppe = t.partitions_per_dma_engine
            e0 = min(p0 // ppe, t.dma_engines - 1)
            e1 = min(t.dma_engines, (p0 + plan.partitions - 1) // ppe + 1)
        else:
            e0, e1 = 0, t.dma_engines
        key = (id(plan), e1 - e0)
        dur = self.dma_ns.get(key)
        if dur is None:
            dur = self.dma_ns[key] = plan.engine_ns(t, e1 - e0)
        slot, blocker = cs.dma.find(start, dur, e0, e1)
        if slot > start:
            start, why, after = slot, "dma_engine", blocker
        end = start + dur
        ev = Event(idx, core, self.qnames[q], start, end, why, after, rec)
        ev.issue_ns = ready
        self.events.append(ev)
        cs.q[q] = (end, idx)
        cs.dma.add(start, end, e0, e1, idx)
        return end


def schedule(records: list, target=None, *, cores: int = 1, grid: tuple = (),
             kernel_name: str = "") -> Timeline:
    """Schedules instruction records (from :func:`collect`) into a :class:`Timeline`."""
    t = cost_target(target)
    sch = _Sched(t, max(1, int(cores)), tuple(grid))
    statics = {id(r.s): r.s for r in records}.values()
    written = {a.name for st in statics for a in st.writes}
    sch.read_only = {a.name for st in statics for a in st.reads} - written
    sch.prepare(statics)
    with _no_gc():
        for rec in records:
            sch.place(rec)
    return Timeline(sch.events, t, kernel_name=kernel_name, cores=sch.cores)


def timeline(kernel, inputs=None, target=None, *, cores: int | None = None,
             simulate: bool | None = None) -> Timeline:
    """Estimates the kernel's execution as a per-engine timeline.

    Args:
        kernel: an IR :class:`~..ir.Kernel` (or an object with a ``.kernel`` attribute).
        inputs: parameter name -> numpy array (or a sequence in parameter order); zeros of the
            parameter shapes and dtypes when ``None`` (only indirect indices and data-dependent
            control flow read them).
        target: ``'trn1'``, ``'trn2'``, ``'trn3'`` (default: the kernel's target).
        cores: physical cores the SPMD programs are spread over (default: min(grid size, LNC),
            ``assume:spmd_cores``).
        simulate: see :func:`collect` (default: run the simulator only when the instruction
            stream depends on data, i.e. the kernel reads indices from tiles, or inputs are given).

    Returns:
        The :class:`Timeline`.
    """
    kernel = getattr(kernel, "kernel", kernel)
    t = cost_target(target or kernel.target)
    nprog = int(math.prod(kernel.grid)) if kernel.grid else 1
    if cores is None:
        cores = min(nprog, t.lnc_default)
    recs = collect(kernel, inputs, t, simulate=simulate)
    return schedule(recs, t, cores=cores, grid=tuple(kernel.grid), kernel_name=kernel.name)


_LATENCY_CACHE: dict = {}


def estimate_latency_us(kernel, target=None) -> float:
    """Single-run latency estimate of an IR kernel, in microseconds (zeros as inputs).

    Args:
        kernel: an IR :class:`~..ir.Kernel`.
        target: target name (default: the kernel's).

    Returns:
        The end time of the last instruction of :func:`timeline`, in microseconds.
    """
    kernel = getattr(kernel, "kernel", kernel)
    key = (id(kernel), cost_target(target or kernel.target).name)
    hit = _LATENCY_CACHE.get(key)
    if hit is not None and hit[0] is kernel:
        return hit[1]
    us = timeline(kernel, None, target).latency_us
    if len(_LATENCY_CACHE) > 64:
        _LATENCY_CACHE.clear()
    _LATENCY_CACHE[key] = (kernel, us)
    return us
