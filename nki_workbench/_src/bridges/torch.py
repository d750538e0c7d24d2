"""The PyTorch bridge: ``PyTorchXLAKernel`` (``nki.jit(mode="torchxla")``) and its custom op.

Calling an NKI kernel on torch tensors traces it through :class:`FrameworkKernel`
(``dump_config``) and then, by device:

* **CPU (and any non-XLA) tensors** call the ``torch.library`` op
  ``nki_workbench::kernel_call(str backend_config, Tensor[] inputs) -> Tensor[]``. It is a pure
  function of the base64 backend_config: its kernel rebuilds the IR from the config and runs it
  in the simulator; its fake implementation reads the output shapes from the config. It passes
  ``torch.library.opcheck`` and, because the call path is ``torch._dynamo.nonstrict_trace``-d,
  a kernel call inside ``torch.compile(fullgraph=True)`` is one node in the graph.
* **XLA tensors** (when ``torch_xla`` imports) become an XLA custom call with target
  ``AwsNeuronNkiKernel`` in the lazy graph (:func:`_xla_custom_call`; untested here).

Outputs that are input buffers (legacy output arguments, returned ``nt.mutable_tensor``
parameters) are written into the tensor that was passed (``copy_``), so in-place kernels mutate
their arguments in eager mode and under ``torch.compile`` alike.

:func:`build_hlo_module` writes the HLO module a torch-xla lowering hands to the Neuron compiler
(the text ``Inspection.custom_call("torchxla")`` shows), with the builder in ``hlo.py``.

Dtypes: :data:`TORCH_TO_NKI` maps torch dtypes to NKI dtypes; the environment variable
``NKI_WORKBENCH_TORCH_DTYPE_OVERRIDE`` (``"float64=float32,float8_e4m3fn=float8_e4m3"``) adds
or replaces entries, and values are then converted when they cross into the simulator.
``torch`` itself is imported only when a torch value is handled.

``torch.compile``: dynamo inlines ``nki.jit``'s dispatch and this class's trivial constructor,
gets a constant key for the kernel from :func:`_kernel_key` (``assume_constant_result``) and
puts one ``nonstrict_trace`` call in the graph, which AOT autograd traces into the op. The
bridge must be imported before the trace (``import nki_workbench.torch``, or one eager call).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import warnings

import ml_dtypes
import numpy as np

from .. import dtypes as D
from ..dispatch import jit, register_mode
from ..encode import FrameworkKernel, decode_backend_config
from ..errors import NkiError
from ..execution import simulate_backend_config
from ..trace.kernel import flatten_args
from .hlo import ArrayShape, HloBuilder, TupleShape

__all__ = ["PyTorchXLAKernel", "nki_jit", "TORCH_TO_NKI", "NKI_TO_TORCH", "DTYPE_OVERRIDE_ENV",
           "nki_dtype_to_xla_type_map", "build_xla_type", "build_hlo_module", "kernel_call_op",
           "translate_to_neuron_dtype", "CUSTOM_CALL_TARGET", "OP_NAME", "custom_call_text"]

CUSTOM_CALL_TARGET = "AwsNeuronNkiKernel"
OP_NAME = "nki_workbench::kernel_call"
OP_SCHEMA = "(str backend_config, Tensor[] inputs) -> Tensor[]"
DTYPE_OVERRIDE_ENV = "NKI_WORKBENCH_TORCH_DTYPE_OVERRIDE"
DEPRECATION_MESSAGE = ("torch_neuronx.nki_jit is deprecated; decorate the kernel with nki.jit "
                       "(it picks mode='torchxla' for torch tensors)")

# torch dtype name -> NKI dtype name; None: NKI has no such type (the reason is below)
TORCH_TO_NKI = {
    "float64": None, "float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
    "float8_e4m3fn": None, "float8_e5m2": "float8_e5m2",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": None,
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": None,
    "bool": "bool", "complex64": None, "complex128": None,
}
"""torch dtype name → NKI dtype name (``None``: no NKI equivalent; an error names why)."""

_NO_EQUIVALENT = {
    "float64": "NKI has no 64-bit types", "int64": "NKI has no 64-bit types",
    "uint64": "NKI has no 64-bit types", "complex64": "NKI has no complex types",
    "complex128": "NKI has no complex types",
    "float8_e4m3fn": "NKI's float8_e4m3 is the IEEE-style format (max 240, with infinities); "
                     "torch's float8_e4m3fn (max 448, no infinities) is not supported by "
                     "neuronxcc",
}

NKI_TO_TORCH = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32",
                "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
                "float16": "float16", "float32": "float32", "bfloat16": "bfloat16",
                "tfloat32": "float32", "float8_e4m3": "float8_e4m3fn",
                "float8_e5m2": "float8_e5m2"}
"""NKI output dtype → torch dtype of the returned tensor. tfloat32 values are float32 values;
float8_e4m3 values come back as float8_e4m3fn (every finite value is exact; ±inf, which e4m3fn
lacks, becomes NaN)."""

nki_dtype_to_xla_type_map = {"bool": "pred", "int8": "s8", "int16": "s16", "int32": "s32",
                             "uint8": "u8", "uint16": "u16", "uint32": "u32",
                             "float16": "f16", "float32": "f32", "bfloat16": "bf16",
                             "tfloat32": "f32", "float8_e4m3": "f8e4m3",
                             "float8_e5m2": "f8e5m2"}
"""NKI dtype name → XLA element type (tfloat32 travels in f32 containers)."""

# torch dtype name -> numpy dtype of its bytes, where tensor.numpy() cannot produce it
_NUMPY_VIEWS = {"bfloat16": (np.uint16, ml_dtypes.bfloat16),
                "float8_e5m2": (np.uint8, ml_dtypes.float8_e5m2),
                "float8_e4m3fn": (np.uint8, ml_dtypes.float8_e4m3fn)}


def _torch():
    import torch  # lazily: importing nki_workbench never imports torch
    return torch


def _torch_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ----------------------------------------------------------------------------- dtypes
@functools.lru_cache(maxsize=8)
def _parse_override(text: str) -> dict:
    table = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep or key not in TORCH_TO_NKI or not D.is_supported(value):
            raise NkiError("wb_bad_dtype_override",
                           f"{DTYPE_OVERRIDE_ENV} entry {item!r} must be 'torch_dtype=nki_dtype' "
                           f"with a torch dtype of {', '.join(TORCH_TO_NKI)} and an NKI dtype "
                           f"of {', '.join(D.DTYPE_NAMES)}",
                           hint=f"e.g. {DTYPE_OVERRIDE_ENV}=float64=float32,bool=uint8")
        table[key] = D.name_of(value)
    return table


def dtype_table() -> dict:
    """:data:`TORCH_TO_NKI` with the ``NKI_WORKBENCH_TORCH_DTYPE_OVERRIDE`` entries applied."""
    return {**TORCH_TO_NKI, **_parse_override(os.environ.get(DTYPE_OVERRIDE_ENV, ""))}


def translate_to_neuron_dtype(dtype) -> np.dtype:
    """The NKI dtype of a torch dtype (through the override table).

    Args:
        dtype: a ``torch.dtype`` (or its name, ``"bfloat16"``).

    Returns:
        The NKI dtype object (``nl.bfloat16`` for ``torch.bfloat16``).

    Raises:
        NkiError: ``wb_unsupported_dtype`` for torch dtypes NKI has no equivalent of.
    """
    name = _torch_name(dtype)
    nki = dtype_table().get(name)
    if nki is None:
        why = _NO_EQUIVALENT.get(name, "it is not an NKI dtype")
        raise NkiError("wb_unsupported_dtype",
                       f"torch.{name} tensors cannot be passed to an NKI kernel: {why}",
                       hint=f"convert with tensor.to(torch.float32) (or another NKI dtype), or map "
                            f"it with {DTYPE_OVERRIDE_ENV}={name}=<nki dtype>")
    return D.from_name(nki)


def torch_dtype_of(nki_dtype):
    """The torch dtype a result of NKI dtype ``nki_dtype`` is returned as."""
    return getattr(_torch(), NKI_TO_TORCH[D.name_of(nki_dtype)])


def build_xla_type(dtype, shape) -> ArrayShape:
    """The XLA shape of an NKI tensor (dtype + shape), through :data:`nki_dtype_to_xla_type_map`.

    Raises:
        NkiError: the dtype has no entry in the map (names it).
    """
    name = D.name_of(dtype)
    if name not in nki_dtype_to_xla_type_map:
        raise NkiError("wb_unsupported_dtype", f"NKI dtype {name} has no XLA element type in "
                       "nki_dtype_to_xla_type_map")
    return ArrayShape(nki_dtype_to_xla_type_map[name], tuple(int(s) for s in shape))


def to_numpy(t, nki_dtype) -> np.ndarray:
    """A fresh numpy array of NKI dtype ``nki_dtype`` holding the values of tensor ``t``."""
    t = t.detach().to("cpu").contiguous()
    name = _torch_name(t.dtype)
    if name in _NUMPY_VIEWS:
        bits, view = _NUMPY_VIEWS[name]
        arr = t.view(getattr(_torch(), np.dtype(bits).name)).numpy().view(view)
    else:
        arr = t.numpy()
    if arr.dtype == D.canonical(nki_dtype):  # (tfloat32, stored as float32, is always rounded)
        return arr.copy()
    if arr.dtype == ml_dtypes.float8_e4m3fn:  # why: dtypes.cast reads NKI types; f32 is exact
        arr = arr.astype(np.float32)
    return D.cast(arr, nki_dtype)


def to_torch(arr: np.ndarray, nki_dtype, device=None):
    """A torch tensor (on ``device``) of the values of simulator array ``arr``."""
    torch = _torch()
    name = NKI_TO_TORCH[D.name_of(nki_dtype)]
    arr = np.ascontiguousarray(arr)
    if name in _NUMPY_VIEWS:
        bits, view = _NUMPY_VIEWS[name]
        t = torch.from_numpy(arr.astype(view).view(bits)).view(getattr(torch, name))
    else:
        t = torch.from_numpy(arr.astype(D.storage_dtype(nki_dtype)))
    return t if device is None or t.device == torch.device(device) else t.to(device)


# ----------------------------------------------------------------------------- HLO text
def build_hlo_module(dumped, *, name: str | None = None, exclude=()):
    """The HLO module of one kernel call: parameters → ``custom-call`` → ROOT.

    Args:
        dumped: the kernel's :class:`~nki_workbench._src.encode.DumpedConfig`.
        name: module name (default ``nki_<kernel name>``).
        exclude: output names (or indices) left out of the ROOT (not materialised; an aliased
            one still updates its donated operand).

    Returns:
        :class:`~nki_workbench._src.bridges.hlo.HloModule`; ``.text`` is the HLO text.
    """
    k = dumped.traced.kernel
    decls = k.decls()
    b = HloBuilder(name or f"nki_{dumped.config['func_name']}")
    params = [b.parameter(build_xla_type(d.dtype, d.shape)) for d in k.params]
    outs = [build_xla_type(decls[n].dtype, s)
            for n, s in zip(k.outputs, k.result_shapes(), strict=True)]
    tupled = len(outs) > 1
    aliases = {((j,) if tupled else ()): (i, ())
               for i, j in dumped.operand_output_aliases.items()}
    cc = b.custom_call(CUSTOM_CALL_TARGET, params, TupleShape(tuple(outs)) if tupled else outs[0],
                       backend_config=dumped.backend_config, output_to_operand_aliasing=aliases,
                       name="custom-call")
    names = {n: j for j, n in enumerate(k.outputs)} | {j: j for j in range(len(outs))}
    unknown = [e for e in exclude if e not in names]
    if unknown:
        raise NkiError(None, f"cannot exclude {unknown!r}: kernel '{k.name}' has outputs "
                       f"{', '.join(k.outputs)} (indices 0..{len(outs) - 1})")
    dropped = {names[e] for e in exclude}
    kept = [j for j in range(len(outs)) if j not in dropped]
    if not kept:
        raise NkiError(None, f"every output of kernel '{k.name}' is excluded; an HLO module "
                       "needs a ROOT value")
    if not tupled:
        return b.build(cc)
    elems = [b.get_tuple_element(cc, j, name=f"out{j}") for j in kept]
    return b.build(elems[0] if len(elems) == 1 and dropped else b.tuple(elems, name="tuple"))


def custom_call_text(inspection) -> str:
    """``Inspection.custom_call("torchxla")``: the HLO module of the kernel's custom call."""
    return build_hlo_module(inspection.dumped).text


# ----------------------------------------------------------------------------- the custom op
@functools.lru_cache(maxsize=256)
def _signature(backend_config: str) -> tuple:
    """``(inputs, outputs)`` of a config as ``(name, shape, nki dtype name)`` triples."""
    dims = decode_backend_config(backend_config)["serialize_dims"]
    return tuple(tuple((d["name"], tuple(d["shape"]), d["dtype"]) for d in dims[key])
                 for key in ("inputs", "outputs"))


def _check_inputs(backend_config: str, inputs) -> tuple:
    ins, outs = _signature(backend_config)
    if len(inputs) != len(ins):
        raise NkiError(None, f"{OP_NAME}: the kernel takes {len(ins)} tensors "
                       f"({', '.join(n for n, _, _ in ins) or 'none'}), got {len(inputs)}")
    for (name, shape, dtype), t in zip(ins, inputs, strict=True):
        if tuple(t.shape) != shape:
            raise NkiError(None, f"{OP_NAME}: tensor '{name}' has shape {list(t.shape)}, the "
                           f"kernel was traced for {list(shape)}")
        got = D.name_of(translate_to_neuron_dtype(t.dtype))
        if got != dtype:
            raise NkiError(None, f"{OP_NAME}: tensor '{name}' is {t.dtype} ({got} in NKI), the "
                           f"kernel was traced for {dtype}")
    return ins, outs


def _run_kernel(backend_config: str, inputs: list) -> list:
    """The op's CPU kernel: rebuild the kernel from the config and simulate it."""
    ins, outs = _check_inputs(backend_config, inputs)
    arrays = [to_numpy(t, dt) for (_, _, dt), t in zip(ins, inputs, strict=True)]
    result = simulate_backend_config(backend_config, *arrays)
    if result is None:  # legacy kernel: the outputs were written into its parameter arrays
        by_name = {n: a for (n, _, _), a in zip(ins, arrays, strict=True)}
        result = [by_name[n] for n, _, _ in outs]
    elif not isinstance(result, (tuple, list)):
        result = [result]
    device = inputs[0].device if inputs else None
    return [to_torch(a, dt, device) for a, (_, _, dt) in zip(result, outs, strict=True)]


def _fake_kernel(backend_config: str, inputs: list) -> list:
    """Output shapes and dtypes from the config alone (no simulation)."""
    torch = _torch()
    _, outs = _check_inputs(backend_config, inputs)
    device = inputs[0].device if inputs else torch.device("cpu")
    return [torch.empty(shape, dtype=torch_dtype_of(dt), device=device)
            for _, shape, dt in outs]


_OPS: dict = {}


def kernel_call_op():
    """The ``nki_workbench::kernel_call`` op (defined on first use)."""
    if "op" not in _OPS:
        torch = _torch()

        @torch.library.custom_op(OP_NAME, mutates_args=(), schema=OP_SCHEMA)
        def kernel_call(backend_config, inputs):
            """Run the NKI kernel described by ``backend_config`` in the simulator."""
            return _run_kernel(backend_config, inputs)

        kernel_call.register_fake(_fake_kernel)
        _OPS["op"] = kernel_call
        _OPS["call"] = torch._dynamo.nonstrict_trace(_call_registered)
        torch._dynamo.assume_constant_result(_kernel_key)
    return _OPS["op"]


# ----------------------------------------------------------------------------- the kernel class
def _use_existing_target_or_retrieve_from_torch_neuronx(opts):
    """``opts`` with the platform target torch-neuronx reports, unless one was requested."""
    if opts.platform_target:
        return opts
    try:
        from torch_neuronx.utils import get_platform_target
    except ImportError:  # no torch-neuronx: the contract's resolution (env, DMI, fallback)
        return opts
    target = get_platform_target()
    return dataclasses.replace(opts, platform_target=target) if target else opts


def _is_xla(t) -> bool:
    return t.device.type == "xla"


def _xla_custom_call(dumped, tensors) -> list:
    """Emit the custom call into torch-xla's lazy graph.

    UNTESTED: torch-xla cannot be installed next to torch 2.13. torch-xla's helper has no
    aliasing parameter, so in-place outputs are copied back by the caller instead of aliased.
    """
    from torch_xla.experimental.stablehlo_custom_call import stablehlo_custom_call
    shapes = [list(shape) for shape, _ in dumped.return_types]
    dtypes = [dt for _, dt in dumped.return_types]
    tensors = [t.to(torch_dtype_of(translate_to_neuron_dtype(t.dtype))) for t in tensors]
    out = stablehlo_custom_call(tensors, CUSTOM_CALL_TARGET, shapes, dtypes,
                                backend_config=dumped.backend_config, api_version=1)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _call_kernel(kernel, args, kwargs, eager: bool = True):
    """Trace (cached), run through the op or the XLA custom call, write in-place outputs back.

    Returns the kernel's outputs in its convention. Eager calls return a written argument
    itself (``out is a``) and ``None`` for legacy kernels; compiled calls (``eager=False``)
    return fresh tensors holding the same values, and ``()`` for legacy kernels, because a
    ``nonstrict_trace``-d function can return neither inputs nor ``None``.
    """
    torch = _torch()
    dumped = kernel.dump_config(*args, **kwargs)
    _, leaves = flatten_args(kernel.func, args, kwargs, hook=kernel.is_framework_tensor)
    bad = [p for p, v in leaves if not isinstance(v, torch.Tensor)]
    if bad:
        raise NkiError(None, f"kernel '{kernel.func_name}' in mode 'torchxla' takes torch "
                       f"tensors; argument(s) {', '.join(bad)} are not",
                       hint="convert with torch.from_numpy, or call with numpy arrays in mode "
                            "'simulation'")
    tensors = [v for _, v in leaves]
    on_xla = {_is_xla(t) for t in tensors}
    if len(on_xla) > 1:
        raise NkiError(None, f"kernel '{kernel.func_name}' got tensors on an XLA device and "
                       "elsewhere", hint="move every tensor argument to the same device")
    if on_xla == {True}:
        outs = _xla_custom_call(dumped, tensors)
    else:
        outs = list(kernel_call_op()(dumped.backend_config, tensors))
    for i, j in dumped.operand_output_aliases.items():
        tensors[i].copy_(outs[j])  # in place: the caller's tensor is the output buffer
        if eager:
            outs[j] = tensors[i]
    returns = dumped.traced.returns
    if returns == "none":
        return None if eager else ()
    if returns == "single":
        return outs[0]
    return list(outs) if returns == "list" else tuple(outs)


class PyTorchXLAKernel(FrameworkKernel):
    """``FrameworkKernel`` for torch tensors (``nki.jit(mode="torchxla")``; auto for torch).

    On CPU tensors the call runs the simulator through the ``nki_workbench::kernel_call`` op;
    on XLA tensors it emits the ``AwsNeuronNkiKernel`` custom call. The platform target comes
    from torch-neuronx when it is installed (folded into ``opts``), else from the contract's
    resolution (``platform_target=``, ``NEURON_PLATFORM_TARGET_OVERRIDE``, instance type,
    trn1 fallback).

    Args:
        func: the kernel function.
        func_name: name recorded in the config.
        grid: SPMD launch grid.
        enable_cache: keep one config per specialisation.
        **kwargs: compile options (``platform_target``, ``additional_compile_opt``...).
    """

    def __init__(self, func, func_name=None, grid=None, enable_cache=True, **kwargs):
        # why: inside torch.compile, dynamo traces this constructor, so it only records its
        # arguments there; the set-up runs for real in _kernel_key (or on first eager use)
        self._spec = (func, func_name, tuple(grid or ()), bool(enable_cache),
                      tuple(sorted(kwargs.items())))
        if not _torch().compiler.is_compiling():
            self._setup()

    def _setup(self) -> None:
        func, func_name, grid, enable_cache, options = self._spec
        FrameworkKernel.__init__(self, func, func_name=func_name, grid=grid,
                                 enable_cache=enable_cache, **dict(options))
        self.opts = _use_existing_target_or_retrieve_from_torch_neuronx(self.opts)
        kernel_call_op()

    def __getattr__(self, name):
        # why: an instance dynamo rebuilt after a compiled call has only _spec; set up on use
        spec = self.__dict__.get("_spec")
        if spec is None or name.startswith("__") or "opts" in self.__dict__:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        self._setup()
        return getattr(self, name)

    def is_framework_tensor(self, t) -> bool:
        """Whether ``t`` is a ``torch.Tensor`` (without importing torch)."""
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(t, torch.Tensor)

    def map_framework_tensor(self, t) -> tuple:
        """``(shape, torch dtype)``."""
        return tuple(t.shape), t.dtype

    def translate_to_neuron_dtype(self, dtype):
        """The NKI dtype of a torch dtype (:func:`translate_to_neuron_dtype`)."""
        return translate_to_neuron_dtype(dtype)

    def translate_return_types(self, traced) -> tuple:
        """``(shape, torch dtype)`` per output."""
        k = traced.kernel
        decls = k.decls()
        return tuple((s, torch_dtype_of(decls[n].dtype))
                     for n, s in zip(k.outputs, k.result_shapes(), strict=True))

    def build_xla_type(self, dtype, shape) -> ArrayShape:
        """The XLA shape of an NKI dtype and shape (:func:`build_xla_type`)."""
        return build_xla_type(dtype, shape)

    def __call__(self, *args, **kwargs):
        if _torch().compiler.is_compiling():
            # one opaque node: dynamo does not trace the tracer, AOT autograd meets the op
            # (str(): the key as a plain constant; dynamo cannot guard on the marked result)
            out = _OPS["call"](str(_kernel_key(*self._spec)), args, kwargs)
            return None if isinstance(out, tuple) and not out else out
        return _call_kernel(self, args, kwargs)


_KERNELS: dict = {}  # key -> kernel set up for torch.compile calls (see _kernel_key)


def _kernel_key(func, func_name, grid, enable_cache, options) -> str:
    """A string naming a set-up kernel for these constructor arguments (run by dynamo for real).

    Marked ``assume_constant_result``: inside ``torch.compile`` dynamo calls it at trace time
    and keeps the string as a constant, which the ``nonstrict_trace``-d call then looks up.
    """
    spec = (func, func_name, grid, enable_cache, options)
    for key, kernel in _KERNELS.items():
        if kernel._spec == spec:
            return key
    key = f"{getattr(func, '__qualname__', 'kernel')}#{len(_KERNELS)}"
    _KERNELS[key] = PyTorchXLAKernel(func, func_name, grid, enable_cache, **dict(options))
    return key


def _call_registered(key: str, args, kwargs):
    return _call_kernel(_KERNELS[key], args, kwargs, eager=False)


def nki_jit(func=None, **kwargs):
    """Deprecated ``torch_neuronx.nki_jit``: ``nki.jit(mode="torchxla")`` with a warning.

    Args:
        func: the kernel (omit to use as ``@nki_jit(...)``).
        **kwargs: ``nki.jit`` options.
    """
    warnings.warn(DEPRECATION_MESSAGE, DeprecationWarning, stacklevel=2)
    return jit(func, mode="torchxla", **kwargs)


register_mode("torchxla", PyTorchXLAKernel)
if "torch" in sys.modules:  # why: torch.compile may build the first kernel; the op must exist
    kernel_call_op()
