"""``nki.isa.constants``: the enums nki-library imports from here (same objects as ``nisa.*``)."""

from ..._src.current.enums import (
    dge_mode,
    dma_engine,
    engine,
    matmul_perf_mode,
    oob_mode,
    reduce_cmd,
)

__all__ = ["dge_mode", "dma_engine", "engine", "matmul_perf_mode", "oob_mode", "reduce_cmd"]
