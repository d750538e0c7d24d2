"""``nki_workbench.nki``: the NKI-compatible surface (what ``neuronxcc.nki`` provides).

Example:
    >>> from nki_workbench import nki
    >>> import nki_workbench.nki.language as nl
"""

from __future__ import annotations

from .._src.dispatch import GenericKernel, baremetal, benchmark, jit, profile
from .._src.encode import FrameworkKernel
from .._src.errors import NkiError
from .._src.runtime import NumpyKernel as _NumpyKernel
from .._src.runtime import simulate as _simulate
from .._src.sim.interp import SimParams
from .._src.trace.tensor import NkiTensor as tensor
from . import compiler, isa, language, typing  # noqa: F401  (sub-modules, as in NKI)

__all__ = ["jit", "simulate_kernel", "baremetal", "benchmark", "profile", "trace",
           "trace_kernel", "tensor", "GenericKernel", "FrameworkKernel", "SimParams", "NkiError",
           "language", "isa", "compiler", "typing"]


def _split(kernel):
    from .._src.encode import check_grid, hardware_target
    if isinstance(kernel, (GenericKernel, _NumpyKernel)):
        target = kernel.platform_target if isinstance(kernel, GenericKernel) \
            else kernel.options["platform_target"]
        grid = check_grid(kernel.grid, target or "trn1")
        return (kernel.func, grid, hardware_target(target) if target else None,
                kernel._cache)
    if callable(kernel):
        return kernel, (), None, None
    raise TypeError(f"expected an NKI kernel (a function or @nki.jit kernel), got {kernel!r}")


def simulate_kernel(kernel, *args, params: SimParams | None = None, backend: str | None = None,
                    **kwargs):
    """Run ``kernel`` on the CPU simulator with numpy inputs.

    Args:
        kernel: an ``@nki.jit`` kernel (optionally with a grid, ``k[2, 2]``) or a plain
            kernel function.
        *args: numpy arrays for tensors, Python values for compile-time constants.
        params: :class:`SimParams` (uninitialised-read policy, race detection, shuffling).
        backend: ``"numpy"`` (the interpreter, default) or ``"jax"`` (the IR compiled to one
            jitted JAX program: same results, much faster on large tiled kernels); ``None``
            reads ``NKI_WORKBENCH_SIM_BACKEND``.
        **kwargs: keyword arguments of the kernel.

    Returns:
        The kernel's outputs as numpy arrays (a tuple for several); ``None`` for legacy kernels,
        whose numpy output arguments are filled in place.
    """
    func, grid, target, cache = _split(kernel)
    return _simulate(func, args, kwargs, grid=grid, target=target, params=params, cache=cache,
                     backend=backend)


def trace_kernel(kernel, *args, **kwargs):
    """Trace ``kernel`` for these arguments and return its IR (:class:`~nki_workbench.ir.Kernel`).

    ``str(ir)`` is not the text form; use ``nki_workbench.ir.print_kernel(ir)`` or print the
    returned object's ``text`` — this function returns a :class:`TracedIR` whose ``str`` is the
    IR text.
    """
    func, grid, target, cache = _split(kernel)
    from .._src.runtime import get_traced
    traced = get_traced(func, args, kwargs, grid=grid, target=target, cache=cache)
    return TracedIR(traced.kernel)


class TracedIR:
    """A traced kernel's IR with its text form as ``str()``.

    Attributes:
        kernel: the IR (:class:`nki_workbench.ir.Kernel`).
        text: the printed IR.
    """

    def __init__(self, kernel):
        from .._src.ir import print_kernel
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
