"""``nki.jit`` of today's API: the :class:`Kernel` object (``kernel[2]`` = LNC2 launch)."""

from __future__ import annotations

import os

from .._src.current.kernel import CurrentFunction
from .._src.dispatch import GenericKernel
from .._src.errors import NkiError

__all__ = ["Kernel", "jit", "DEFAULT_TARGET"]

DEFAULT_TARGET = "trn3"
"""Target when ``NEURON_PLATFORM_TARGET_OVERRIDE`` is unset (AWS's simulator default)."""

_TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
_TARGETS = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
            "trn3": "trn3", "gen4": "trn3"}


class Kernel(GenericKernel):
    """An ``@nki.jit`` kernel of today's API (``kernel[2]`` launches it on two LNC cores).

    Calling it with numpy arrays runs it (on the simulator when no Neuron device is present);
    ``nki.simulate(kernel)`` runs it on the simulator explicitly.
    """

    def __init__(self, fn, grid=(), **kwargs):
        if "platform_target" in kwargs:
            raise NkiError(None, "nki.jit(platform_target=...) is not accepted since NKI 0.3",
                           hint=f"set {_TARGET_ENV}=trn2 (or trn1/trn3) instead")
        kwargs.pop("mode", None)  # why: NKI 0.3 ignores mode= (0.2 kernels still pass it)
        fn = fn if isinstance(fn, CurrentFunction) else CurrentFunction(fn)
        super().__init__(fn, "auto", grid, **kwargs)

    @property
    def platform_target(self):
        """``NEURON_PLATFORM_TARGET_OVERRIDE`` (trn1/inf2/gen2, trn2/gen3, trn3/gen4), else trn3."""
        env = os.environ.get(_TARGET_ENV)
        if env and env not in _TARGETS:
            raise NkiError(None, f"{_TARGET_ENV}={env!r} is not a target",
                           hint=f"use one of {', '.join(_TARGETS)}")
        return _TARGETS[env] if env else DEFAULT_TARGET

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        if len(grid) != 1:
            raise NkiError(None, f"kernel[{', '.join(map(str, grid))}]: NKI 0.2+ launches take "
                           "one integer, the LNC degree", hint="write kernel[2]")
        k = Kernel(self.func, grid, **self.kwargs)
        k._cache, k._kernels = self._cache, self._kernels
        return k

    def __repr__(self):
        grid = f"[{self.grid[0]}]" if self.grid else ""
        return f"<nki.jit kernel {self.func.__name__}{grid}>"


def jit(fn=None, **kwargs):
    """Decorate a kernel of today's API (``@nki.jit``, ``@nki.jit()``, ``nki.jit(f)``).

    Args:
        fn: the kernel function.
        **kwargs: options (``mode=`` is accepted and ignored, as since NKI 0.3).

    Returns:
        Kernel (or a decorator when ``fn`` is omitted).
    """
    if fn is None:
        return lambda f: Kernel(_unwrap(f), **kwargs)
    return Kernel(_unwrap(fn), **kwargs)


def _unwrap(f):
    return f.func if isinstance(f, GenericKernel) else f


