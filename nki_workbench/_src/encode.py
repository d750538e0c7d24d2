"""The framework-binding contract: a traced kernel packed into an XLA custom-call's backend_config.

``FrameworkKernel`` is what a host framework (JAX, PyTorch-XLA) drives: ``dump_config(*args)``
maps the framework's tensors to ``DeclTensor(shape, dtype)`` placeholders, traces the kernel
once per specialisation (cached per instance on the attribute
``__neuron_kernel_interface_kernel_cache__``), and returns a :class:`DumpedConfig` whose
``backend_config`` is ``base64(json.dumps(cfg))`` with exactly the keys of :data:`CONFIG_KEYS`.

The config is self-contained (its keys, building, encoding and decoding live in
:mod:`.backend_config`, re-exported here): :func:`decode_backend_config` reads it back (JSON only,
nothing is executed); ``execution.simulate_backend_config`` (one layer up: this module never
executes) rebuilds the kernel from ``serialize_ir_string`` alone and simulates it — the "compiler
backend re-reads the config" round trip.

Platform target: the ``platform_target`` option, else ``NEURON_PLATFORM_TARGET_OVERRIDE``, else
the EC2 instance type; on a miss it warns ``Unable to read MLA target. Assuming cross compile to
trn1.`` and marks the config ``platform_target_is_fallback=True`` (also part of the cache key).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from . import dtypes as D
from . import tree as T
from .alloc.passes import trace_kernel
from .backend_config import (
    CONFIG_KEYS,
    KERNEL_VERSION,
    CompileOpts,
    build_backend_config,
    decode_backend_config,
    encode_backend_config,
    matmul_mac_count,
    serialize_dims,
)
from .errors import NkiError
from .trace.kernel import TensorSpec, Traced

__all__ = ["KERNEL_VERSION", "CONFIG_KEYS", "PLATFORM_TARGETS", "FALLBACK_WARNING", "CompileOpts",
           "DeclTensor", "DumpedConfig", "FrameworkKernel", "UnifiedKernel",
           "LegacyFrameworkKernel", "matmul_mac_count", "serialize_dims", "build_backend_config",
           "encode_backend_config", "decode_backend_config", "resolve_platform_target",
           "hardware_target", "check_grid", "FRAMEWORK_CLASSES", "CACHE_SIZE"]


FALLBACK_WARNING = "Unable to read MLA target. Assuming cross compile to trn1."
PLATFORM_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"

# platform target -> NeuronCore generation whose facts the tracer/simulator use
PLATFORM_TARGETS = {"trn1": "trn1", "trn1n": "trn1", "inf2": "trn1", "trn2": "trn2",
                    "trn2n": "trn2", "trn3": "trn3"}
# a launch grid may span several physical cores (nl.nc) only where a logical core has several
_MULTI_CORE_TARGETS = ("trn2", "trn2n", "trn3")
# EC2 instance family (product name before the '.') -> platform target
_INSTANCE_FAMILIES = {"trn1": "trn1", "trn1n": "trn1", "inf2": "trn1", "trn2": "trn2",
                      "trn2u": "trn2", "trn2n": "trn2n", "trn3": "trn3"}

_CACHE_ATTR = "__neuron_kernel_interface_kernel_cache__"
CACHE_SIZE = 128
"""Specialisations kept per kernel instance (least recently used are dropped)."""


# ----------------------------------------------------------------------------- platform target
def _from_dmi() -> str | None:
    """Platform target from the EC2 instance type that Nitro exposes as the DMI product name."""
    try:
        with open("/sys/devices/virtual/dmi/id/product_name") as f:
            family = f.read().strip().lower().split(".")[0]
    except OSError:
        return None
    return _INSTANCE_FAMILIES.get(family)


_DETECTORS = [_from_dmi]
"""Probes of the machine's platform target, tried in order (tests replace them)."""


@functools.lru_cache(maxsize=1)
def _detected() -> str | None:
    for probe in _DETECTORS:
        found = probe()
        if found:
            return found
    return None


def _validate_platform(name, source: str) -> str:
    key = str(name).strip().lower()
    if key not in PLATFORM_TARGETS:
        raise ValueError(f"unknown platform target {name!r} ({source}); valid targets: "
                         f"{', '.join(PLATFORM_TARGETS)}")
    return key


def user_stacklevel() -> int:
    """``stacklevel`` for ``warnings.warn`` that points at the first frame outside the package."""
    from .errors import is_internal
    frame, level = sys._getframe(1), 1
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def resolve_platform_target(requested=None, *, warn: bool = True) -> tuple[str, bool]:
    """The platform target and whether it is the trn1 fallback.

    Args:
        requested: the ``platform_target`` option (``None`` = not given).
        warn: emit ``Unable to read MLA target. Assuming cross compile to trn1.`` on a miss
            (once per process: each kernel's Summary says it is on the fallback).

    Returns:
        ``(platform_target, platform_target_is_fallback)``.
    """
    if requested:
        return _validate_platform(requested, "platform_target="), False
    env = os.environ.get(PLATFORM_ENV)
    if env:
        return _validate_platform(env, PLATFORM_ENV), False
    found = _detected()
    if found:
        return found, False
    if warn:
        from .errors import warn_once_at_user
        warn_once_at_user(FALLBACK_WARNING, UserWarning)
    return "trn1", True


def hardware_target(platform_target: str) -> str:
    """The NeuronCore generation (``trn1``/``trn2``/``trn3``) a platform target runs on."""
    return PLATFORM_TARGETS[_validate_platform(platform_target, "platform_target")]


def check_grid(grid, platform_target: str) -> tuple:
    """Validate a launch grid for a target and return it as plain ints.

    A dimension built with ``nl.nc(n)`` spreads programs over physical cores, which only trn2,
    trn2n and trn3 have (``err_multi_cores_spmd_not_supported`` elsewhere).
    """
    grid = tuple(grid or ())
    for dim in grid:
        cores = 1
        for kind, n in getattr(dim, "parts", ()):
            cores *= n if kind == "nc" else 1
        if cores > 1 and platform_target not in _MULTI_CORE_TARGETS:
            raise NkiError("err_multi_cores_spmd_not_supported",
                           f"launch grid dimension {dim!r} spans {cores} physical NeuronCores, "
                           f"but platform target '{platform_target}' has one core per logical "
                           "core", hint="choose a trn2 (or trn3) target: "
                           "NEURON_PLATFORM_TARGET_OVERRIDE=trn2 in the environment, or "
                           "platform_target='trn2' on the kernel (nki.jit(..., "
                           "platform_target='trn2')); or drop nl.nc")
    try:
        out = tuple(int(g) for g in grid)
    except (TypeError, ValueError):
        raise NkiError(None, f"launch grid {grid!r} must be integers") from None
    if any(g <= 0 for g in out):
        raise NkiError(None, f"launch grid {list(out)} has a non-positive dimension")
    return out




# ----------------------------------------------------------------------------- FrameworkKernel
@dataclass(frozen=True)
class DeclTensor(TensorSpec):
    """A placeholder standing for a framework tensor while tracing: its shape and NKI dtype."""




@dataclass(frozen=True)
class DumpedConfig:
    """What ``FrameworkKernel.dump_config`` hands to a framework bridge.

    Attributes:
        backend_config: the base64 JSON string.
        input_names: kernel tensor parameters, in operand order.
        output_names: output tensors, in result order.
        operand_output_aliases: ``{operand index: output index}`` for outputs that are input
            buffers (mutable parameters, legacy output arguments).
        constant_values: ``(path, value)`` of compile-time constant arguments.
        return_types: one ``(shape, dtype)`` per output (framework types after
            ``translate_return_types``).
        has_collectives: whether the kernel communicates.
        kernel_return: whether the kernel returns its outputs (false: legacy convention).
        result_is_sequence: whether it returns a tuple/list.
        traced: the trace (IR, calling convention).
        config: the decoded config dict.
    """

    backend_config: str
    input_names: tuple
    output_names: tuple
    operand_output_aliases: dict
    constant_values: tuple
    return_types: tuple
    has_collectives: bool
    kernel_return: bool
    result_is_sequence: bool
    traced: Traced = dataclasses.field(repr=False, compare=False)
    config: dict = dataclasses.field(repr=False, compare=False)


def _neuron_dtype(dtype):
    try:
        return D.canonical(dtype)
    except TypeError as exc:
        raise NkiError(None, f"kernel tensor argument: {exc}",
                       hint="cast inputs to an NKI dtype, e.g. a.astype(np.float32)") from None


def freeze_argument(v):
    """A hashable stand-in of a mapped argument for the specialisation key."""
    if isinstance(v, TensorSpec):
        return ("tensor", tuple(v.shape), D.name_of(v.dtype))
    if T.is_container(v):
        return (type(v).__qualname__, tuple((k, freeze_argument(x)) for k, x in T.children(v)))
    try:
        hash(v)
    except TypeError:
        raise NkiError("err_nki_param_not_hashable",
                       f"kernel argument of type {type(v).__name__} is not a tensor and not "
                       "hashable, so it cannot specialise the trace",
                       hint="pass tensors as arrays, and constants as ints, floats, strings or "
                            "tuples") from None
    # why: 1, 1.0 and True hash alike but trace differently
    return ("const", type(v).__qualname__, v)


class FrameworkKernel:
    """Base of the framework bindings: trace once per specialisation, hand over a config.

    Subclasses implement the three hooks :meth:`is_framework_tensor`,
    :meth:`map_framework_tensor` and :meth:`translate_to_neuron_dtype`; numpy arrays and
    ``nt.tensor[...]`` placeholders are understood by every subclass.

    Args:
        func: the kernel's Python function.
        func_name: name recorded in the config (default ``func.__name__``).
        grid: SPMD launch grid.
        enable_cache: keep dumped configs per specialisation.
        **kwargs: compile options (``platform_target``, ``additional_compile_opt``, ...).
    """

    def __init__(self, func, func_name=None, grid=None, enable_cache=True, **kwargs):
        if not callable(func):
            raise TypeError(f"FrameworkKernel needs the kernel function, got {func!r}")
        self.func = func
        self.func_name = func_name or getattr(func, "__name__", "kernel")
        self.grid = tuple(grid or ())
        self.enable_cache = bool(enable_cache)
        self.opts = CompileOpts.from_kwargs(kwargs)
        self.platform_target = None
        self.platform_target_is_fallback = False
        setattr(self, _CACHE_ATTR, OrderedDict())

    # -- the three framework hooks
    def is_framework_tensor(self, t) -> bool:
        """Whether ``t`` is a tensor of this framework."""
        raise NotImplementedError(f"{type(self).__name__} must implement is_framework_tensor")

    def map_framework_tensor(self, t) -> tuple:
        """``(shape, framework dtype)`` of a framework tensor."""
        raise NotImplementedError(f"{type(self).__name__} must implement map_framework_tensor")

    def translate_to_neuron_dtype(self, dtype):
        """The NKI dtype of a framework dtype."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement translate_to_neuron_dtype")

    # -- the pipeline
    def _get_platform_target(self) -> tuple[str, bool]:
        return resolve_platform_target(self.opts.platform_target)

    def _is_tensor(self, v) -> bool:
        return isinstance(v, (TensorSpec, np.ndarray)) or self.is_framework_tensor(v)

    def _tensor_of(self, v) -> DeclTensor:
        if isinstance(v, DeclTensor):
            return v
        if isinstance(v, (TensorSpec, np.ndarray)):
            return DeclTensor(tuple(int(s) for s in v.shape), _neuron_dtype(v.dtype))
        shape, dtype = self.map_framework_tensor(v)
        return DeclTensor(tuple(int(s) for s in shape),
                          _neuron_dtype(self.translate_to_neuron_dtype(dtype)))

    def _map_value(self, v):
        """``v`` with every tensor replaced by a :class:`DeclTensor` (through containers)."""
        return T.map_leaves(self._tensor_of, v, self._is_tensor)

    def _map_args(self, boundargs: inspect.BoundArguments) -> inspect.BoundArguments:
        """A copy of the bound arguments with every tensor replaced by a :class:`DeclTensor`."""
        mapped = inspect.BoundArguments(boundargs.signature, OrderedDict(boundargs.arguments))
        for name, v in boundargs.arguments.items():
            mapped.arguments[name] = self._map_value(v)
        return mapped

    def _generate_hash_key(self, boundargs: inspect.BoundArguments) -> tuple:
        """Specialisation key of mapped arguments.

        Per argument its (shape, dtype) or hashable value, then the grid, the options and the
        platform target with ``platform_target_is_fallback``.
        """
        args = tuple((name, freeze_argument(v)) for name, v in boundargs.arguments.items())
        return (self.func_name, args, self.grid, self.opts, self.platform_target,
                self.platform_target_is_fallback)

    def dump_config(self, *args, **kwargs) -> DumpedConfig:
        """Trace (or reuse) the kernel for these arguments and return its config."""
        try:
            bound = inspect.signature(self.func).bind(*args, **kwargs)
        except TypeError as exc:
            raise NkiError(None, f"cannot call kernel '{self.func_name}': {exc}") from None
        bound.apply_defaults()
        return self.dump_config_with_boundargs(bound)

    def dump_config_with_boundargs(self, boundargs: inspect.BoundArguments) -> DumpedConfig:
        """:meth:`dump_config` for arguments already bound to the kernel's signature."""
        self.platform_target, self.platform_target_is_fallback = self._get_platform_target()
        grid = check_grid(self.grid, self.platform_target)
        mapped = self._map_args(boundargs)
        key = self._generate_hash_key(mapped)
        cache = getattr(self, _CACHE_ATTR)
        if self.enable_cache and key in cache:
            cache.move_to_end(key)
            return cache[key]
        traced = trace_kernel(self.func, mapped.args, mapped.kwargs, grid=grid,
                              target=hardware_target(self.platform_target))
        cfg = build_backend_config(traced, func_name=self.func_name, grid=grid,
                                   platform_target=self.platform_target,
                                   platform_target_is_fallback=self.platform_target_is_fallback,
                                   opts=self.opts)
        k = traced.kernel
        result = DumpedConfig(
            backend_config=encode_backend_config(cfg),
            input_names=tuple(d.name for d in k.params), output_names=tuple(k.outputs),
            operand_output_aliases=self.generate_operand_output_aliases(traced),
            constant_values=tuple(traced.constants),
            return_types=self.translate_return_types(traced),
            has_collectives=cfg["has_collectives"], kernel_return=cfg["kernel_return"],
            result_is_sequence=cfg["result_is_sequence"], traced=traced, config=cfg)
        if self.enable_cache:
            cache[key] = result
            while len(cache) > CACHE_SIZE:
                cache.popitem(last=False)
        return result

    def translate_return_types(self, traced: Traced) -> tuple:
        """``(shape, dtype)`` per output; bridges override this to build framework types."""
        k = traced.kernel
        decls = k.decls()
        return tuple((s, D.from_name(decls[n].dtype))
                     for n, s in zip(k.outputs, k.result_shapes(), strict=True))

    def generate_operand_output_aliases(self, traced: Traced) -> dict:
        """``{operand index: output index}`` for every output that is an input buffer."""
        index = {d.name: i for i, d in enumerate(traced.kernel.params)}
        return {index[name]: j for j, name in enumerate(traced.kernel.outputs) if name in index}


def _framework_dtype_name(dtype) -> str:
    # why: torch dtypes print as 'torch.float32'; jax/numpy dtypes are numpy dtypes already
    text = str(dtype)
    return text.split(".", 1)[1] if text.startswith("torch.") else text


FRAMEWORK_CLASSES: list = []
"""FrameworkKernel subclasses the bridges register; :class:`UnifiedKernel` consults them."""


class UnifiedKernel(FrameworkKernel):
    """A FrameworkKernel for any array: numpy, jax, torch (CPU) tensors and placeholders.

    Tensors of a registered bridge class (:data:`FRAMEWORK_CLASSES`) use that class's hooks;
    otherwise anything with ``shape``, ``dtype`` and ``__array__`` is a tensor. This is what
    :func:`nki_workbench.inspect` dumps configs with.
    """

    def _owner(self, t):
        for cls in FRAMEWORK_CLASSES:
            proto = cls.__new__(cls)
            try:
                if proto.is_framework_tensor(t):
                    return proto
            except NotImplementedError:
                continue
        return None

    def is_framework_tensor(self, t) -> bool:
        """Arrays of any framework (or anything with shape, dtype and ``__array__``)."""
        if self._owner(t) is not None:
            return True
        return (hasattr(t, "shape") and hasattr(t, "dtype") and hasattr(t, "__array__")
                and not isinstance(t, (np.generic, type)))

    def map_framework_tensor(self, t) -> tuple:
        """Shape and dtype (through the owning bridge's hooks where one is registered)."""
        owner = self._owner(t)
        if owner is not None:
            shape, dtype = owner.map_framework_tensor(t)
            return shape, owner.translate_to_neuron_dtype(dtype)
        return tuple(t.shape), t.dtype

    def translate_to_neuron_dtype(self, dtype):
        """numpy/jax dtypes as they are; torch dtypes by name (``torch.bfloat16``)."""
        return dtype if D.is_supported(dtype) else _framework_dtype_name(dtype)


class LegacyFrameworkKernel(UnifiedKernel):
    """The pre-2.21 convention: outputs are passed as arguments and written in place.

    Output arguments may be given as shape placeholders (anything with ``shape`` and ``dtype``,
    e.g. ``jax.ShapeDtypeStruct``); every output is aliased to its operand. A kernel that
    returns values is rejected: use :class:`UnifiedKernel` (or the bridges) for those.
    """

    @staticmethod
    def _is_legacy_tensor(v) -> bool:
        # why: legacy framework kernels take any array-like with shape and dtype (not numpy)
        return (not isinstance(v, (np.ndarray, TensorSpec, np.generic, type))
                and hasattr(v, "shape") and hasattr(v, "dtype") and not hasattr(v, "__array__"))

    def _is_tensor(self, v) -> bool:
        return self._is_legacy_tensor(v) or super()._is_tensor(v)

    def _tensor_of(self, v) -> DeclTensor:
        if self._is_legacy_tensor(v):
            return DeclTensor(tuple(int(s) for s in v.shape),
                              _neuron_dtype(self.translate_to_neuron_dtype(v.dtype)))
        return super()._tensor_of(v)

    def dump_config_with_boundargs(self, boundargs):
        """As the base, checking that the kernel writes its outputs into its arguments."""
        out = super().dump_config_with_boundargs(boundargs)
        if out.kernel_return:
            raise NkiError(None, f"kernel '{self.func_name}' returns its outputs; "
                           "LegacyFrameworkKernel takes kernels that write output arguments",
                           hint="use the kernel through nki.jit, or UnifiedKernel")
        return out
