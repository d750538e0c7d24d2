"""``nki.isa`` of today's standalone ``import nki`` (NKI 0.2+): destination-first instructions.

Example:
    >>> import nki_workbench.current.isa as nisa
    >>> nisa.engine.vector
    <engine.vector: 5>
"""

from __future__ import annotations

from ..._src.current.enums import (
    dge_mode,
    dma_engine,
    engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
)
from ..._src.current.isa import *  # noqa: F401,F403
from ..._src.current.isa import __all__ as _compute
from ..._src.current.isa_data import *  # noqa: F401,F403
from ..._src.current.isa_data import __all__ as _data
from ..._src.current.isa_gpsimd import nc_n_gather, nonzero_with_count
from ..._src.current.registers import (
    VirtualRegister,
    register_alloc,
    register_load,
    register_move,
    register_store,
)
from ..._src.errors import NkiError as NkiValidationError
from ..._src.isa.enums import get_nc_version
from . import constants  # noqa: F401

tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown

__all__ = sorted(set(_compute) | set(_data) - {"FP32_MIN"}) + [
    "dge_mode", "dma_engine", "engine", "matmul_perf_mode", "nc_version", "oob_mode",
    "reduce_cmd", "get_nc_version", "NkiValidationError", "tensor_engine", "vector_engine",
    "scalar_engine", "gpsimd_engine", "unknown_engine", "constants", "VirtualRegister",
    "register_alloc", "register_load", "register_move", "register_store", "nc_n_gather",
    "nonzero_with_count"]
