"""``nki.jit``: the decorator that carries a kernel function, its launch grid, mode and options.

Calling a :class:`GenericKernel` picks the concrete kernel class with :func:`compute_mode`
(memoised per class and grid) and calls it:

=============  ===========================================================================
mode           class
=============  ===========================================================================
``jax``        ``JAXKernel`` (JAX bridge)
``torchxla``   ``PyTorchXLAKernel`` (PyTorch bridge)
``baremetal``  :class:`~.runtime.BaremetalKernel`
``benchmark``  :class:`~.runtime.BenchmarkKernel`
``simulation`` :class:`~.runtime.SimulateKernel`
``trace``      :class:`~.runtime.TraceKernel` (NKI 2.x: helper kernels other kernels call;
               inlined inside a trace, traced without running on its own)
``auto``       from the argument types: a jax array/tracer when JAX's backend is ``neuron``
               → ``JAXKernel``; a torch tensor → ``PyTorchXLAKernel``; else ``BaremetalKernel``
=============  ===========================================================================

Bridge slots: ``JAXKernel`` and ``PyTorchXLAKernel`` below are placeholders that name the
missing bridge when used. A bridge module (:data:`BRIDGE_MODULES`, imported lazily the first
time its mode is chosen) defines its ``FrameworkKernel`` subclass and calls
``register_mode("jax", TheJAXKernel)``, which replaces the slot in :data:`_native_mode_map`
and appends the class to ``encode.FRAMEWORK_CLASSES`` (``UnifiedKernel`` then asks the class's
hooks about tensors, calling them on an instance made without ``__init__``: the three hooks must
not depend on instance state). ``compute_mode`` returns whatever class the map holds.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass

from .encode import FRAMEWORK_CLASSES, FrameworkKernel, check_grid, hardware_target
from .errors import NkiError
from .runtime import (
    BaremetalKernel,
    BenchmarkKernel,
    NumpyKernel,
    ProfileKernel,
    SimulateKernel,
    TraceKernel,
    get_traced,
    run_traced,
)
from .trace import context as C
from .tree import leaves

__all__ = ["GenericKernel", "jit", "compute_mode", "MODES", "JAXKernel", "PyTorchXLAKernel",
           "register_mode", "BRIDGE_MODULES", "KernelParts", "kernel_parts", "kernel_launch",
           "bridge_module"]

MODES = ("auto", "jax", "torchxla", "baremetal", "benchmark", "simulation", "trace")

BRIDGE_MODULES = {"jax": "nki_workbench._src.bridges.jax",
                  "torchxla": "nki_workbench._src.bridges.torch"}
"""Module that registers each framework mode's class, imported on first use."""


class _BridgeSlot(FrameworkKernel):
    """A framework mode whose bridge module has not registered its class (yet)."""

    MODE = ""

    def __init__(self, func, *args, **kwargs):
        raise NkiError("wb_bridge_missing",
                       f"mode '{self.MODE}' needs the {self.MODE} bridge "
                       f"({BRIDGE_MODULES[self.MODE]}), which is not available in this build",
                       hint="call the kernel with numpy arrays, or use mode='simulation'")


class JAXKernel(_BridgeSlot):
    """Slot of the JAX bridge's ``FrameworkKernel`` (``mode="jax"``)."""

    MODE = "jax"


class PyTorchXLAKernel(_BridgeSlot):
    """Slot of the PyTorch bridge's ``FrameworkKernel`` (``mode="torchxla"``)."""

    MODE = "torchxla"


_native_mode_map = {"jax": JAXKernel, "torchxla": PyTorchXLAKernel,
                    "baremetal": BaremetalKernel, "benchmark": BenchmarkKernel,
                    "simulation": SimulateKernel}


def register_mode(mode: str, cls: type) -> None:
    """Install a bridge's kernel class for ``mode`` (``"jax"`` or ``"torchxla"``)."""
    if mode not in BRIDGE_MODULES:
        raise ValueError(f"only the framework modes {', '.join(BRIDGE_MODULES)} take a bridge "
                         f"class, not {mode!r}")
    if not (isinstance(cls, type) and issubclass(cls, FrameworkKernel)):
        raise TypeError(f"a bridge class must subclass FrameworkKernel, got {cls!r}")
    _native_mode_map[mode] = cls
    if cls not in FRAMEWORK_CLASSES:
        FRAMEWORK_CLASSES.append(cls)


def bridge_module(mode: str):
    """The bridge module of a framework mode, imported on first use (``None``: not built)."""
    name = BRIDGE_MODULES[mode]
    if importlib.util.find_spec(name.rsplit(".", 1)[0]) is None:
        return None
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None


def _mode_class(mode: str) -> type:
    cls = _native_mode_map[mode]
    if issubclass(cls, _BridgeSlot):
        bridge_module(mode)  # why: importing the bridge registers its class
        cls = _native_mode_map[mode]
    return cls


def _root_module(x) -> str:
    return type(x).__module__.split(".", 1)[0]


def _is_neuron_jax_array(x) -> bool:
    import jax  # lazily: only when a jax value is among the arguments
    if not isinstance(x, (jax.Array, jax.core.Tracer)):
        return False
    try:
        return jax.default_backend() == "neuron"
    except RuntimeError:  # no backend could be initialised
        return False


def _is_torch_tensor(x) -> bool:
    import torch  # lazily: only when a torch value is among the arguments
    return isinstance(x, torch.Tensor)


_AUTO_RULES = (("jax", _is_neuron_jax_array, "jax"), ("jaxlib", _is_neuron_jax_array, "jax"),
               ("torch", _is_torch_tensor, "torchxla"))


def compute_mode(args, kwargs, mode):
    """The kernel class for a call: ``mode`` through ``_native_mode_map``, or by argument type.

    Args:
        args: positional call arguments.
        kwargs: keyword call arguments.
        mode: ``"auto"`` or one of the keys of ``_native_mode_map``.

    Returns:
        The kernel class.

    Raises:
        ValueError: an unknown mode (``'<mode>' passed to nki.jit ...``).
    """
    if mode == "trace":
        return TraceKernel  # why: not a framework mode (outside NKI's _native_mode_map)
    if mode != "auto":
        if mode not in _native_mode_map:
            raise ValueError(f"'{mode}' passed to nki.jit is not a valid mode; choose one of "
                             f"{', '.join(MODES)}")
        return _mode_class(mode)
    for x in leaves((tuple(args), dict(kwargs))):
        root = _root_module(x)
        for module, test, chosen in _AUTO_RULES:
            if root == module and test(x):
                return _mode_class(chosen)
    return _native_mode_map["baremetal"]


def _off_neuron_policy(args, kwargs, cls):
    """The workbench's one policy for machines without Neuron hardware (outside compute_mode).

    ``compute_mode`` gives jax values to JAXKernel only on the "neuron" JAX platform, exactly
    as NKI does; elsewhere NKI would pick BaremetalKernel, which cannot take a jax array or
    tracer. Here a call with jax values then goes to JAXKernel, whose CPU/GPU lowering runs
    the kernel in the simulator inside the JAX program.
    """
    for x in leaves((tuple(args), dict(kwargs))):
        if _root_module(x) in ("jax", "jaxlib"):
            return _mode_class("jax")
    return cls


class GenericKernel:
    """A kernel function with its mode, launch grid and options (what ``@nki.jit`` returns).

    Attributes:
        func: the Python kernel function.
        mode: execution mode.
        grid: SPMD launch grid (``()`` = one program).
        kwargs: options (``platform_target``, ``additional_compile_opt``...), handed to the
            concrete kernel class.
    """

    # why: pytest would collect a kernel named test_* (it follows __wrapped__ to a function)
    __test__ = False

    def __init__(self, func, mode: str = "auto", grid=(), **kwargs):
        if mode != "auto" and mode not in _native_mode_map:
            compute_mode((), {}, mode)  # raises the unknown-mode error
        self.func = func
        self.mode = mode
        self.grid = tuple(grid)
        self.kwargs = kwargs
        self._cache: dict = {}      # traces of the simulate()/trace() helpers
        self._kernels: dict = {}    # (class, grid) -> concrete kernel, shared by k[...] copies
        self._last = None
        functools.update_wrapper(self, func)
        self.__test__ = False  # why: pytest must not collect a kernel named test_* as a test
        if mode in ("auto", "torchxla") and "torch" in sys.modules:
            # why: torch.compile cannot import the bridge lazily inside a traced function, so a
            # kernel's first call under compile would fail; the bridge is cheap to load now
            _mode_class("torchxla")

    @property
    def platform_target(self):
        """Target named by ``platform_target=`` or ``NEURON_PLATFORM_TARGET_OVERRIDE``."""
        return self.kwargs.get("platform_target") or os.environ.get(
            "NEURON_PLATFORM_TARGET_OVERRIDE") or None

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        k = GenericKernel(self.func, self.mode, grid, **self.kwargs)
        k._cache, k._kernels = self._cache, self._kernels
        return k

    @property
    def trace_cache(self) -> dict:
        """The traces of this kernel, by specialisation key (shared by ``k[grid]`` copies)."""
        return self._cache

    def trace(self, *args, **kwargs):
        """The traced kernel (:class:`~nki_workbench._src.trace.kernel.Traced`) for these args."""
        target = hardware_target(self.platform_target) if self.platform_target else None
        grid = check_grid(self.grid, self.platform_target or "trn1")
        return get_traced(self.func, args, kwargs, grid=grid, target=target, cache=self._cache)

    def simulate(self, *args, params=None, **kwargs):
        """Run in the CPU simulator and return the outputs as numpy arrays."""
        traced = self.trace(*args, **kwargs)
        return run_traced(traced, self.func, args, kwargs, params)

    def concrete(self, cls) -> object:
        """The memoised kernel of class ``cls`` for this grid."""
        key = (cls, self.grid)
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = cls(self.func, grid=self.grid, **self.kwargs)
            self._kernels[key] = kernel
        return kernel

    def __call__(self, *args, **kwargs):
        if C.current() is not None:
            if self.grid:
                raise NkiError("err_nested_kernel_with_spmd_grid",
                               f"kernel '{self.func.__name__}' launched with a grid from inside "
                               "another kernel", hint="call the sub-kernel without a grid")
            return self.func(*args, **kwargs)
        cls = compute_mode(args, kwargs, self.mode)
        if self.mode == "auto" and cls is _native_mode_map["baremetal"]:
            cls = _off_neuron_policy(args, kwargs, cls)
        kernel = self.concrete(cls)
        self._last = kernel
        return kernel(*args, **kwargs)

    @property
    def benchmark_result(self):
        """``benchmark_result`` of the last benchmark run (``mode="benchmark"``)."""
        result = getattr(self._last, "benchmark_result", None)
        if result is None:
            raise AttributeError("no benchmark result yet: call the kernel with "
                                 "mode='benchmark' first")
        return result

    def __repr__(self):
        grid = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"<nki.jit kernel {self.func.__name__}{grid} mode={self.mode}>"


def jit(func=None, mode: str = "auto", **kwargs):
    """Decorate an NKI kernel (bare ``@nki.jit``, ``@nki.jit(mode=...)`` or ``nki.jit(f, ...)``).

    Args:
        func: the kernel function.
        mode: ``"auto"``, ``"simulation"``, ``"baremetal"``, ``"benchmark"``, ``"jax"``,
            ``"torchxla"``, ``"trace"`` (NKI 2.x helper kernels: inlined when another kernel
            calls them; called alone they return the trace without running).
        **kwargs: options such as ``platform_target="trn2"``, ``additional_compile_opt``,
            ``kernel_return`` (accepted: the convention is read from what the kernel
            returns), ``experimental_flags`` (accepted and kept).

    Returns:
        GenericKernel (or a decorator when ``func`` is omitted).
    """
    if func is None:
        return lambda f: GenericKernel(_unwrap(f), mode, **kwargs)
    return GenericKernel(_unwrap(func), mode, **kwargs)


def _unwrap(f):
    return f.func if isinstance(f, GenericKernel) else f


def _numpy_kernel(cls, kernel, kwargs):
    if kernel is None:
        return lambda f: cls(_unwrap(f), getattr(f, "grid", ()), **kwargs)
    return cls(_unwrap(kernel), getattr(kernel, "grid", ()), **kwargs)


def baremetal(kernel=None, **kwargs):
    """Compile and run on a Neuron device (simulated without one): ``nki.baremetal``.

    Options: ``save_neff_name``, ``save_trace_name``, ``additional_compile_opt``,
    ``artifacts_dir``, ``platform_target``. Equivalent to ``nki.jit(mode="baremetal")``.
    """
    return _numpy_kernel(BaremetalKernel, kernel, kwargs)


def benchmark(kernel=None, **kwargs):
    """Latency percentiles (``benchmark_result.nc_latency``): ``nki.benchmark``.

    Options: ``warmup`` (10), ``iters`` (100), ``save_neff_name``, ``save_trace_name``,
    ``additional_compile_opt``, ``platform_target``.
    """
    return _numpy_kernel(BenchmarkKernel, kernel, kwargs)


def profile(func=None, **kwargs):
    """Profile into ``working_directory`` (absolute, required): ``nki.profile``.

    Options: ``save_neff_name`` (``file.neff``), ``save_trace_name`` (``profile.ntff``),
    ``overwrite`` (False), ``profile_nth`` (1), ``num_execs`` (1), ``additional_compile_opt``,
    ``platform_target``.
    """
    return _numpy_kernel(ProfileKernel, func, kwargs)


# ----------------------------------------------------------------------------- kernel-like values
@dataclass(frozen=True)
class KernelParts:
    """What a kernel-like value stands for.

    Attributes:
        func: the Python kernel function.
        grid: the launch grid (``()`` = one program).
        options: the options that specialise a trace (``platform_target``,
            ``additional_compile_opt``... as the kernel object holds them).
        platform_target: the target the kernel asks for (``None``: the default), including
            ``NEURON_PLATFORM_TARGET_OVERRIDE`` for ``nki.jit`` kernels.
        cache: the kernel object's trace cache (``None`` for a plain function).
    """

    func: object
    grid: tuple
    options: dict
    platform_target: str | None
    cache: dict | None


def kernel_parts(kernel) -> KernelParts:
    """Split any kernel-like value (``@nki.jit`` kernel, numpy-mode kernel or function).

    The one place that knows the kernel classes' fields; ``inspect``, ``simulate_kernel``,
    ``trace_kernel`` and ``simulate_ranks`` all use it.

    Raises:
        TypeError: ``kernel`` is not callable.
    """
    if isinstance(kernel, GenericKernel):
        return KernelParts(kernel.func, kernel.grid, dict(kernel.kwargs), kernel.platform_target,
                           kernel.trace_cache)
    if isinstance(kernel, NumpyKernel):
        opts = {n: kernel.options[n] for n in ("platform_target", "additional_compile_opt")
                if kernel.options.get(n)}
        return KernelParts(kernel.func, kernel.grid, opts, kernel.options["platform_target"],
                           kernel.trace_cache)
    if callable(kernel):
        return KernelParts(kernel, (), {}, None, None)
    raise TypeError(f"expected an NKI kernel (a function or @nki.jit kernel), got {kernel!r}")


def kernel_launch(kernel) -> tuple:
    """``(func, grid, hardware target or None, trace cache or None)`` for simulating ``kernel``.

    The grid is checked against the kernel's platform target (``wb_...`` errors).
    """
    p = kernel_parts(kernel)
    if p.cache is None:
        return p.func, (), None, None
    grid = check_grid(p.grid, p.platform_target or "trn1")
    target = hardware_target(p.platform_target) if p.platform_target else None
    return p.func, grid, target, p.cache
