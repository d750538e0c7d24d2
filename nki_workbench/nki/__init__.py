"""``nki_workbench.nki``: the NKI-compatible surface (what ``neuronxcc.nki`` provides).

Example:
    >>> from nki_workbench import nki
    >>> import nki_workbench.nki.language as nl
"""

from __future__ import annotations

from .._src.dispatch import GenericKernel, baremetal, benchmark, jit, kernel_launch, profile
from .._src.encode import FrameworkKernel
from .._src.errors import NkiError
from .._src.ir import print_kernel
from .._src.options import SimParams, legacy_backend
from .._src.runtime import get_traced
from .._src.runtime import simulate as _simulate
from .._src.trace.tensor import NkiTensor as tensor
from . import compiler, isa, language, typing  # noqa: F401  (sub-modules, as in NKI)

__all__ = ["jit", "simulate_kernel", "baremetal", "benchmark", "profile", "trace",
           "trace_kernel", "tensor", "GenericKernel", "FrameworkKernel", "SimParams", "NkiError",
           "language", "isa", "compiler", "typing"]


def simulate_kernel(kernel, *args, params: SimParams | None = None, backend: str | None = None,
                    **kwargs):
    """Run ``kernel`` on the CPU simulator with numpy inputs.

    Args:
        kernel: an ``@nki.jit`` kernel (optionally with a grid, ``k[2, 2]``) or a plain
            kernel function.
        *args: numpy arrays for tensors, Python values for compile-time constants.
        params: :class:`SimParams` (uninitialised-read policy, race detection, shuffling, and
            ``backend="numpy"`` (the interpreter), ``"jax"`` (the IR compiled to one jitted
            JAX program: same results, much faster on large tiled kernels) or ``"auto"`` (the
            interpreter until compiling pays); ``None`` reads ``NKI_WORKBENCH_SIM_BACKEND``,
            default ``"auto"``).
        backend: deprecated spelling of ``params=SimParams(backend=...)``.
        **kwargs: keyword arguments of the kernel.

    Returns:
        The kernel's outputs as numpy arrays (a tuple for several); ``None`` for legacy kernels,
        whose numpy output arguments are filled in place.
    """
    params = legacy_backend(params, backend, "simulate_kernel")
    func, grid, target, cache = kernel_launch(kernel)
    return _simulate(func, args, kwargs, grid=grid, target=target, params=params, cache=cache)


def trace_kernel(kernel, *args, **kwargs):
    """Trace ``kernel`` for these arguments and return its IR (:class:`~nki_workbench.ir.Kernel`).

    ``str(ir)`` is not the text form; use ``nki_workbench.ir.print_kernel(ir)`` or print the
    returned object's ``text`` — this function returns a :class:`TracedIR` whose ``str`` is the
    IR text.
    """
    func, grid, target, cache = kernel_launch(kernel)
    traced = get_traced(func, args, kwargs, grid=grid, target=target, cache=cache)
    return TracedIR(traced.kernel)


class TracedIR:
    """A traced kernel's IR with its text form as ``str()``.

    Attributes:
        kernel: the IR (:class:`nki_workbench.ir.Kernel`).
        text: the printed IR.
    """

    def __init__(self, kernel):
        self.kernel = kernel
        self.text = print_kernel(kernel)

    def __str__(self):
        return self.text

    def __repr__(self):
        return self.text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text}


def trace(func=None, **kwargs):
    """Legacy ``nki.trace`` decorator: trace as an NKI kernel without choosing a backend.

    Run it with ``nki.simulate_kernel(kernel, *arrays)``.
    """
    if func is None:
        return lambda f: GenericKernel(f, "simulation", **kwargs)
    return GenericKernel(func, "simulation", **kwargs)
