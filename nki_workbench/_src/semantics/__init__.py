"""What every opcode computes, written once: the numerics protocol and the value rules.

Layering: ``semantics`` sits above the IR and the front ends and below the executors
(``sim/interp.py``, the numpy interpreter; ``sim/jax_exec.py``, the compiled JAX lowering).
Executors own memory, masks, written/poison tracking, races and out-of-bounds checks; they never
say what an op computes — they look up :data:`VALUE_RULES` and call ``rule(P, ex)`` with their
:class:`~.numerics.Numerics` instance. See docs/semantics.md.
"""

from __future__ import annotations

from .numerics import (
    NUMPY,
    VALUE_RULES,
    Ex,
    Numerics,
    Unsupported,
    jax_numerics,
    value_rule,
)

__all__ = ["NUMPY", "VALUE_RULES", "Ex", "Numerics", "Unsupported", "jax_numerics",
           "value_rule"]
