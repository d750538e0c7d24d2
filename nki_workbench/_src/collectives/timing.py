"""Time model of the collectives: a cost per instruction and per-rank timelines in lock-step.

Cost of one collective instruction on one rank (``assume:`` entries in :data:`CC_ASSUMPTIONS`)::

    ns = steps * LATENCY + bytes_on_link / LINK_BW

with ring algorithms for the group collectives (``n`` = replica group size, ``B`` = bytes of
the rank's sources, ``D`` = bytes of its destinations):

=====================================  =========  ====================
kind                                   steps      bytes on the link
=====================================  =========  ====================
all_reduce                             2(n-1)     2(n-1)/n * B
all_gather                             n-1        (n-1)/n * D
reduce_scatter, all_to_all             n-1        (n-1)/n * B
broadcast                              n-1        B
permutes, send                         1          B
recv                                   1          D
=====================================  =========  ====================

The entries are registered in the cost table (``hw.cost.COSTS``) on the Sync engine, so every
timeline prices them. :func:`rank_timelines` schedules each rank's instruction stream with the
core scheduler (:mod:`..sim.timing`), then lines the ranks up: a rank leaves a collective when
the last member of its group has arrived plus the cost, its collective events move to a
communication row ``CC`` (the profiler's CC-core rows), and everything the rank does afterwards
is delayed by its wait (``assume:cc_lockstep``).
"""

from __future__ import annotations

import contextvars
import math

from ..errors import NkiError
from ..hw.cost import COSTS, CostEntry, cost_target
from .kinds import OPCODE_KIND, group_of

__all__ = ["CC_ASSUMPTIONS", "LINK_BYTES_PER_NS", "cc_cost", "timelines_of_ranks", "CC_TRACK"]

CC_TRACK = "CC"

CC_ASSUMPTIONS: dict[str, str] = {
    "cc_link_bw": "Per-rank link bandwidth = the chip's NeuronLink bandwidth divided by its "
                  "physical cores: trn2 1.28 TB/s / 8 = 160 GB/s (hw §5 [C2]), trn3 2.56 TB/s "
                  "/ 8 = 320 GB/s (hw §5 [C3]). hardware.md gives no NeuronLink-v2 figure for "
                  "trn1: 768 GB/s per chip / 2 cores = 384 GB/s is an assumption.",
    "cc_step_latency": "Each algorithm step costs one DMA fixed latency (1300 ns, hw §4 "
                       "[DMA-BW]): a hop between cores is a DMA. No public collective latency "
                       "figure exists.",
    "cc_ring": "Group collectives use ring algorithms (the steps/bytes table in this module).",
    "cc_lockstep": "A rank leaves a collective when the last member of its group arrived, plus "
                   "the cost; every later instruction of that rank is delayed by its wait "
                   "(conservative: independent work does not overlap the wait).",
    "cc_unknown_group": "A <kind>_cc instruction priced outside a multi-rank timeline (its group "
                        "comes from the launch) is priced for a group of 2.",
}

# bytes per ns per rank (= GB/s), see assume:cc_link_bw
LINK_BYTES_PER_NS = {"trn1": 384.0, "trn2": 160.0, "trn3": 320.0}

# why: rank_timelines prices <kind>_cc instructions for the group size of the rank it collects
_GROUP_SIZE: contextvars.ContextVar = contextvars.ContextVar("cc_group_size", default=None)

# kind -> (steps(n), link bytes(n, B, D))
_RING = {
    "all_reduce": (lambda n: 2 * (n - 1), lambda n, b, d: 2 * (n - 1) * b / n),
    "all_gather": (lambda n: n - 1, lambda n, b, d: (n - 1) * d / n),
    "reduce_scatter": (lambda n: n - 1, lambda n, b, d: (n - 1) * b / n),
    "all_to_all": (lambda n: n - 1, lambda n, b, d: (n - 1) * b / n),
    "broadcast": (lambda n: n - 1, lambda n, b, d: b if n > 1 else 0),
    "collective_permute": (lambda n: 1, lambda n, b, d: b),
    "collective_permute_implicit": (lambda n: 1, lambda n, b, d: b),
    "collective_permute_reduce_implicit": (lambda n: 1, lambda n, b, d: b),
    "send": (lambda n: 1, lambda n, b, d: b),
    "recv": (lambda n: 1, lambda n, b, d: d),
}


def cc_cost(kind: str, n: int, src_bytes: int, dst_bytes: int, target) -> tuple[float, dict]:
    """Nanoseconds of one collective on one rank and the formula's variables."""
    t = cost_target(target)
    steps_fn, bytes_fn = _RING[kind]
    steps, link = steps_fn(n), bytes_fn(n, src_bytes, dst_bytes)
    bw = LINK_BYTES_PER_NS[t.name]
    ns = steps * t.dma_fixed_ns + link / bw
    return ns, {"n": n, "steps": steps, "LATENCY": t.dma_fixed_ns, "bytes": round(link),
                "LINK_BW": bw}


def _group_size(attrs: dict) -> tuple[int, str]:
    groups = attrs.get("replica_groups")
    if groups:
        return max(len(g) for g in groups), "replica_groups"
    n = _GROUP_SIZE.get()
    return (n, "launch group") if n else (2, "assume:cc_unknown_group")


def _formula(v, t):
    kind = OPCODE_KIND[v.op][0].name
    n, why = _group_size(v.attrs)
    if kind in ("send", "recv"):
        n, why = 2, "point-to-point"
    b = sum(o.nbytes for o in v.tiles("ins"))
    d = sum(o.nbytes for o in v.tiles("outs"))
    ns, env = cc_cost(kind, n, b, d, t)
    src = f"assume:cc_link_bw, assume:cc_step_latency, assume:cc_ring; n from {why}"
    return ns * t.clock_ghz["sync"], "steps*LATENCY + bytes/LINK_BW", env, src


for _op in OPCODE_KIND:
    COSTS[_op] = CostEntry("sync", _formula)


# ----------------------------------------------------------------------------- rank timelines
def timelines_of_ranks(per_rank, groups, *, target=None, cores=None) -> list:
    """Per-rank timelines of already traced ranks, lined up at their collectives.

    Args:
        per_rank: ``(traced, args, kwargs)`` per rank (``ranks.prepare_ranks``).
        groups: the normalised replica groups (``None``: all ranks in one group).
        target: hardware target (default: each trace's).
        cores: physical cores per rank (default as :func:`~..sim.timing.timeline`).

    Returns:
        list of :class:`~..sim.timing.Timeline`, one per rank (see ``ranks.rank_timelines``).
    """
    from ..sim import timing as T
    n = len(per_rank)
    default = groups if groups is not None else (tuple(range(n)),)
    tls = []
    for r, (traced, _, _) in enumerate(per_rank):
        k = traced.kernel
        t = cost_target(target or k.target)
        if T.data_dependent(k):
            raise NkiError("wb_collective_timeline",
                           f"rank_timelines: kernel '{k.name}' reads indices from tensor data; "
                           "per-rank timelines need a data-independent instruction stream",
                           hint="use sim.timing.timeline on one rank's inputs instead")
        mine = next((g for g in default if r in g), None)
        token = _GROUP_SIZE.set(len(mine) if mine else None)
        try:
            recs = T.collect(k, None, t, simulate=False)
        finally:
            _GROUP_SIZE.reset(token)
        nprog = int(math.prod(k.grid)) if k.grid else 1
        c = cores if cores is not None else min(nprog, t.lnc_default)
        tls.append(T.schedule(recs, t, cores=c, grid=tuple(k.grid),
                              kernel_name=f"{k.name}[rank {r}]"))
    return _lockstep(tls, default)


def _lockstep(tls, default) -> list:
    from ..sim.timing import Timeline
    colls = [[e for e in tl.events if e.op in OPCODE_KIND] for tl in tls]
    counts = {len(c) for c in colls}
    if len(counts) > 1:
        raise NkiError("wb_collective_mismatch", "rank_timelines: ranks execute different "
                       f"numbers of collectives {[len(c) for c in colls]}")
    shift = [0.0] * len(tls)
    new = [[None] * len(c) for c in colls]  # (start, end, arrival, shift after)
    for j in range(counts.pop() if counts else 0):
        arrive = [colls[r][j].start_ns + shift[r] for r in range(len(tls))]
        for r, e in enumerate(c[j] for c in colls):
            groups = dict(e._rec.s.inst.attrs).get("replica_groups") or default
            if e.op in ("send_cc", "send_cc_raw", "recv_cc", "recv_cc_raw"):
                members = (r,)  # why: send is buffered; recv's wait is its cost (no partner model)
            else:
                members = group_of(r, groups, e.op, e.loc, len(tls))
            start = max(arrive[m] for m in members)
            end = start + e.duration_ns
            new[r][j] = (start, end, arrive[r])
        for r in range(len(tls)):
            e = colls[r][j]
            shift[r] = new[r][j][1] - e.end_ns
    for r, tl in enumerate(tls):
        todo = {id(e): j for j, e in enumerate(colls[r])}
        cur = 0.0
        for e in tl.events:
            j = todo.get(id(e))
            if j is None:
                e.start_ns += cur
                e.end_ns += cur
                e.issue_ns += cur
                continue
            start, end, arrival = new[r][j]
            cur = end - e.end_ns
            if start > arrival:
                e.wait, e.after = "collective", -1
            e.start_ns, e.end_ns, e.issue_ns, e.track = start, end, arrival, CC_TRACK
    return [Timeline(tl.events, tl.target, kernel_name=tl.kernel_name, cores=tl.cores)
            for tl in tls]
