"""Per-target timing facts: engine clocks, PE geometry, DMA figures and the named assumptions.

Every number cites its source in ``shared/reference/hardware.md`` (``hw §x``); figures no public
source gives are named assumptions in :data:`ASSUMPTIONS`. The per-opcode formulas that use these
facts live in :mod:`.cost`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .targets import Target, get_target

__all__ = ["ASSUMPTIONS", "COMPUTE_ENGINES", "CostTarget", "cost_target"]

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")

# --------------------------------------------------------------------------------- assumptions
# Gaps in the public facts (hw §7 and others), each a named, documented choice.
ASSUMPTIONS: dict[str, str] = {
    "sync_clock": "The Sync engine runs at the profiler base clock (hw §0 [NX-SCH]: Trn1 1.4 GHz, "
                  "Trn2 1.2 GHz; Trn3 taken as 1.2 GHz).",
    "trn3_pe_rate": "Trn3 TensorE prices non-MX matmuls with the NeuronCore-v2 ISA formulas at its "
                    "own 2.4 GHz clock (hw §2.1 gives the same 2x128 BF16 input width as v3).",
    "dep_latency": "A consumer waiting on a result (RAW) or on another engine (semaphore) starts "
                   "200 of its own cycles after the producer ends: [PERF]'s ~264-cycle II of "
                   "dependent tiny ScalarE instructions minus MIN_II = 64 (hw §2.6, derived). "
                   "Same-engine WAR/WAW and PSUM accumulation chains on TensorE need no wait.",
    "dma_overhead_bytes": "Each DMA descriptor (one contiguous run, at most one partition) costs "
                          "as much engine time as 256 extra bytes: 4 KiB runs reach 94 % of peak, "
                          "2 KiB 89 %, 256 B 50 % (hw §4 efficiency rules give only the shape).",
    "dma_transfer_gap": "On NeuronCore-v2 each DMA engine idles 214 ns after every transfer "
                        "(its share of one DMA instruction): the perf guide (Opt #9, "
                        "Trainium/Inferentia2) shows per-engine gaps 'due to DMA overhead' "
                        "between transfers and asks for transfers above 32 KiB for ideal "
                        "bandwidth; [A1] puts overhead at both the per-buffer "
                        "(assume:dma_overhead_bytes) and the per-transfer level. 214 ns is the "
                        "gap that leaves a 32 KiB transfer at 90 % of the engine's 17 B/ns "
                        "(32768/17 x (1/0.9 - 1)). v3/v4: 0 (the trn2 DMA overview profile "
                        "shows one engine moving 32 KiB at the full 23 B/ns; the v3 DMA guide "
                        "states only the per-partition payload rule).",
    "dma_fixed_latency": "The ~1300 ns fixed DMA cost (hw §4 [DMA-BW]; ~600 ns hwdge on v3+) is "
                         "latency between the dependencies being met and data moving; it does "
                         "not occupy DMA engines, so back-to-back DMAs overlap it.",
    "dma_queue_policy": "DMAs are assigned to the core's 16 queues round-robin in program order; a "
                        "queue runs its transfers in order (hw §4 [DMA-O]).",
    "dma_engine_split": "A transfer touching partitions p..q uses DMA engines p//8..q//8 (8 "
                        "partitions per engine, hw §4 [DMA-O][A1]); HBM-only transfers use all "
                        "16; engines serve one transfer at a time (round-robin sharing between "
                        "queues is modelled as serialisation, same total throughput).",
    "dma_transpose_v2": "Trn1 DMA transposes (load_transpose2d, dma_transpose) run at 1/8 of the "
                        "plain DMA rate (hw §4: 'much lower bandwidth', no figure).",
    "perf_mode_n": "NeuronCore-v3/v4 VectorE performance modes (2x/4x, hw §2.3 [A2]) divide the N "
                   "term of the v2 formula; v4 ScalarE's 256-wide BF16/FP16/FP8 path (hw §2.1 "
                   "[A3]) halves it likewise. v4 VectorE keeps v3's modes.",
    "stride_penalty_v3": "The v2 rule 'innermost stride > 16 bytes halves engine bandwidth' (hw "
                         "§1.3 [A1]) is applied on all targets, as a doubled N term.",
    "nl_unary_vector": "nl element-wise functions on VectorE (one input) cost like tensor_scalar: "
                       "max(MIN_II, N) (hw §2.3 [A1]: one input tile ~ N cycles).",
    "nl_where": "nl.where (select between two tiles under a predicate) costs like "
                "tensor_copy_predicated with both operands in SBUF: max(MIN_II, 2N).",
    "composites": "nl.softmax, nl.rms_norm, nl.mean, nl.var are priced as the sum of the nki.isa "
                  "instructions they lower to, on the engine the opcode table names.",
    "gpsimd_unpriced": "GpSimd instructions without a published formula (rand on v2/v3, "
                       "random_seed, tensor_partition_reduce, sequence_bounds, builtin_custom_op) "
                       "cost GPSIMD_START + N (hw §3 GPSIMD_START; [3P-RE] says N for "
                       "tensor_partition_reduce).",
    "select_reduce": "select_reduce (no published formula) costs like tensor_copy_predicated "
                     "(both SBUF: max(MIN_II, 2N)) plus MIN_II when it reads out reduce_res.",
    "match_replace_max": "nc_match_replace8's published cost 'min(MIN_II, N)' is read as "
                         "max(MIN_II, N) (hw §3 flags it as a probable typo).",
    "onezero_2x": "is_stationary_onezero / is_moving_onezero with fp32 operands halve the matmul "
                  "cost (hw §2.2 [ISA]: 'up to 2x').",
    "collective": "nl.all_reduce runs on the Sync engine and costs two DMA fixed latencies plus "
                  "its bytes at the core's aggregate DMA bandwidth; programs do not wait for "
                  "each other (no published collective cost).",
    "psum_zero_fold": "Zero-filling a PSUM tile (nl.zeros(..., buffer=psum) before '+=' "
                      "matmuls) costs nothing: the first matmul of the accumulation group "
                      "overwrites instead of accumulating (hw §1.2 [A1]: only TensorE controls "
                      "accumulation).",
    "psum_banks_rr": "Each PSUM tile takes ceil(bytes per partition / 2 KiB) whole banks, handed "
                     "out round-robin; a tile waits until the previous owner of its banks is done "
                     "(hw §1.2: one matmul output per bank, 8 accumulation groups).",
    "sbuf_fresh": "Every SBUF tile allocation gets fresh space (the compiler's multi-buffering); "
                  "SBUF capacity is the occupancy model's concern, not the timeline's.",
    "sbuf_renamed": "A write to an automatically allocated SBUF tensor (no direct allocation) "
                    "does not wait for earlier readers or writers of the region (WAR/WAW): the "
                    "compiler's allocator decides how many physical tiles back a logical "
                    "tensor so that engines overlap (multi-buffering, [ALLOC] direct allocation "
                    "guide); accumulating writes still wait. Explains the nki-samples adaptive "
                    "pooling bounds, whose per-window staging tile would otherwise serialise "
                    "every ~1.3 us DMA latency (docs/calibration.md).",
    "spmd_cores": "SPMD programs run on min(grid size, LNC) physical cores (LNC = 1 on trn1, 2 on "
                  "trn2/trn3, hw §5 [LNC]), program i on core i % cores, one after the other.",
    "port_order": "Port conflicts (hw §1.3) are resolved in program order: an instruction needing "
                  "a shared port waits for the port's previous user.",
}


# --------------------------------------------------------------------------------- per target
# field: (trn1, trn2, trn3)  # source
_NAMES = ("trn1", "trn2", "trn3")
_TABLE: dict[str, tuple[Any, Any, Any]] = {
    "clock_ghz": (
        {"tensor": 2.8, "vector": 1.12, "scalar": 1.4, "gpsimd": 1.4, "sync": 1.4},  # hw §2.1 [A1]
        {"tensor": 2.4, "vector": 0.96, "scalar": 1.2, "gpsimd": 1.2, "sync": 1.2},  # hw §2.1 [A2]
        {"tensor": 2.4, "vector": 1.2, "scalar": 1.2, "gpsimd": 1.2, "sync": 1.2},  # hw §2.1 [A3]
    ),  # sync: assume:sync_clock
    "pe_rows": (128, 128, 128),  # hw §0, §2.2 [A1][A2][A3]
    "pe_cols": (128, 128, 128),  # hw §0, §2.2
    "vector_perf_modes": (False, True, True),  # hw §2.3 [A2]; v4: assume:perf_mode_n
    "scalar_16bit_2x": (False, False, True),  # hw §2.1 [A3] 256 BF16/FP16/FP8; assume:perf_mode_n
    "rand_values_per_cycle": (1, 1, 4),  # hw §2.3 [A3] XORWOW 4/lane/cycle; v2/v3 gpsimd_unpriced
    "min_ii": (64, 64, 64),  # hw §3 MIN_II [ISA-old]
    "min_ii_dynamic": (600, 600, 600),  # hw §3 MIN_II_DYNAMIC [ISA-old]
    "gpsimd_start": (150, 150, 150),  # hw §3 GPSIMD_START [ISA-old]
    "dep_latency_cycles": (200, 200, 200),  # assume:dep_latency (hw §2.6 [PERF] 264 - 64)
    "mm_fp32_factor": (4, 4, 4),  # hw §2.2, §3 nc_matmul: fp32 4x [A1][ISA-old]
    "mm_init_latency": (64, 64, 64),  # hw §2.2 MM_INIT_LATENCY = 64 cycles [A1][PERF]
    "dma_engines": (16, 16, 16),  # hw §4 [A1][A2][DMA-O]
    "dma_queues": (16, 16, 16),  # hw §4 [DMA-O] 16 queues per engine
    "partitions_per_dma_engine": (8, 8, 8),  # hw §4 [DMA-O][A1] (128 / 16)
    "dma_bytes_per_ns": (17.0, 23.0, 33.0),  # hw §4 [DMA-O][DMA-BW] 'BW / Engine' table
    "dma_fixed_ns": (1300.0, 1300.0, 1300.0),  # hw §4 [DMA-BW]; assume:dma_fixed_latency
    "hwdge_fixed_ns": (None, 600.0, 600.0),  # hw §4 [A2][DGE] (v3+ only)
    "dma_overhead_bytes": (256, 256, 256),  # assume:dma_overhead_bytes
    "dma_transfer_gap_ns": (214.0, 0.0, 0.0),  # assume:dma_transfer_gap (hw §4 [PERF] Opt #9, [A1])
    "dma_transpose_eff": ((0.125, 0.125), (0.9, 0.5), (0.9, 0.5)),  # (from HBM, SBUF->SBUF):
    # v3: hw §4 [A2] 90 % / 50 %; v4 same (assumption); v2: assume:dma_transpose_v2
    "dma_rmw_eff": (0.5, 0.5, 1.0),  # hw §1.1, §4 [A3][H4]: pre-v4 RMW at 50 %, v4 full rate
    "port_sbuf_vector_gpsimd": ("always", "perf_mode", "perf_mode"),  # hw §1.3 [A1][A2]
    "port_psum_vector_scalar": ("always", "same_bank", "same_bank"),  # hw §1.3 [A1][A2]
    "stride_penalty_bytes": (16, 16, 16),  # hw §1.3 [A1]; v3/v4: assume:stride_penalty_v3
    "lnc_default": (1, 2, 2),  # hw §0, §5 [LNC]
}


@dataclasses.dataclass(frozen=True)
class CostTarget:
    """The timing facts of one target (see the module table for every figure's source).

    Attributes:
        hw: the structural :class:`~.targets.Target` facts (partitions, PSUM banks, ...).
        clock_ghz: clock per engine.
        pe_rows: TensorE PE-array rows (contraction lanes).
        pe_cols: TensorE PE-array columns.
        vector_perf_modes: whether VectorE has the v3 2x/4x performance modes.
        scalar_16bit_2x: whether ScalarE doubles throughput for 16/8-bit data.
        rand_values_per_cycle: random values per lane per GpSimd cycle.
        min_ii: MIN_II cycles.
        min_ii_dynamic: MIN_II_DYNAMIC cycles.
        gpsimd_start: GPSIMD_START cycles.
        dep_latency_cycles: consumer cycles between a producer's end and a dependent start.
        mm_fp32_factor: fp32 matmul slowdown.
        mm_init_latency: minimum matmul initiation interval (cycles).
        dma_engines: DMA engines per core.
        dma_queues: DMA queues per core.
        partitions_per_dma_engine: partitions one DMA engine serves.
        dma_bytes_per_ns: bandwidth of one DMA engine.
        dma_fixed_ns: fixed latency of a DMA.
        hwdge_fixed_ns: fixed latency of a hardware-DGE DMA (``None``: no hwdge).
        dma_overhead_bytes: engine-time cost of one descriptor, in bytes.
        dma_transfer_gap_ns: idle time of a DMA engine after each of its transfers.
        dma_transpose_eff: DMA transpose rate relative to a copy, (from HBM, SBUF to SBUF).
        dma_rmw_eff: read-modify-write DMA rate relative to a copy.
        port_sbuf_vector_gpsimd: when Vector and GpSimd share the SBUF port.
        port_psum_vector_scalar: when Vector and Scalar share a PSUM port.
        stride_penalty_bytes: innermost stride above which engine bandwidth halves.
        lnc_default: physical cores per logical core by default.
    """

    hw: Target
    clock_ghz: dict
    pe_rows: int
    pe_cols: int
    vector_perf_modes: bool
    scalar_16bit_2x: bool
    rand_values_per_cycle: int
    min_ii: int
    min_ii_dynamic: int
    gpsimd_start: int
    dep_latency_cycles: int
    mm_fp32_factor: int
    mm_init_latency: int
    dma_engines: int
    dma_queues: int
    partitions_per_dma_engine: int
    dma_bytes_per_ns: float
    dma_fixed_ns: float
    hwdge_fixed_ns: float | None
    dma_overhead_bytes: int
    dma_transfer_gap_ns: float
    dma_transpose_eff: tuple
    dma_rmw_eff: float
    port_sbuf_vector_gpsimd: str
    port_psum_vector_scalar: str
    stride_penalty_bytes: int
    lnc_default: int

    @property
    def name(self) -> str:
        """Canonical target name."""
        return self.hw.name

    def peak_flops(self, dtype: str = "bfloat16") -> float:
        """TensorE dense peak FLOP/s: 2 x PE rows x PE columns x clock (fp32: / 4).

        hw §0 consistency note: 128*128*2*2.8 GHz = 91.8 TFLOPS (trn1), 78.6 (trn2).
        """
        f = 2.0 * self.pe_rows * self.pe_cols * self.clock_ghz["tensor"] * 1e9
        return f / self.mm_fp32_factor if dtype == "float32" else f

    @property
    def peak_dma_bytes_per_s(self) -> float:
        """Aggregate DMA bandwidth of one core (hw §0: 272 / 368 / 528 GB/s)."""
        return self.dma_engines * self.dma_bytes_per_ns * 1e9

    def ns(self, engine: str, cycles: float) -> float:
        """Nanoseconds of ``cycles`` on ``engine``."""
        return cycles / self.clock_ghz[engine]


_COST_TARGETS: dict[str, CostTarget] = {}


def cost_target(name: str | Target | CostTarget | None = None) -> CostTarget:
    """Returns the timing facts of a target (name, alias, :class:`Target` or ``None``)."""
    if isinstance(name, CostTarget):
        return name
    hw = get_target(name)
    ct = _COST_TARGETS.get(hw.name)
    if ct is None:
        i = _NAMES.index(hw.name)
        ct = CostTarget(hw=hw, **{k: v[i] for k, v in _TABLE.items()})
        _COST_TARGETS[hw.name] = ct
    return ct
