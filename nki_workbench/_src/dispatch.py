"""``nki.jit``: the decorator that carries a kernel function, its launch grid and its mode.

``GenericKernel[grid](*args)`` traces once per specialisation (cached) and runs the kernel in
the chosen mode. Mode ``"simulation"`` runs the CPU simulator; on a machine without Neuron
hardware the workbench also simulates ``"auto"``/``"baremetal"`` calls with numpy arguments.
"""

from __future__ import annotations

import functools
import os

from .errors import NkiError
from .runtime import get_traced, run_traced

__all__ = ["GenericKernel", "jit", "MODES"]

MODES = ("auto", "jax", "torchxla", "baremetal", "benchmark", "simulation", "trace")


class GenericKernel:
    """A kernel function with its mode, launch grid and options (what ``@nki.jit`` returns).

    Attributes:
        func: the Python kernel function.
        mode: execution mode.
        grid: SPMD launch grid (``()`` = one program).
        kwargs: options (``platform_target``, ``additional_compile_opt``...).
    """

    def __init__(self, func, mode: str = "auto", grid=(), **kwargs):
        if mode not in MODES:
            raise ValueError(f"'{mode}' passed to nki.jit is not a valid mode; choose one of "
                             f"{', '.join(MODES[:-1])}")
        self.func = func
        self.mode = mode
        self.grid = tuple(grid)
        self.kwargs = kwargs
        self._cache: dict = {}
        functools.update_wrapper(self, func)

    @property
    def platform_target(self):
        """Target named by ``platform_target=`` or ``NEURON_PLATFORM_TARGET_OVERRIDE``."""
        return self.kwargs.get("platform_target") or os.environ.get(
            "NEURON_PLATFORM_TARGET_OVERRIDE") or None

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        k = GenericKernel(self.func, self.mode, tuple(int(g) for g in grid), **self.kwargs)
        k._cache = self._cache
        return k

    def trace(self, *args, **kwargs):
        """The traced kernel (:class:`~nki_workbench._src.trace.kernel.Traced`) for these args."""
        return get_traced(self.func, args, kwargs, grid=self.grid, target=self.platform_target,
                          cache=self._cache)

    def simulate(self, *args, params=None, **kwargs):
        """Run in the CPU simulator and return the outputs as numpy arrays."""
        traced = self.trace(*args, **kwargs)
        return run_traced(traced, self.func, args, kwargs, params)

    def __call__(self, *args, **kwargs):
        from .trace import context as C
        if C.current() is not None:
            if self.grid:
                raise NkiError("err_nested_kernel_with_spmd_grid",
                               f"kernel '{self.func.__name__}' launched with a grid from inside "
                               "another kernel", hint="call the sub-kernel without a grid")
            return self.func(*args, **kwargs)
        if self.mode in ("simulation", "trace", "auto", "baremetal"):
            return self.simulate(*args, **kwargs)
        raise NkiError(None, f"mode '{self.mode}' needs the framework bridge, which is not "
                       "available in this build")

    def __repr__(self):
        grid = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"<nki.jit kernel {self.func.__name__}{grid} mode={self.mode}>"


def jit(func=None, mode: str = "auto", **kwargs):
    """Decorate an NKI kernel (bare ``@nki.jit``, ``@nki.jit(mode=...)`` or ``nki.jit(f, ...)``).

    Args:
        func: the kernel function.
        mode: ``"auto"``, ``"simulation"``, ``"baremetal"``, ``"benchmark"``, ``"jax"``,
            ``"torchxla"``.
        **kwargs: options such as ``platform_target="trn2"``.

    Returns:
        GenericKernel (or a decorator when ``func`` is omitted).
    """
    if func is None:
        return lambda f: GenericKernel(_unwrap(f), mode, **kwargs)
    return GenericKernel(_unwrap(func), mode, **kwargs)


def _unwrap(f):
    return f.func if isinstance(f, GenericKernel) else f
