"""``nki.jit``, ``nki.simulate`` and the new stack's backend_config for today's ``import nki``.

:class:`Kernel` is the ``@nki.jit`` object of NKI 0.2+ (``kernel[2]`` = LNC2 launch; the target
comes from ``NEURON_PLATFORM_TARGET_OVERRIDE``, default trn3 as AWS's simulator), a
:class:`~.dispatch.GenericKernel` whose function is a :class:`~.current.kernel.CurrentFunction`.
``simulate(kernel)(*arrays)`` runs it on the workbench simulator with numpy arrays or torch
tensors and returns outputs of the same kind. On by default (what AWS's simulator leaves to the
hardware path): SBUF/PSUM capacity checks at trace time, uninitialised-read warnings,
out-of-bounds errors and ``affine_range`` race detection; ``inspect`` gives timelines,
occupancy and the backend_config for the same kernel.
"""

from __future__ import annotations

import json
import os

import numpy as np

from . import dtypes as D
from .current.kernel import CurrentFunction, is_current
from .dispatch import GenericKernel, kernel_parts
from .encode import check_grid, hardware_target, serialize_dims
from .errors import NkiError
from .options import SimParams
from .runtime import get_traced
from .runtime import simulate as _simulate

__all__ = ["Kernel", "jit", "DEFAULT_TARGET", "simulate", "api_of", "backend_config",
           "as_kernel", "kernel_of_its_api"]


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

    @property
    def kwargs(self) -> dict:
        """Options, with ``platform_target`` resolved from the environment at each use."""
        return {**self._options, "platform_target": self.platform_target}

    @kwargs.setter
    def kwargs(self, value: dict) -> None:
        self._options = dict(value)

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        if len(grid) != 1:
            raise NkiError(None, f"kernel[{', '.join(map(str, grid))}]: NKI 0.2+ launches take "
                           "one integer, the LNC degree", hint="write kernel[2]")
        k = Kernel(self.func, grid, **self._options)
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




def as_kernel(kernel):
    """``kernel`` as a current-API :class:`Kernel` (a plain function or legacy object wrapped)."""
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, GenericKernel):
        opts = {n: v for n, v in kernel.kwargs.items() if n not in ("platform_target", "mode")}
        return Kernel(kernel.func, kernel.grid, **opts)
    if callable(kernel):
        return Kernel(kernel)
    raise TypeError(f"nki.simulate expects a kernel or a function, got {kernel!r}")


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


def _to_numpy(x):
    if not _is_torch(x):
        return x
    t = x.detach().cpu()
    name = str(t.dtype).replace("torch.", "")
    if name == "bfloat16":
        return t.view(__import__("torch").int16).numpy().view(D.canonical("bfloat16"))
    return t.numpy()


def _to_torch(a, like):
    import torch
    if D.name_of(a.dtype) == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a)).to(like.device)


def simulate(kernel, params: SimParams | None = None):
    """``nki.simulate(kernel)``: a callable running ``kernel`` on the CPU simulator.

    Args:
        kernel: an ``@nki.jit`` kernel (``kernel[2]`` for LNC2) or a plain function.
        params: optional :class:`SimParams` (backend, uninitialised-read policy...).

    Returns:
        ``run(*args, **kwargs)`` returning the kernel's outputs as numpy arrays, or torch
        tensors when any input is a torch tensor (a tuple for several outputs).
    """
    k = as_kernel(kernel)

    def run(*args, **kwargs):
        torch_like = next((a for a in list(args) + list(kwargs.values()) if _is_torch(a)),
                          None)
        np_args = [_to_numpy(a) for a in args]
        np_kwargs = {n: _to_numpy(v) for n, v in kwargs.items()}
        grid = check_grid(k.grid, k.platform_target)
        out = _simulate(k.func, tuple(np_args), np_kwargs, grid=grid,
                        target=hardware_target(k.platform_target), params=params,
                        cache=k.trace_cache)
        if torch_like is None:
            return out
        if isinstance(out, (tuple, list)):
            return type(out)(_to_torch(o, torch_like) for o in out)
        return _to_torch(out, torch_like)

    run.__name__ = f"simulate_{getattr(k.func, '__name__', 'kernel')}"
    return run


def api_of(kernel) -> str:
    """Which NKI API a kernel is written for: ``"nki"`` (today's ``import nki``) or ``"legacy"``.

    Decided by the kernel object (``nki.jit`` of :mod:`nki_workbench.current`) or, for a plain
    function, by the modules its code refers to (``nki.isa`` / ``nki.language`` vs
    ``neuronxcc.nki``).
    """
    func = kernel_parts(kernel).func if not isinstance(kernel, CurrentFunction) else kernel
    if is_current(func):
        return "nki"
    code = getattr(func, "__code__", None)
    g = getattr(func, "__globals__", {})
    values = [g.get(n) for n in getattr(code, "co_names", ())]
    cells = getattr(func, "__closure__", None) or ()
    values += [c.cell_contents for c in cells if _filled(c)]
    for v in values:
        mod = getattr(v, "__name__", "") if isinstance(v, type(np)) else ""
        if mod.startswith("nki_workbench.current"):
            return "nki"
    return "legacy"


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def backend_config(kernel, *args, klir_dir: str = "/tmp", **kwargs) -> dict:
    """The backend_config of the new stack's custom call (``AwsNeuronCustomNativeKernel``).

    JSON ``{"kernel_version": 1, "klir_binary": {"binary": "<dir>/<name>.klir", "input_names":
    [...], "output_names": [...]}, "func_name": ..., "grid": [...], "has_collectives": ...}``
    as the NKI 0.2+ JAX binding writes it; the ``.klir`` path names where the compiled kernel
    would be written (the workbench writes no file).

    Args:
        kernel: the kernel.
        *args: its arguments (arrays or ``nt.tensor`` placeholders).
        klir_dir: directory of the ``.klir`` path.
        **kwargs: keyword arguments of the kernel.
    """
    k = as_kernel(kernel)
    grid = check_grid(k.grid, k.platform_target)
    traced = get_traced(k.func, args, kwargs, grid=grid,
                        target=hardware_target(k.platform_target), cache=k.trace_cache)
    dims = serialize_dims(traced.kernel)
    name = traced.kernel.name
    cfg = {"kernel_version": 1,
           "klir_binary": {"binary": f"{klir_dir.rstrip('/')}/{name}.klir",
                           "input_names": [d["name"] for d in dims["inputs"]],
                           "output_names": [d["name"] for d in dims["outputs"]]},
           "func_name": name, "grid": [int(g) for g in grid],
           "has_collectives": bool(traced.kernel.attr("has_collectives", False))}
    json.dumps(cfg)
    return cfg


def kernel_of_its_api(kernel, announce: bool = True):
    """The kernel to inspect for a ``%%nki`` cell, of whichever API it is written in.

    A plain function using today's ``nki.isa`` / ``nki.language`` is wrapped as a current-API
    :class:`Kernel` (legacy kernels pass through unchanged); with ``announce`` the API seen is
    printed for current-API kernels.
    """
    if api_of(kernel) != "nki":
        return kernel
    if announce:
        print(f"NKI API: import nki (NKI 0.2+), kernel '{kernel_parts(kernel).func.__name__}'")
    return as_kernel(kernel)
