"""Per-target NeuronCore facts (trn1, trn2, trn3) that the validator and allocators check against.

One table, ``_FACTS``, holds every number with its source; ``Target`` objects are built from it.
Only structural facts live here (sizes, limits, alignments, capabilities); engine clocks and cost
formulas belong to the cost model. Source tags: ``hardware.md §x`` and ``nki-api.md §x`` are the
reference notes in ``shared/reference``; the bracketed tags ([A1], [KLR], ...) are the upstream
sources those notes cite. Figures marked "assumption" or "assumed" are not public; inferred.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["DEFAULT_TARGET", "TARGETS", "TARGET_ALIASES", "Target", "get_target"]


@dataclasses.dataclass(frozen=True)
class Target:
    """Hardware facts of one NeuronCore generation, as the simulator and validator see them.

    Attributes:
        name: canonical target name (``'trn1'``, ``'trn2'``, ``'trn3'``).
        nc_version: NeuronCore generation number, as ``nisa.nc_version`` (gen2 = 2, ...).
        num_partitions: SBUF / PSUM partitions (lanes).
        sbuf_bytes_per_partition: physical SBUF bytes per partition.
        sbuf_reserved_bytes: bytes per partition kept for compiler-internal use.
        total_available_sbuf_size: usable SBUF bytes per partition (``nl.tile_size``).
        psum_bytes_per_partition: PSUM bytes per partition.
        psum_banks: PSUM banks per partition.
        psum_bank_bytes: bytes per PSUM bank per partition.
        pmax: max partition-dim size of a tile (``nl.tile_size.pmax``).
        psum_fmax: max free size of a PSUM tile, in elements (``nl.tile_size.psum_fmax``).
        gemm_stationary_fmax: max free size of a matmul stationary operand.
        gemm_moving_fmax: max free size of a matmul moving operand (``nl.tile_size`` constant).
        bn_stats_fmax: max free size of a ``nisa.bn_stats`` input.
        psum_min_align: byte alignment of PSUM free-dim addresses.
        sbuf_min_align: byte alignment of SBUF free-dim addresses.
        matmul_moving_fmax_fp32: largest moving free size one matmul may write to an fp32 PSUM tile.
        matmul_moving_fmax_bf16: same for a bf16 PSUM tile; 0 where PSUM cannot hold bf16 results.
        psum_accumulate_dtypes: dtype names a matmul may accumulate into in PSUM.
        sbuf_operand_fmax: max free elements of a Vector/Scalar operand in SBUF.
        psum_operand_fmax: max free elements of a Vector/Scalar operand in PSUM.
        max_access_pattern_dims: free-dim access-pattern dimensions per partition.
        partition_starts: ``(max_partitions, allowed_start_partitions)`` rows: a tile spanning at
            most ``max_partitions`` partitions (and more than the previous row's) must start at one
            of the listed partitions.
        gpsimd_psum_access: whether GpSimd can read or write PSUM.
        has_hwdge: whether the hardware descriptor-generation engine (``dge_mode.hwdge``) exists.
        cores_per_chip: physical NeuronCores per chip.
        lnc_options: valid logical-NeuronCore sizes (physical cores per logical core).
        hbm_bytes_per_chip: device memory (HBM) of one chip, the most any kernel's HBM
            tensors can take together.
    """

    name: str
    nc_version: int
    num_partitions: int
    sbuf_bytes_per_partition: int
    sbuf_reserved_bytes: int
    total_available_sbuf_size: int
    psum_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int
    pmax: int
    psum_fmax: int
    gemm_stationary_fmax: int
    gemm_moving_fmax: int
    bn_stats_fmax: int
    psum_min_align: int
    sbuf_min_align: int
    matmul_moving_fmax_fp32: int
    matmul_moving_fmax_bf16: int
    psum_accumulate_dtypes: tuple[str, ...]
    sbuf_operand_fmax: int
    psum_operand_fmax: int
    max_access_pattern_dims: int
    partition_starts: tuple[tuple[int, tuple[int, ...]], ...]
    gpsimd_psum_access: bool
    has_hwdge: bool
    cores_per_chip: int
    lnc_options: tuple[int, ...]
    hbm_bytes_per_chip: int

    def __post_init__(self) -> None:
        """Checks that the table's figures agree with each other."""
        checks = {
            "sbuf: physical - reserved == available": self.sbuf_bytes_per_partition
            - self.sbuf_reserved_bytes
            == self.total_available_sbuf_size,
            "psum: banks * bank bytes == bytes per partition": self.psum_banks
            * self.psum_bank_bytes
            == self.psum_bytes_per_partition,
            "psum_fmax fp32 elements fill one bank": self.psum_fmax * 4 == self.psum_bank_bytes,
        }
        broken = [what for what, ok in checks.items() if not ok]
        if broken:
            raise ValueError(f"inconsistent target {self.name!r}: {'; '.join(broken)}")

    @property
    def sbuf_bytes(self) -> int:
        """Physical SBUF bytes per NeuronCore, all partitions."""
        return self.num_partitions * self.sbuf_bytes_per_partition

    @property
    def psum_bytes(self) -> int:
        """PSUM bytes per NeuronCore, all partitions."""
        return self.num_partitions * self.psum_bytes_per_partition

    def allowed_start_partitions(self, num_partitions: int) -> tuple[int, ...]:
        """Returns the partitions a tile spanning ``num_partitions`` partitions may start at.

        Args:
            num_partitions: partitions the tile spans, 1 to ``pmax``.

        Raises:
            ValueError: if ``num_partitions`` is outside 1..pmax.
        """
        for limit, starts in self.partition_starts:
            if 0 < num_partitions <= limit:
                return starts
        raise ValueError(f"a tile spans 1 to {self.pmax} partitions, got {num_partitions}")


_KIB = 1024
_NAMES = ("trn1", "trn2", "trn3")
_PARTITION_STARTS = ((32, (0, 32, 64, 96)), (64, (0, 64)), (128, (0,)))
_FP32 = ("float32",)

_FACTS: dict[str, tuple[Any, Any, Any]] = {
    # field: (trn1, trn2, trn3),  # source
    "nc_version": (2, 3, 4),  # nki-api.md §4.0; 4: assumption
    "num_partitions": (128, 128, 128),  # hardware.md §1.1
    "sbuf_bytes_per_partition": (192 * _KIB, 224 * _KIB, 256 * _KIB),  # hardware.md §0, §1.1
    "sbuf_reserved_bytes": (16 * _KIB, 16 * _KIB + 8, 16 * _KIB + 8),  # hardware.md §1.1, derived
    "total_available_sbuf_size": (180224, 212984, 245752),  # nki-api.md §2.3 [KLR]
    "psum_bytes_per_partition": (16 * _KIB, 16 * _KIB, 16 * _KIB),  # hardware.md §1.2
    "psum_banks": (8, 8, 8),  # hardware.md §1.2 [A1]
    "psum_bank_bytes": (2 * _KIB, 2 * _KIB, 2 * _KIB),  # hardware.md §1.2 [A1]
    "pmax": (128, 128, 128),  # nki-api.md §2.3
    "psum_fmax": (512, 512, 512),  # nki-api.md §2.3
    "gemm_stationary_fmax": (128, 128, 128),  # nki-api.md §2.3
    "gemm_moving_fmax": (512, 512, 512),  # nki-api.md §2.3
    "bn_stats_fmax": (512, 512, 512),  # nki-api.md §2.3
    "psum_min_align": (4, 4, 4),  # nki-api.md §2.3 [KLR] (?)
    "sbuf_min_align": (1, 1, 1),  # nki-api.md §2.3 [KLR] (?)
    "matmul_moving_fmax_fp32": (512, 512, 4096),  # hardware.md §1.2 [ISA]
    "matmul_moving_fmax_bf16": (0, 0, 8192),  # hardware.md §1.2 [ISA]
    "psum_accumulate_dtypes": (_FP32, _FP32, (*_FP32, "bfloat16")),  # hardware.md §0, §1.2
    "sbuf_operand_fmax": (64 * _KIB, 64 * _KIB, 64 * _KIB),  # hardware.md §1.1 [A1]; v3+ assumed
    "psum_operand_fmax": (4 * _KIB, 4 * _KIB, 4 * _KIB),  # hardware.md §1.1 [A1]; v3+ assumed
    "max_access_pattern_dims": (4, 4, 4),  # hardware.md §1.1 [A1]; v3+ assumed
    "partition_starts": (_PARTITION_STARTS,) * 3,  # hardware.md §1.1 [A1][ALLOC]
    "gpsimd_psum_access": (False, False, False),  # hardware.md §1.2 [ISA]
    "has_hwdge": (False, True, True),  # nki-api.md §4.0 (dge_mode)
    "cores_per_chip": (2, 8, 8),  # hardware.md §0
    "lnc_options": ((1,), (1, 2), (1, 2)),  # hardware.md §0, §5 [LNC]
    "hbm_bytes_per_chip": (32 * _KIB**3, 96 * _KIB**3, 144 * _KIB**3),  # hardware.md §0
}

TARGETS: dict[str, Target] = {
    name: Target(name=name, **{field: values[i] for field, values in _FACTS.items()})
    for i, name in enumerate(_NAMES)
}

# Other names for the same hardware: inf2 shares trn1's NeuronCore-v2 (hardware.md §0, §5;
# nki-api.md §4.0), and the gen names follow nisa.nc_version (gen4: assumption).
TARGET_ALIASES: dict[str, str] = {"inf2": "trn1", "gen2": "trn1", "gen3": "trn2", "gen4": "trn3"}

DEFAULT_TARGET = "trn1"


def get_target(name: str | Target | None = None) -> Target:
    """Returns the facts of a target.

    Args:
        name: a target name (``'trn1'``, ``'trn2'``, ``'trn3'``) or alias (``'inf2'``, ``'gen2'``,
            ``'gen3'``, ``'gen4'``), case-insensitive; a ``Target`` is returned unchanged and
            ``None`` means ``DEFAULT_TARGET``.

    Returns:
        The ``Target``; aliases resolve to the canonical target (``get_target('inf2').name`` is
        ``'trn1'``).

    Raises:
        ValueError: for an unknown name; the message lists the valid names.
    """
    if isinstance(name, Target):
        return name
    key = DEFAULT_TARGET if name is None else str(name).strip().lower()
    target = TARGETS.get(TARGET_ALIASES.get(key, key))
    if target is None:
        raise ValueError(
            f"unknown target {name!r}; valid targets: {', '.join(TARGETS)} "
            f"(aliases: {', '.join(sorted(TARGET_ALIASES))})"
        )
    return target
