"""The compiled simulator as a JAX function a caller traces into its own program.

:func:`inline_function` gives the JAX bridge (``bridges/jax_lowering``) the program that
:func:`.jax_exec.run_compiled` jits on its own, as a function of JAX operands: the bridge
traces it inside the user's ``jax.jit``/``vmap``/``scan``, so a kernel call becomes ordinary XLA
operations there (no host round trip; ``vmap`` batches it). The same lowering (:class:`_Lower`)
runs, so the results are the compiled backend's, which equal the interpreter's.

What differs from a ``run_compiled`` call:

* Constants, the fence zero, the operands and the results pass through
  ``lax.optimization_barrier``: XLA must not fold the kernel's constants or fuse its arithmetic
  with the caller's operations around it (an FMA across the boundary would round differently
  from the interpreter).
* The check flag cannot re-run the interpreter from inside a compiled program; the bridge
  decides what to do with it (see :attr:`InlineProgram.clean`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..options import SimParams
from .jax_exec import compiled
from .jax_static import why_interpreted

__all__ = ["InlineProgram", "inline_function"]


@dataclasses.dataclass
class InlineProgram:
    """A kernel's compiled program traced for one operand signature.

    Attributes:
        outs: the output arrays (tracers of the caller's trace), storage dtypes.
        flag: a boolean scalar, true exactly when the interpreter would warn or raise.
        clean: no check can fire in this program (``flag`` is a constant false).
    """

    outs: tuple
    flag: object
    clean: bool


def inline_function(kernel, params: SimParams | None):
    """The compiled program of ``kernel`` as a function of JAX operands, or why it has none.

    Args:
        kernel: the traced kernel IR.
        params: the :class:`SimParams` of the run (``None``: the defaults).

    Returns:
        ``fn(*operands) -> InlineProgram`` (operands in parameter order, storage dtypes; it
        raises :class:`~..semantics.Unsupported` when the lowering meets something without a
        JAX rule), or a string saying why the kernel runs only in the interpreter.
    """
    params = params or SimParams()
    comp = compiled(kernel)
    why = comp.lower.unsupported or why_interpreted(kernel, params)
    if why is not None:
        return why
    uninit_error = params.uninitialized == "error"
    races = params.detect_races and comp.has_races
    const_values = comp.lower.const_values

    def fn(*operands) -> InlineProgram:
        import jax.numpy as jnp
        from jax import lax
        consts = tuple(jnp.asarray(c) for c in const_values)
        consts, zero, ops = lax.optimization_barrier(
            (consts, jnp.asarray(np.int32(0)), tuple(operands)))
        # why: one _Lower holds the lowering state; another thread may be tracing it too
        with comp.tracing:
            outs, flag = comp.lower.build(list(ops), list(consts), zero, uninit_error, races)
            clean = comp.lower.clean
        outs = lax.optimization_barrier(tuple(outs))
        return InlineProgram(outs, flag, clean)

    return fn

