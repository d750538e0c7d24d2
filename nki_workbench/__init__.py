"""nki_workbench: write, inspect and simulate AWS Neuron NKI kernels on any machine.

Public face (re-exports only):

* ``nki_workbench.nki`` — the NKI-compatible API (``jit``, ``simulate_kernel``, ``language``...)
* ``nki_workbench.compat.install()`` — make ``neuronxcc.nki`` imports resolve to it
* ``nki_workbench.ir`` — the IR: node types, ``print_kernel`` and ``parse``
* ``nki_workbench.inspect(kernel, *args)`` — an :class:`Inspection` (outputs, backend_config, IR)
* ``decode_backend_config`` / ``simulate_backend_config`` — read and run a custom call's config
"""

from . import compat, ir, nki
from ._src.encode import decode_backend_config, simulate_backend_config
from ._src.errors import (
                          LoopCarriedDependencyWarning,
                          NkiError,
                          NkiWarning,
                          UninitializedReadWarning,
)
from ._src.inspection import Inspection, inspect
from ._src.sim.interp import SimParams

__version__ = "0.1.0"

__all__ = ["nki", "compat", "ir", "NkiError", "NkiWarning", "UninitializedReadWarning",
           "LoopCarriedDependencyWarning", "SimParams", "inspect", "Inspection",
           "decode_backend_config", "simulate_backend_config", "__version__"]

from ._src.collectives import simulate_ranks  # noqa: E402  (multi-rank collectives)

__all__.append("simulate_ranks")
