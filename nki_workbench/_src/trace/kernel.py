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

import inspect
import math
import sys
import types
import weakref
from dataclasses import dataclass

import numpy as np

from .. import dtypes as D
from .. import tree as T
from ..errors import NkiError, is_internal, short_path
from ..hw import get_target
from ..ir import Kernel
from . import context as C
from .tensor import NkiTensor

__all__ = ["Traced", "trace_function", "flatten_args", "TensorSpec", "is_tensor_like",
           "TRACE_HOOKS", "definition_location", "spec_key", "constants_of",
           "specialisation_key"]

# callables run on every finished trace, after its passes (tests round-trip every kernel's IR
# text through them); ``alloc.passes.trace_kernel`` calls them
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


_SIGNATURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _signature(func) -> inspect.Signature:
    # why: inspect.signature is most of binding a steady call; a plain function's signature
    # changes only with its defaults (checked by identity) or __signature__ / __wrapped__
    if not isinstance(func, types.FunctionType) or hasattr(func, "__signature__") or \
            hasattr(func, "__wrapped__"):
        return inspect.signature(func)
    hit = _SIGNATURES.get(func)
    if hit is not None and hit[0] is func.__defaults__ and hit[1] is func.__kwdefaults__:
        return hit[2]
    sig = inspect.signature(func)
    _SIGNATURES[func] = (func.__defaults__, func.__kwdefaults__, sig)
    return sig


def flatten_args(func, args, kwargs, hook=None):
    """Bind ``args``/``kwargs`` to ``func``; returns ``(bound, leaves)``.

    ``leaves`` lists ``(path, value)`` for every tensor-like leaf in argument order; paths
    are parameter names extended with ``_key`` / ``_index`` / ``_field`` for nested values.
    """
    sig = _signature(func)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise NkiError(None, f"cannot call kernel '{func.__name__}': {exc}") from None
    bound.apply_defaults()

    def is_tensor(x):
        return is_tensor_like(x, hook)

    leaves = [(p, x) for name, v in bound.arguments.items()
              for p, x in T.leaves_with_paths(v, name, is_tensor) if is_tensor(x)]
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
    return T.map_leaves(lambda p, _: table[p], v, lambda x: is_tensor_like(x, hook), path)


def constants_of(bound, hook=None) -> tuple:
    """The compile-time constants of a bound call: ``(path, value)`` pairs (hashable values)."""
    out = []

    def walk(v, path):
        if is_tensor_like(v, hook):
            return
        # why: containers of tensors are structure; a container of constants is one constant,
        # except a plain (unhashable) @dataclass config, whose fields are (NKI 0.4 caches on them)
        if isinstance(v, dict) or (T.is_container(v) and (_has_tensor(v, hook)
                                                          or _config_object(v))):
            for k, x in T.children(v):
                walk(x, f"{path}_{k}")
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


def _config_object(v) -> bool:
    if isinstance(v, (dict, list, tuple)):
        return False
    try:
        hash(v)
    except TypeError:
        return True
    return False


def _has_tensor(v, hook):
    return T.any_leaf(lambda x: is_tensor_like(x, hook), v)


def _const_repr(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def specialisation_key(func, args=(), kwargs=None, *, grid=(), target=None, hook=None,
                       mapper=None, flat=None) -> tuple:
    """The one key a trace is cached under: what :func:`trace_function` would specialise on.

    Args:
        func: the kernel's Python function.
        args: positional arguments of the call.
        kwargs: keyword arguments of the call.
        grid: SPMD launch grid.
        target: platform target name (``None``: the default).
        hook: optional predicate recognising framework tensors.
        mapper: optional function mapping a framework tensor to ``(shape, dtype)``.
        flat: ``flatten_args(func, args, kwargs, hook)`` when the caller has it already.
    """
    bound, leaves = flat or flatten_args(func, args, kwargs or {}, hook)
    return spec_key(func, leaves, constants_of(bound, hook), tuple(int(g) for g in grid),
                    get_target(target).name, mapper)


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


def trace_function(func, args=(), kwargs=None, *, grid=(), target=None, hook=None,
                   mapper=None, begin=None, end=None) -> Traced:
    """Trace ``func(*args, **kwargs)`` into IR (no passes: see ``alloc.passes.trace_kernel``).

    Args:
        func: the kernel's Python function.
        args: positional arguments (arrays/placeholders for tensors, constants otherwise).
        kwargs: keyword arguments.
        grid: SPMD launch grid.
        target: ``"trn1"`` (default), ``"trn2"``...
        hook: optional predicate recognising framework tensors.
        mapper: optional function mapping a framework tensor to ``(shape, dtype)``.
        begin: optional ``begin(func, ctx)`` run before the body (a front end copies the
            kernel's decorator fields into ``ctx.attrs``).
        end: optional ``end(ctx) -> dict`` of kernel attributes added after the body.

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
    constants = constants_of(bound, hook)
    key = spec_key(func, leaves, constants, grid, target, mapper)
    unroll: frozenset = frozenset()
    for _ in range(_MAX_UNROLL_RETRACES):
        try:
            return _trace_once(func, bound, leaves, constants, key, grid, target, hook, mapper,
                               begin, end, unroll)
        except C.UnrollLoops as more:
            if more.keys <= unroll:
                raise RuntimeError(f"loops {sorted(more.keys)} asked to be unrolled twice "
                                   "while tracing") from None
            unroll = unroll | more.keys
    raise NkiError("err_dynamic_control_flow_not_supported",
                   f"kernel '{_kernel_name(func)}': Python conditions on loop variables needed "
                   f"more than {_MAX_UNROLL_RETRACES} loops unrolled",
                   definition_location(func), "use masks (mask=...) or nisa.affine_select")


_MAX_UNROLL_RETRACES = 64  # why: each retrace unrolls at least one more loop; real kernels need few


def _trace_once(func, bound, leaves, constants, key, grid, target, hook, mapper, begin, end,
                unroll):
    """One trace with the loops in ``unroll`` unrolled (raises ``UnrollLoops`` for more)."""
    name = _kernel_name(func)
    ctx = C.TraceContext(name, target, grid, getattr(func, "__code__", None), unroll)
    if begin is not None:
        begin(func, ctx)
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
    _check_param_annotations(func, annotations, table)
    call_args = {n: _rebuild(v, n, table, hook) for n, v in bound.arguments.items()}
    C.push(ctx)
    try:
        with _LocalAnnotations(func):
            result = func(*[call_args[n] for n in _positional(bound)],
                          **{n: call_args[n] for n in _keyword(bound)})
    except RecursionError as exc:
        # why: Python's own error names no kernel line and its traceback is thousands deep
        raise NkiError(None, f"kernel '{name}' recursed too deeply while being traced "
                       f"(Python's recursion limit, {sys.getrecursionlimit()})",
                       _kernel_line_of(exc), "NKI kernels trace once: unbounded recursion "
                       "never ends; use a loop (nl.affine_range / nl.static_range)") from None
    finally:
        C.pop(ctx)
        while ctx.loops:
            ctx.close_loop()
    returns, outputs, shapes = _outputs(ctx, result, params, table)
    body = ctx.finish_body()
    kattrs = {}
    if ctx.attrs.get("has_collectives"):
        kattrs["has_collectives"] = True
    if constants:
        kattrs["constants"] = tuple((p, _const_repr(v)) for p, v in constants)
    kattrs["returns"] = returns
    if any(s != ctx.decls[n].shape for n, s in zip(outputs, shapes, strict=True)):
        kattrs["output_shapes"] = tuple(shapes)  # a returned reshape view keeps its shape
    if end is not None:
        kattrs.update(end(ctx))
    kernel = Kernel(name, tuple(ctx.decls[p] for p in params), body, tuple(outputs),
                    grid, target, tuple(sorted(kattrs.items())))
    return Traced(kernel, tuple(p for p, _ in leaves), returns, constants, key)


def _annotation_error(what, declared, actual, loc):
    return NkiError("err_annotation_shape_mismatch",
                    f"{what} is annotated nt.tensor{list(declared)} but has shape "
                    f"{list(actual)}", loc, "fix the annotation or the shape")


def _check_param_annotations(func, annotations, table):
    """``def k(a: nt.tensor[128, 512])``: the argument's shape must be the annotated one."""
    for name, ann in annotations.items():
        shape = getattr(ann, "shape", None)
        t = table.get(name)
        if t is None or not hasattr(ann, "mutable") or not isinstance(shape, tuple) or not shape:
            continue
        if tuple(t.shape) != shape:
            raise _annotation_error(f"kernel parameter '{name}'", shape, t.shape,
                                    definition_location(func))


class _LocalAnnotations:
    """Checks ``x: nt.tensor[d0, d1] = value`` in the kernel body while it is traced.

    Python never evaluates a local variable's annotation, so a line tracer on the kernel's own
    frame (installed only when the source has such annotations) reads the variable right
    after its annotated line ran.
    """

    def __init__(self, func):
        from .source import annotated_locals
        self.code = getattr(func, "__code__", None)
        self.anns = annotated_locals(func) if self.code is not None else {}
        self.prev = None

    def __enter__(self):
        if self.anns:
            self.prev = sys.gettrace()
            sys.settrace(self._global)
        return self

    def __exit__(self, *exc):
        if self.anns:
            sys.settrace(self.prev)
        return False

    def _global(self, frame, event, arg):
        if frame.f_code is self.code:
            frame.f_trace_lines = True
            state = {"line": None}

            def local(frame, event, arg):
                if event in ("line", "return"):
                    self._check(frame, state["line"])
                    state["line"] = frame.f_lineno
                return local
            return local
        return None

    def _check(self, frame, line):
        ann = self.anns.get(line)
        if ann is None:
            return
        name, shape = ann
        value = frame.f_locals.get(name)
        actual = getattr(value, "shape", None)
        if actual is None or tuple(actual) == shape:
            return
        if _same_tile(tuple(actual), shape) and hasattr(value, "reshape"):
            # why: the SDK's own local_gather example annotates its [128, 64, 4] result as
            # tensor[128, 4, 16, 4] and NKI runs it; same partitions and elements = a reshape
            _rebind(frame, name, value.reshape(shape))
            return
        raise _annotation_error(f"'{name}'", shape, tuple(actual),
                                f"{short_path(frame.f_code.co_filename)}:{line}")


def _same_tile(actual: tuple, declared: tuple) -> bool:
    """Same partition size and element count: the annotation reshapes the free dims."""
    return (len(actual) > 1 and len(declared) > 1 and actual[0] == declared[0]
            and math.prod(actual) == math.prod(declared))


def _rebind(frame, name, value) -> None:
    """Set local ``name`` of the running ``frame`` (a line-trace callback's own frame)."""
    frame.f_locals[name] = value
    if sys.version_info < (3, 13):  # why: before PEP 667 f_locals is a snapshot
        import ctypes
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


def _kernel_line_of(exc) -> str | None:
    """``file:line`` of the innermost kernel (non-workbench) frame of ``exc``'s traceback."""
    where, tb = None, exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not is_internal(code.co_filename):
            where = f"{short_path(code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def definition_location(func) -> str | None:
    """``file:line`` of a kernel function's definition (``None`` for non-Python callables)."""
    code = getattr(func, "__code__", None)
    return f"{short_path(code.co_filename)}:{code.co_firstlineno}" if code is not None else None


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
        return "none", written_params, [ctx.decls[p].shape for p in written_params]
    if isinstance(result, NkiTensor):
        items, returns = [result], "single"
    elif isinstance(result, (tuple, list)):
        items, returns = list(result), ("tuple" if isinstance(result, tuple) else "list")
    else:
        raise NkiError(None, f"kernel '{ctx.name}' returned {type(result).__name__}; kernels "
                       "return HBM tensors (or a tuple of them)")
    outputs, shapes = [], []
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
        shapes.append(_returned_shape(ctx, t, name))
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
    return returns, outputs, shapes


def _returned_shape(ctx, t, root) -> tuple:
    """The shape the caller gets for returned tensor ``t`` (whose storage is ``root``).

    A whole-tensor reshape view (``out.reshape(...)``, also chained) keeps its shape, as NKI
    returns it; any other view kind is refused by name.
    """
    name = t._name
    while name != root:
        d = ctx.decls[name]
        if d.view != "reshape":
            raise NkiError("err_unsupported_memory",
                           f"kernel '{ctx.name}' returns '{name}', a {d.view} view of "
                           f"'{root}'", d.loc, f"return '{root}' (or a reshape of it)")
        name = d.base
    return tuple(int(s) for s in ctx.decls[t._name].shape)
