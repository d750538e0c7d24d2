"""What every opcode computes, written once: the numerics protocol and the value rules.

Layering: ``semantics`` sits above the IR and the front ends and below the executors
(``sim/interp.py``, the numpy interpreter; ``sim/jax_lower.py``, the compiled JAX lowering).
Executors own memory, masks, written/poison tracking, races and out-of-bounds checks; they never
say what an op computes — they look up :data:`VALUE_RULES` and call ``rule(P, ex)`` with their
:class:`~.numerics.Numerics` instance. Per-opcode executor facts: :mod:`.registry`. See
docs/semantics.md.
"""

from __future__ import annotations

# the rule modules register into VALUE_RULES on import: nl (nki.language), isa_* (nki.isa)
from . import isa_alu as _isa_alu  # noqa: F401
from . import isa_copy as _isa_copy  # noqa: F401
from . import isa_engine as _isa_engine  # noqa: F401
from . import isa_gather as _isa_gather  # noqa: F401
from . import isa_stats as _isa_stats  # noqa: F401
from . import nl as _nl  # noqa: F401
from .numerics import (
    NUMPY,
    VALUE_RULES,
    Ex,
    Numerics,
    Unsupported,
    value_rule,
)

__all__ = ["NUMPY", "VALUE_RULES", "Ex", "Numerics", "Unsupported", "jax_numerics",
           "value_rule"]

_JAX_CACHE: dict = {}


def jax_numerics(zero=None) -> Numerics:
    """The compiled lowering's :class:`Numerics`, bound to the run-time int32 ``zero``.

    ``zero`` is a traced int32 zero no compiler can see through (``fence`` ORs float32 bit
    patterns with it); ``None`` gives the unbound instance (fences with an optimisation
    barrier). Importing jax happens here, on first use.
    """
    from . import numerics_jax  # why: numpy-only runs never import jax
    if zero is None:
        inst = _JAX_CACHE.get(None)
        if inst is None:
            inst = _JAX_CACHE[None] = numerics_jax.JaxNumerics(None)
        return inst
    return numerics_jax.JaxNumerics(zero)
