"""The time model: schedule the simulated instruction stream on engines and DMA queues.

Pipeline:
  1. **Stream** (:mod:`.timing_stream`). :class:`~.interp.Program` runs the kernel (zeros unless
     inputs are given) with an observer that sees every executed instruction with its loop-variable
     values; when no index is read from data, the same stream comes from walking the loops without
     numerics (the default then; ``simulate=True`` forces the simulator). Each instruction becomes a
     record: the static price (:func:`~..hw.cost.price`, computed once per IR instruction) and the
     exact regions it reads and writes (one ``(start, step, count)`` triple per tensor dimension,
     run-time indices evaluated on the simulated data).
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
import math

import numpy as np

from ..hw.cost import CostTarget, cost_target
from .perfetto import Event, Timeline
from .timing_stream import TRACK_NAMES, Record, collect, no_gc, regions_overlap
from .timing_stream import data_dependent as data_dependent  # why: collectives.timing asks it

__all__ = ["Event", "Timeline", "timeline", "estimate_latency_us", "collect", "schedule",
           "TRACK_NAMES"]

_DMA = "dma"


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

    def place(self, rec: Record) -> None:
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
                if d > best and regions_overlap(reg, wreg):
                    best, why, after = d, "raw", idx
        for i in wchk:
            key, reg = writes[i]
            h = hist.get(key)
            if h is None:
                continue
            for wreg, (end, idx, weng) in h[0].items():
                d = end if weng == eng else end + lat
                if d > best and regions_overlap(reg, wreg):
                    best, why, after = d, "waw", idx
            for wreg, (end, idx, weng) in h[1].items():
                d = end if weng == eng else end + lat
                if d > best and regions_overlap(reg, wreg):
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
    with no_gc():
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
