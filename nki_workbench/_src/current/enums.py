"""Enums of today's ``nki.isa`` (NKI 0.2+), with the values that release documents.

``engine``, ``oob_mode`` and ``nc_version`` are the legacy front end's own enums (same members
and values); ``reduce_cmd`` gained ``load_reduce``, ``dge_mode`` was renumbered, and
``dma_engine`` / ``matmul_perf_mode`` are new. :func:`legacy` maps a value to the legacy
front end's enum member of the same name, so both APIs emit the same IR attributes.
"""

from __future__ import annotations

from enum import Enum, IntEnum, StrEnum

from ..isa import enums as _legacy
from ..isa.enums import engine, nc_version, oob_mode

__all__ = ["engine", "oob_mode", "nc_version", "reduce_cmd", "dge_mode", "dma_engine",
           "matmul_perf_mode", "legacy_cmd", "legacy_dge", "enum_member"]


class reduce_cmd(IntEnum):  # noqa: N801 - NKI's spelling
    """Accumulator-register command of Scalar/Vector Engine reductions."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(IntEnum):  # noqa: N801
    """Descriptor-generation mode of a DMA (NKI 0.2+ numbering)."""

    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class dma_engine(IntEnum):  # noqa: N801
    """Which DMA carries an LNC transfer (NKI 0.3+)."""

    dma = 1
    gpsimd_dma = 2


class matmul_perf_mode(StrEnum):  # noqa: N801
    """Tensor Engine performance mode of ``nc_matmul``."""

    none = "none"
    double_row = "double_row"


def enum_member(enum, v, api: str, arg: str):
    """``v`` as a member of ``enum`` (members of a same-named enum of either API accepted)."""
    from ..errors import NkiError, user_location
    if isinstance(v, Enum) and v.name in enum.__members__:
        return enum[v.name]
    if issubclass(enum, IntEnum) and isinstance(v, int) and not isinstance(v, bool) and \
            v in enum._value2member_map_:
        return enum(v)  # why: nki-library passes the raw value (dge_mode=3) and NKI accepts it
    raise NkiError(None, f"{api}: {arg} must be a nki.isa.{enum.__name__} member, got {v!r}",
                   user_location(), f"use one of {', '.join(enum.__members__)}")


def legacy_cmd(v, api: str):
    """The legacy ``reduce_cmd`` member for a current one (``load_reduce`` has no legacy twin)."""
    m = enum_member(reduce_cmd, v, api, "reduce_cmd")
    if m is reduce_cmd.load_reduce:
        from ..errors import NkiError, user_location
        raise NkiError("wb_isa_unsupported", f"{api}: reduce_cmd.load_reduce is not modelled "
                       "by the workbench yet", user_location(),
                       "use reset_reduce and add the initial value explicitly")
    return _legacy.reduce_cmd[m.name]


def legacy_dge(v, api: str):
    """The legacy ``dge_mode`` member of the same name."""
    return _legacy.dge_mode[enum_member(dge_mode, v, api, "dge_mode").name]
