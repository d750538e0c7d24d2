"""``nki.isa`` enums and constants.

``nki.isa`` enums and constants (nki-api.md §4.0): engines, accumulator commands, DMA modes,
NeuronCore versions and ``fp32`` limits.
"""

from __future__ import annotations

from enum import IntEnum

from ..dtypes import fp32
from ..errors import NkiError, user_location
from ..hw import get_target
from ..trace import context as C

__all__ = ["engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "get_nc_version",
           "fp32", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine",
           "unknown_engine", "dma_engine", "sync_engine", "ENGINE_NAME"]


class engine(IntEnum):  # noqa: N801 - NKI's spelling
    """NeuronCore engines (the ``engine=`` argument of several instructions)."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class reduce_cmd(IntEnum):  # noqa: N801
    """What an instruction does with its engine's per-partition accumulator registers."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4  # why: newer NKI (tensor_scalar_cumulative's doc tests); the value is ours


class dge_mode(IntEnum):  # noqa: N801
    """Descriptor-generation mode of a DMA (``hwdge`` exists on NeuronCore-v3 and later)."""

    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(IntEnum):  # noqa: N801
    """What a DMA does with out-of-bounds indirect indices."""

    error = 0
    skip = 1


class nc_version(IntEnum):  # noqa: N801
    """NeuronCore generation: gen2 = Trn1/Inf2, gen3 = Trn2, gen4 = Trn3."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown
dma_engine = engine.dma
sync_engine = engine.sync

# engine enum -> IR engine name (ir.opcodes.ENGINES)
ENGINE_NAME = {engine.tensor: "tensor", engine.vector: "vector", engine.scalar: "scalar",
               engine.gpsimd: "gpsimd", engine.dma: "dma", engine.sync: "sync"}


def get_nc_version() -> nc_version:
    """The NeuronCore version of the kernel's target (``platform_target``).

    Returns:
        nc_version: ``gen2`` for trn1/inf2, ``gen3`` for trn2, ``gen4`` for trn3.

    Raises:
        NkiError: ``err_nki_api_outside_of_nki_kernel`` outside a traced kernel.
    """
    ctx = C.current()
    if ctx is None:
        raise NkiError("err_nki_api_outside_of_nki_kernel",
                       "nisa.get_nc_version() called outside of an NKI kernel", user_location(),
                       "call it inside the kernel; the target comes from platform_target")
    return nc_version(get_target(ctx.target).nc_version)
