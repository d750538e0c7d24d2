"""``nki.isa`` (``nisa``): direct access to NeuronCore instructions.

Every instruction of ``neuronxcc.nki.isa`` (nki-api.md Appendix A.3), the engine enums and
constants. Each call traces into one IR instruction that records the engine running it.
"""

from ..._src.isa import *  # noqa: F401,F403
from ..._src.isa import __all__ as _all
from . import constants  # noqa: F401

__all__ = [n for n in _all if n != "OPCODES"] + ["constants"]
