"""Per-target cost tables: engine clocks, PE geometry, per-opcode cycle formulas and DMA figures.

Every number cites its source in ``shared/reference/hardware.md`` (``hw §x`` below; the bracketed
tags [A1], [ISA-old], ... are the upstream documents that file cites). Figures that no public
source gives are *named assumptions*, listed once in :data:`ASSUMPTIONS` and referred to by name
(``assume:<name>``) wherever they are used. Structural facts (partitions, PSUM banks, tile limits)
live in :mod:`.targets` and the per-target timing facts in :mod:`.cost_targets`.

The per-opcode table :data:`COSTS` (in :mod:`.cost_table` with its formulas and the :class:`OpView`
they read; re-exported here) maps an opcode name (IR opcode = ``nl`` function name or ``nki.isa``
instruction name) to a :class:`CostEntry`. :func:`price` turns one IR instruction into a
:class:`Price` (engine, cycles, nanoseconds, the formula that produced them, FLOPs, bytes); an
opcode without an entry raises ``NkiError('wb_no_cost_entry')`` naming it.
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import NkiError
from ..ir import Access, Inst
from .cost_table import (
    COSTS,
    PARTITION_BROADCAST,
    CostEntry,
    Operand,
    OpView,
    linear_dim,
    matmul_flops,
    operand_of,
    partition_broadcast,
)
from .cost_targets import ASSUMPTIONS, COMPUTE_ENGINES, CostTarget, cost_target

__all__ = ["ASSUMPTIONS", "COSTS", "CostEntry", "CostTarget", "DmaPlan", "Operand", "OpView",
           "Price", "cost_target", "price", "COMPUTE_ENGINES"]

# --------------------------------------------------------------------------------- prices
@dataclasses.dataclass(frozen=True, slots=True)
class Price:
    """What one instruction costs.

    Attributes:
        engine: engine that runs it (``dma`` for transfers, ``none`` for simulation-only ops).
        cycles: engine cycles (0 for DMA).
        ns: duration in nanoseconds (for DMA: engine time at full width, see ``dma``).
        formula: the formula, its variables and its source.
        flops: floating-point operations (2*K*M*N for matmuls, elements x ops otherwise).
        bytes: bytes moved by a DMA (0 for compute).
        dma: the transfer plan of a DMA, else ``None``.
        perf_mode: VectorE/ScalarE performance-mode divisor applied to the N term (1, 2, 4).
    """

    engine: str
    cycles: float
    ns: float
    formula: str
    flops: float = 0.0
    bytes: int = 0
    dma: DmaPlan | None = None
    perf_mode: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class DmaPlan:
    """A DMA transfer's static shape; the scheduler maps partitions to DMA engines.

    Attributes:
        bytes: bytes moved.
        partitions: SBUF partitions touched (0: HBM to HBM, all engines).
        descriptors: contiguous runs (DMA buffers).
        fixed_ns: fixed latency before data moves.
        eff: rate relative to a plain copy (transposes, read-modify-write).
    """

    bytes: int
    partitions: int
    descriptors: int
    fixed_ns: float
    eff: float

    def engine_ns(self, t: CostTarget, engines: int) -> float:
        """Time each of ``engines`` DMA engines is busy with this transfer (with its gap)."""
        work = self.bytes + self.descriptors * t.dma_overhead_bytes
        return work / engines / t.dma_bytes_per_ns / self.eff + t.dma_transfer_gap_ns


def _fmt(expr: str, env: dict, cycles: float, engine: str, t: CostTarget, src: str) -> str:
    vals = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in env.items())
    return (f"{expr} [{vals}] = {cycles:g} cycles @ {t.clock_ghz[engine]:g} GHz ({engine}) "
            f"<{src}>")



# --------------------------------------------------------------------------------- DMA plans
def _contiguous_run(x: Access, decl) -> int:
    """Elements of the longest contiguous HBM run of an access (innermost dims first)."""
    if x.index is None:
        return int(math.prod(decl.shape)) if decl.shape else 1
    run = 1
    for d in range(len(decl.shape) - 1, -1, -1):
        lin = linear_dim(x.index[d])
        if lin is None:
            return run
        size, k = lin
        if size > 1 and k != 1:
            return run if run > 1 else 1
        run *= size
        if size != decl.shape[d]:
            return run
    return run


def dma_plan(inst: Inst, v: OpView, decls: dict, t: CostTarget) -> DmaPlan:
    """The transfer of a DMA instruction: bytes, partitions, descriptors, latency, rate."""
    acc = [x for x in (*inst.outs, *inst.ins) if isinstance(x, Access)]
    ops = [operand_of(x, decls) for x in acc]
    tile_ops = [o for o in ops if o.kind == "tile"]
    hbm = [x for x, o in zip(acc, ops, strict=True) if o.kind == "hbm"]
    elems = max(o.elems for o in ops) if ops else 0
    size = max([o.itemsize for o in ops] or [4])
    parts = tile_ops[0].partitions if tile_ops else 0
    per_part = elems // parts if parts else elems
    transpose = inst.op in ("load_transpose2d", "dma_transpose")
    runs = []
    for x in hbm:
        # why: a transpose is priced as the plain copy of the same data times its rate (eff)
        run = per_part if transpose and parts else _contiguous_run(x, decls[x.tensor])
        if parts:
            run = min(run, per_part)
        runs.append(max(1, run))
    if not hbm:
        runs = [max(1, per_part)]
    desc = sum(max(1, elems // r) for r in runs)
    nbytes = elems * size * (2 if inst.op == "atomic_rmw" else 1)
    eff = 1.0
    if transpose:
        eff = t.dma_transpose_eff[0 if hbm else 1]
    elif inst.op == "atomic_rmw" or inst.attr("dst_rmw_op") is not None:
        eff = t.dma_rmw_eff
    mode = str(inst.attr("dge_mode", "")).rsplit(".", 1)[-1]
    fixed = t.hwdge_fixed_ns if mode in ("hwdge", "2") and t.hwdge_fixed_ns else t.dma_fixed_ns
    return DmaPlan(int(nbytes), int(parts), int(desc), float(fixed), float(eff))


# --------------------------------------------------------------------------------- pricing
def price(inst: Inst, decls: dict, target=None) -> Price:
    """Prices one IR instruction on ``target``.

    Args:
        inst: the instruction.
        decls: the kernel's tensor declarations (``Kernel.decls()``).
        target: target name, :class:`Target` or :class:`CostTarget` (default trn1).

    Returns:
        The :class:`Price`; its ``formula`` names the expression, its variables and the source.

    Raises:
        NkiError: ``wb_no_cost_entry`` when the opcode has no row in :data:`COSTS`.
    """
    t = cost_target(target)
    entry = COSTS.get(inst.op)
    if entry is None:
        raise NkiError("wb_no_cost_entry",
                       f"the cost model has no entry for opcode '{inst.op}'", inst.loc,
                       "add a row to nki_workbench/_src/hw/cost_table.py COSTS (formula + source)")
    v = OpView.of(inst, decls)
    if entry.formula is None or v.engine == "dma":
        plan = dma_plan(inst, v, decls, t)
        eng = max(1, math.ceil(plan.partitions / t.partitions_per_dma_engine)) \
            if plan.partitions else t.dma_engines
        ns = plan.engine_ns(t, eng)
        text = (f"(bytes + descriptors*OVERHEAD)/(engines*BW)/eff + GAP [bytes={plan.bytes}, "
                f"descriptors={plan.descriptors}, OVERHEAD={t.dma_overhead_bytes}, "
                f"engines={eng}, BW={t.dma_bytes_per_ns:g} B/ns, eff={plan.eff:g}, "
                f"GAP={t.dma_transfer_gap_ns:g} ns] + fixed {plan.fixed_ns:g} ns <hw §4 "
                f"[DMA-O][DMA-BW][PERF]; assume:dma_overhead_bytes, assume:dma_transfer_gap>")
        return Price("dma", 0.0, ns, text, 0.0, plan.bytes, plan)
    if inst.op == "memset" and v.outs and v.outs[0].buffer == "psum" and \
            v.ins and v.ins[0].kind == "scalar" and v.ins[0].value in (0, 0.0):
        return Price("none", 0.0, 0.0, "0 (zero PSUM fill folded into the accumulation group) "
                                       "<assume:psum_zero_fold>")
    if inst.op == "broadcast_to" and partition_broadcast(v, t):
        v = dataclasses.replace(v, engine="tensor")
        entry = PARTITION_BROADCAST
    cyc, expr, env, src = entry.formula(v, t)
    eng = v.engine if v.engine in t.clock_ghz else ("none" if v.engine == "none" else "sync")
    if eng == "none":
        return Price("none", 0.0, 0.0, f"{expr} <{src}>")
    flops = matmul_flops(v) if v.engine == "tensor" and inst.op in ("matmul", "nc_matmul") \
        else float(max((o.elems for o in v.tiles("outs")), default=0))
    return Price(eng, float(cyc), t.ns(eng, cyc), _fmt(expr, env, cyc, eng, t, src), flops,
                 0, None, int(env.get("perf_mode", 1)))
