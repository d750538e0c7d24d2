"""``nki_workbench.current``: today's standalone ``import nki`` (NKI 0.2+) on the workbench.

Kernels written for ``import nki`` (destination-first ``nki.isa``, ``nki.simulate``, launch
``kernel[2]``) trace into the same IR as legacy ``neuronxcc.nki`` kernels, so the simulator,
cost model, timelines, occupancy and every notebook view work for them unchanged.
``nki_workbench.compat.install()`` makes ``import nki`` resolve here when the real package is
absent.

Example:
    >>> import nki_workbench.current as nki
    >>> import nki_workbench.current.language as nl
    >>> import nki_workbench.current.isa as nisa
"""

from __future__ import annotations

from .._src.current_jit import DEFAULT_TARGET, Kernel, api_of, backend_config, jit, simulate
from .._src.errors import NkiError
from .._src.options import SimParams
from . import collectives, isa, language  # noqa: F401  (sub-modules, as in NKI)

__all__ = ["jit", "simulate", "Kernel", "api_of", "backend_config", "language", "isa",
           "typing", "collectives", "NkiError", "SimParams", "DEFAULT_TARGET"]

def __getattr__(name):
    if name == "typing":
        from ..nki import typing
        return typing
    if name in ("baremetal", "benchmark", "profile", "simulate_kernel"):
        raise AttributeError(f"nki.{name} is not available since NKI 0.2: use nki.simulate("
                             "kernel)(*arrays), or call the @nki.jit kernel directly")
    raise AttributeError(f"module 'nki' has no attribute {name!r}")



