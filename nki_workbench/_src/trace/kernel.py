"""Tracing a Python kernel function into a :class:`~nki_workbench._src.ir.Kernel`.

Steps:
  1. Bind the call's arguments to the function signature; tensor-like leaves (numpy arrays,
     ``nt.tensor[...]`` placeholders, framework tensors mapped by a hook) — also inside dicts,
     lists, tuples and dataclasses — become HBM parameters; everything else is a compile-time
     constant that must be hashable (``err_nki_param_not_hashable``).
  2. Run the function once inside a :class:`TraceContext` with symbolic tensors.
  3. Work out the calling convention: returned tensors (new convention) or written parameters
     (legacy), and check the output rules (``err_tensor_output_not_written_to``,
     ``err_cannot_update_immutable_parameter``, ``err_mutable_parameter_not_returned``).
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

import numpy as np

from .. import dtypes as D
from ..errors import NkiError, _short
from ..hw import get_target
from ..ir import Kernel
from ..ir.validate import validate, validate_traces_enabled
from . import context as C
from .tensor import NkiTensor

__all__ = ["Traced", "trace_kernel", "flatten_args", "TensorSpec", "is_tensor_like",
           "TRACE_HOOKS"]

# callables run on every finished trace (tests use it to round-trip every kernel's IR text)
TRACE_HOOKS: list = []


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype standing for a kernel input (what a placeholder or array contributes)."""

    shape: tuple
    dtype: object


def is_tensor_like(x, hook=None) -> bool:
    """Whether ``x`` is passed to the kernel as a tensor (array, placeholder, framework tensor)."""
    if hook is not None and hook(x):
        return True
    if isinstance(x, (np.ndarray, TensorSpec)):
        return True
    if isinstance(x, (np.generic, NkiTensor, type)):
        return False
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "__array__")


def _spec_of(x, mapper=None):
    if mapper is not None:
        out = mapper(x)
        if out is not None:
            return out
    if isinstance(x, TensorSpec):
        return x.shape, x.dtype
    to_spec = getattr(x, "_nki_spec", None)
    if to_spec is not None:
        return to_spec()
    return tuple(x.shape), x.dtype


def flatten_args(func, args, kwargs, hook=None):
    """Bind ``args``/``kwargs`` to ``func``; returns ``(bound, leaves)``.

    ``leaves`` lists ``(path, value)`` for every tensor-like leaf in argument order; paths
    are parameter names extended with ``_key`` / ``_index`` / ``_field`` for nested values.
    """
    sig = inspect.signature(func)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise NkiError(None, f"cannot call kernel '{func.__name__}': {exc}") from None
    bound.apply_defaults()
    leaves = []

    def walk(v, path):
        if is_tensor_like(v, hook):
            leaves.append((path, v))
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{path}_{k}")
        elif isinstance(v, (list, tuple)):
            for k, x in enumerate(v):
                walk(x, f"{path}_{k}")
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                walk(getattr(v, f.name), f"{path}_{f.name}")

    for name, v in bound.arguments.items():
        walk(v, name)
    return bound, leaves


@dataclass
class Traced:
    """A traced kernel plus what is needed to call it with concrete values.

    Attributes:
        kernel: the IR.
        leaf_paths: argument paths of the tensor parameters, in ``kernel.params`` order.
        returns: ``"none"`` (legacy, outputs are written parameters), ``"single"``, ``"tuple"``
            or ``"list"``.
        constants: ``(path, value)`` of the compile-time constant arguments.
        key: the specialisation key this trace is valid for.
    """

    kernel: Kernel
    leaf_paths: tuple
    returns: str
    constants: tuple
    key: tuple


def _rebuild(v, path, table, hook):
    if is_tensor_like(v, hook):
        return table[path]
    if isinstance(v, dict):
        return type(v)((k, _rebuild(x, f"{path}_{k}", table, hook)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        items = [_rebuild(x, f"{path}_{k}", table, hook) for k, x in enumerate(v)]
        return items if isinstance(v, list) else (type(v)(*items) if hasattr(v, "_fields")
                                                   else tuple(items))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        new = {f.name: _rebuild(getattr(v, f.name), f"{path}_{f.name}", table, hook)
               for f in dataclasses.fields(v) if f.init}
        return dataclasses.replace(v, **new)
    return v


def _constants(bound, hook):
    out = []

    def walk(v, path):
        if is_tensor_like(v, hook):
            return
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{path}_{k}")
            return
        if isinstance(v, (list, tuple)) and any(_has_tensor(x, hook) for x in v):
            for k, x in enumerate(v):
                walk(x, f"{path}_{k}")
            return
        if dataclasses.is_dataclass(v) and not isinstance(v, type) and _has_tensor(v, hook):
            for f in dataclasses.fields(v):
                walk(getattr(v, f.name), f"{path}_{f.name}")
            return
        try:
            hash(v)
        except TypeError:
            raise NkiError("err_nki_param_not_hashable",
                           f"kernel argument '{path}' of type {type(v).__name__} is not a tensor "
                           "and not hashable, so it cannot specialise the trace",
                           hint="pass tensors as arrays, and constants as ints, floats, strings "
                                "or tuples") from None
        out.append((path, v))

    for name, v in bound.arguments.items():
        walk(v, name)
    return tuple(out)


def _has_tensor(v, hook):
    if is_tensor_like(v, hook):
        return True
    if isinstance(v, dict):
        return any(_has_tensor(x, hook) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_has_tensor(x, hook) for x in v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return any(_has_tensor(getattr(v, f.name), hook) for f in dataclasses.fields(v))
    return False


def _const_repr(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def spec_key(func, leaves, constants, grid, target, mapper=None):
    """Specialisation key: function, tensor (path, shape, dtype), constants, grid, target."""
    tens = []
    for path, v in leaves:
        shape, dt = _spec_of(v, mapper)
        try:
            dtc = D.canonical(dt)
        except TypeError as exc:
            raise NkiError(None, f"kernel argument '{path}': {exc}",
                           hint="cast inputs to an NKI dtype, e.g. a.astype(np.float32)") from None
        tens.append((path, tuple(int(s) for s in shape), D.name_of(dtc)))
    return (getattr(func, "__qualname__", repr(func)), tuple(tens), constants, tuple(grid),
            target)


def trace_kernel(func, args=(), kwargs=None, *, grid=(), target=None, hook=None,
                 mapper=None) -> Traced:
    """Trace ``func(*args, **kwargs)`` into IR.

    Args:
        func: the kernel's Python function.
        args: positional arguments (arrays/placeholders for tensors, constants otherwise).
        kwargs: keyword arguments.
        grid: SPMD launch grid.
        target: ``"trn1"`` (default), ``"trn2"``...
        hook: optional predicate recognising framework tensors.
        mapper: optional function mapping a framework tensor to ``(shape, dtype)``.

    Returns:
        Traced
    """
    kwargs = kwargs or {}
    target = get_target(target).name
    grid = tuple(int(g) for g in grid)
    if any(g <= 0 for g in grid):
        raise NkiError(None, f"launch grid {list(grid)} has a non-positive dimension")
    if C.current() is not None:
        if grid:
            raise NkiError("err_nested_kernel_with_spmd_grid",
                           f"kernel '{func.__name__}' launched with a grid from inside another "
                           "kernel", hint="call the sub-kernel without a grid")
    bound, leaves = flatten_args(func, args, kwargs, hook)
    constants = _constants(bound, hook)
    key = spec_key(func, leaves, constants, grid, target, mapper)
    name = _kernel_name(func)
    ctx = C.TraceContext(name, target, grid, getattr(func, "__code__", None))
    from .. import alloc as A  # lazy: the memory model imports the tracer
    A.begin_trace(func, ctx)  # kernel decorator fields (ncc.force_auto_alloc...) -> ctx.attrs
    annotations = getattr(func, "__annotations__", {})
    mutable = {name for name, ann in annotations.items() if getattr(ann, "mutable", False)}
    table, params = {}, []
    for path, v in leaves:
        shape, dt = _spec_of(v, mapper)
        try:
            dtc = D.canonical(dt)
        except TypeError as exc:
            raise NkiError(None, f"kernel argument '{path}': {exc}",
                           hint="cast inputs to an NKI dtype, e.g. a.astype(np.float32)") from None
        decl = ctx.declare(tuple(shape), D.name_of(dtc), "hbm", kind="input", name=path,
                           emit=False, loc=None)
        params.append(decl.name)
        t = NkiTensor(ctx, decl.name, scope=())
        t._mutable = path.split("_")[0] in mutable or path in mutable
        table[path] = t
    call_args = {n: _rebuild(v, n, table, hook) for n, v in bound.arguments.items()}
    C.push(ctx)
    try:
        result = func(*[call_args[n] for n in _positional(bound)],
                      **{n: call_args[n] for n in _keyword(bound)})
    finally:
        C.pop(ctx)
        while ctx.loops:
            ctx.close_loop()
    returns, outputs = _outputs(ctx, result, params, table)
    body = ctx.finish_body()
    kattrs = {}
    if ctx.attrs.get("has_collectives"):
        kattrs["has_collectives"] = True
    if constants:
        kattrs["constants"] = tuple((p, _const_repr(v)) for p, v in constants)
    kattrs["returns"] = returns
    kattrs.update(A.kernel_attrs(ctx))  # compile_opts / allocator / directive_scopes, when set
    kernel = Kernel(name, tuple(ctx.decls[p] for p in params), body, tuple(outputs),
                    grid, target, tuple(sorted(kattrs.items())))
    A.allocate_pending_tensors(kernel, _def_loc(func))  # allocation rules and SBUF/PSUM fit
    traced = Traced(kernel, tuple(p for p, _ in leaves), returns, constants, key)
    if validate_traces_enabled():  # debug switch: NKI_WORKBENCH_VALIDATE_IR=1
        validate(kernel)
    for hook_fn in TRACE_HOOKS:
        hook_fn(traced)
    return traced


def _def_loc(func):
    code = getattr(func, "__code__", None)
    return f"{_short(code.co_filename)}:{code.co_firstlineno}" if code is not None else None


def _tile_as_output(ctx, t):
    """A returned top-level SBUF/PSUM tile becomes an HBM output written at the kernel's end.

    NKI's simulator returns such tiles (its own doc tests do it); on hardware an output must be
    in HBM, so the IR gets the store the compiler would add: an explicit, visible instruction.
    """
    from ..ir import Access, Alloc, Inst
    tile = ctx.decls[t._name]
    decl = ctx.declare(tile.shape, tile.dtype, "shared_hbm", name=f"{tile.name}_out",
                       emit=False, loc=tile.loc)
    ctx.blocks[0].insert(0, Alloc(decl))
    ctx.blocks[0].append(Inst("store", (Access(decl.name),), (Access(tile.name),),
                              (("dtype", tile.dtype),), None, tile.loc))
    ctx.note_write(decl.name, tile.loc)
    return NkiTensor(ctx, decl.name, scope=())


def _kernel_name(func) -> str:
    """The kernel's IR name: the function name as an identifier (``<lambda>`` -> ``lambda_``)."""
    import keyword
    import re
    name = re.sub(r"\W", "_", getattr(func, "__name__", "kernel")).strip("_") or "kernel"
    if name[0].isdigit() or keyword.iskeyword(name) or name == "lambda":
        name += "_"
    return name


def _positional(bound):
    return [n for n, p in bound.signature.parameters.items()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and n in bound.arguments] \
        + ([n for n, p in bound.signature.parameters.items() if p.kind == p.VAR_POSITIONAL])


def _keyword(bound):
    return [n for n, p in bound.signature.parameters.items()
            if p.kind == p.KEYWORD_ONLY and n in bound.arguments]


def _outputs(ctx, result, params, table):
    by_name = {t._name: t for t in table.values()}
    written_params = [p for p in params if p in ctx.writes]
    if result is None:
        if not written_params:
            raise NkiError("err_tensor_output_not_written_to",
                           f"kernel '{ctx.name}' returns nothing and writes none of its "
                           "parameters: it has no output",
                           hint="create outputs with nl.ndarray(..., buffer=nl.shared_hbm), "
                                "store into them and return them")
        for p in written_params:
            ctx.update_decl(p, kind="inout")
        return "none", written_params
    if isinstance(result, NkiTensor):
        items, returns = [result], "single"
    elif isinstance(result, (tuple, list)):
        items, returns = list(result), ("tuple" if isinstance(result, tuple) else "list")
    else:
        raise NkiError(None, f"kernel '{ctx.name}' returned {type(result).__name__}; kernels "
                       "return HBM tensors (or a tuple of them)")
    outputs = []
    for k, t in enumerate(items):
        if not isinstance(t, NkiTensor):
            raise NkiError(None, f"kernel '{ctx.name}' return value #{k} is "
                           f"{type(t).__name__}, not a tensor")
        if t._index is None and t.buffer in ("sbuf", "psum") and not t._scope:
            t = _tile_as_output(ctx, t)
        if t._index is not None or t.buffer in ("sbuf", "psum"):
            raise NkiError("err_unsupported_memory",
                           f"kernel '{ctx.name}' returns '{t._name}' from {t.buffer}"
                           + (" (a view)" if t._index is not None else "") +
                           "; return whole HBM tensors", ctx.decls[t._name].loc,
                           "nl.store the tile into an nl.ndarray(..., buffer=nl.shared_hbm)")
        name = ctx.root(t._name)
        if name not in ctx.writes:
            raise NkiError("err_tensor_output_not_written_to",
                           f"output tensor '{name}' is never written", ctx.decls[name].loc,
                           "store into it (check for loops that run zero times)")
        decl = ctx.decls[name]
        ctx.update_decl(name, kind="inout" if decl.kind == "input" else "output")
        outputs.append(name)
    for p in written_params:
        t = by_name[p]
        if p in outputs:
            continue
        if t._mutable:
            raise NkiError("err_mutable_parameter_not_returned",
                           f"mutable parameter '{p}' is modified but not returned",
                           ctx.writes[p], f"return {p} from the kernel")
        raise NkiError("err_cannot_update_immutable_parameter",
                       f"kernel parameter '{p}' is written but is not annotated mutable",
                       ctx.writes[p], "annotate it nt.mutable_tensor and return it, or write to "
                       "a new nl.ndarray(..., buffer=nl.shared_hbm) output")
    return returns, outputs
