"""``nki.language`` of today's standalone ``import nki`` (NKI 0.2+).

Example:
    >>> import nki_workbench.current.language as nl
    >>> nl.float32, nl.tile_size.pmax
    ('float32', 128)
"""

from __future__ import annotations

from .._src import lang as _legacy
from .._src.current import language as _current
from .._src.current.language import *  # noqa: F401,F403
from .._src.current.registers import dynamic_range, fori_loop, while_loop  # noqa: F401

# legacy index grids, block dims, masks and SPMD helpers that NKI 0.2 removed
_REMOVED = {"arange", "mgrid", "par_dim", "spmd_dim", "nc", "loop_reduce", "atomic_rmw",
            "fp32", "static_cast", "gemm_grid", "gemm_stationary_grid", "bfp16", "finfo",
            "all_reduce", "NkiTensor"}
_DTYPES = {n: ("bool" if n == "bool_" else n) for n in _current.DTYPES}

for _n in _legacy.__all__:
    if _n not in _REMOVED and _n not in _current.__all__ and _n not in _DTYPES:
        globals()[_n] = getattr(_legacy, _n)
globals().update(_DTYPES)
globals()["bool"] = "bool"  # why: nki-library spells the mask dtype nl.bool (= nl.bool_)
ds = _legacy.ds
tensor = _legacy.NkiTensor

__all__ = sorted({n for n in _legacy.__all__ if n not in _REMOVED} | set(_current.__all__)
                 | set(_DTYPES) | {"bool", "ds", "tensor", "dynamic_range", "fori_loop",
                                    "while_loop"})
