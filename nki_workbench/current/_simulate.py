"""``nki.simulate`` and the new stack's ``backend_config`` for today's kernels.

``nki.simulate(kernel)(*arrays)`` runs a kernel on the workbench simulator with numpy arrays or
torch tensors and returns the outputs in the same kind (one array, or a tuple). On by default
(what AWS's simulator leaves to the hardware path): SBUF/PSUM capacity checks at trace time,
uninitialised-read warnings, out-of-bounds errors and ``affine_range`` race detection; the same
kernel then feeds ``nki_workbench.inspect`` for timelines, occupancy and the backend_config.
"""

from __future__ import annotations

import json

import numpy as np

from .._src import dtypes as D
from .._src.current.kernel import CurrentFunction, is_current
from .._src.dispatch import GenericKernel, kernel_parts
from .._src.encode import check_grid, hardware_target, serialize_dims
from .._src.options import SimParams
from .._src.runtime import get_traced
from .._src.runtime import simulate as _simulate
from ._kernel import Kernel

__all__ = ["simulate", "api_of", "backend_config"]


def _as_kernel(kernel):
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, GenericKernel):
        return Kernel(kernel.func, kernel.grid, **kernel.kwargs)
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
    k = _as_kernel(kernel)

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
    g = getattr(func, "__globals__", {})
    names = set(getattr(getattr(func, "__code__", None), "co_names", ()))
    for n in names:
        mod = getattr(g.get(n), "__name__", "") or ""
        if mod.startswith("nki_workbench.current") or mod == "nki" or mod.startswith("nki."):
            return "nki"
    return "legacy"


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
    k = _as_kernel(kernel)
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
