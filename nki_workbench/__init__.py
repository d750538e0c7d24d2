"""nki_workbench: write, inspect and simulate AWS Neuron NKI kernels on any machine.

Public face (re-exports only):

* ``nki_workbench.nki`` — the NKI-compatible API (``jit``, ``simulate_kernel``, ``language``...)
* ``nki_workbench.compat.install()`` — make ``neuronxcc.nki`` imports resolve to it
* ``nki_workbench.ir`` — the IR: node types, ``print_kernel`` and ``parse``
"""

from . import compat, ir, nki
from ._src.errors import (LoopCarriedDependencyWarning, NkiError, NkiWarning,
                          UninitializedReadWarning)
from ._src.sim.interp import SimParams

__version__ = "0.1.0"

__all__ = ["nki", "compat", "ir", "NkiError", "NkiWarning", "UninitializedReadWarning",
           "LoopCarriedDependencyWarning", "SimParams", "__version__"]
