"""Kernel decorators and loop directives of ``nki.compiler``, and how they reach the IR.

Decorators never mutate their argument: like NKI's ``copy_kernel`` + ``replace_fields``, they
return a *new* kernel (a copy of the Python function, re-wrapped in a new ``GenericKernel`` when
given one) whose function carries the fields in the attribute ``_nki_kernel_fields``::

    {"compile_opts": (("force_auto_alloc", True), ...),   # update_compile_opts
     "allocator": (("kind", "stack"), ("log_level", 50))}  # update_allocator

The hook that carries them into the trace: ``alloc.passes.trace_kernel`` passes
:func:`begin_trace` to the tracer (copies the fields into ``ctx.attrs`` so ``nl.ndarray`` sees
``force_auto_alloc``) and adds :func:`kernel_attrs` to the kernel attributes, so the IR prints
``compile_opts=...``, ``allocator=...`` and ``directive_scopes=...`` when they are set. Read them
back from a kernel object or function with :func:`kernel_fields`.

Directives (``multi_buffer``, ``no_reorder``, ``allocation_scope``) are recorded on loops when
passed as ``directives=``; used as context managers they record, in the kernel attribute
``directive_scopes``, the tensors and loops created inside the ``with`` block.
"""

from __future__ import annotations

import copy
import types

from ..errors import NkiError, user_location
from ..trace import context as C

__all__ = ["FIELDS_ATTR", "kernel_fields", "copy_kernel", "replace_fields", "update_compile_opts",
           "update_allocator", "skip_middle_end_transformations", "enable_stack_allocator",
           "force_auto_alloc", "Directive", "multi_buffer", "no_reorder", "allocation_scope",
           "begin_trace", "kernel_attrs", "check_kernel_fields"]

FIELDS_ATTR = "_nki_kernel_fields"
_EMPTY = {"compile_opts": (), "allocator": ()}


def _func_of(kernel):
    func = getattr(kernel, "func", None)
    return func if callable(func) and not isinstance(kernel, types.FunctionType) else kernel


def kernel_fields(kernel) -> dict:
    """The decorator fields of a kernel (``GenericKernel`` or function).

    Args:
        kernel: an ``@nki.jit`` kernel or a plain kernel function.

    Returns:
        dict: ``{"compile_opts": pairs, "allocator": pairs}`` (empty tuples when unset).
    """
    return dict(getattr(_func_of(kernel), FIELDS_ATTR, _EMPTY))


def _copy_function(f):
    # why: a new function object sharing code/globals/closure lets the copy carry other fields
    # while the original stays untouched (decorators must be immutable re-wrappings)
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = copy.copy(f.__kwdefaults__)
    g.__dict__.update(f.__dict__)
    for attr in ("__qualname__", "__module__", "__doc__", "__annotations__"):
        setattr(g, attr, getattr(f, attr))
    return g


def copy_kernel(kernel):
    """A copy of ``kernel`` with its own function object (and its own trace cache).

    Args:
        kernel: a ``GenericKernel`` (or subclass) or a plain function.

    Returns:
        The same kind of object, independent of the original.
    """
    func = _func_of(kernel)
    if not isinstance(func, types.FunctionType):
        raise TypeError(f"expected an NKI kernel (function or @nki.jit kernel), got {kernel!r}")
    new_func = _copy_function(func)
    if func is kernel:
        return new_func
    try:
        new = type(kernel)(new_func, kernel.mode, kernel.grid, **dict(kernel.kwargs))
    except (TypeError, AttributeError):
        new = copy.copy(kernel)
        new.func = new_func
        new._cache = {}
    new.__wrapped__ = new_func
    return new


def replace_fields(kernel, **fields):
    """A copy of ``kernel`` with kernel fields (``compile_opts``, ``allocator``) replaced.

    Args:
        kernel: a ``GenericKernel`` or function.
        **fields: new field values (tuples of ``(name, literal)`` pairs).

    Returns:
        The re-wrapped copy.
    """
    unknown = set(fields) - set(_EMPTY)
    if unknown:
        raise TypeError(f"unknown kernel fields {sorted(unknown)}; known: {sorted(_EMPTY)}")
    new = copy_kernel(kernel)
    merged = kernel_fields(kernel)
    merged.update({k: tuple(sorted(v)) for k, v in fields.items()})
    setattr(_func_of(new), FIELDS_ATTR, merged)
    if new is not _func_of(new):
        setattr(new, FIELDS_ATTR, merged)  # why: GenericKernel mirrors its function's __dict__
    return new


def update_compile_opts(kernel, **opts):
    """A copy of ``kernel`` whose compile options include ``opts``."""
    merged = dict(kernel_fields(kernel)["compile_opts"])
    merged.update(opts)
    return replace_fields(kernel, compile_opts=tuple(merged.items()))


def update_allocator(kernel, kind: str, **options):
    """A copy of ``kernel`` using allocator ``kind`` (``"stack"``) with ``options``."""
    return replace_fields(kernel, allocator=tuple({"kind": kind, **options}.items()))


def _decorator(apply, name: str, doc: str):
    def deco(func=None, **kwargs):
        if func is None:
            return lambda f: apply(f, **kwargs)
        return apply(func, **kwargs)
    deco.__name__ = deco.__qualname__ = name
    deco.__doc__ = doc
    return deco


skip_middle_end_transformations = _decorator(
    lambda f: update_compile_opts(f, skip_middle_end_transformations=True),
    "skip_middle_end_transformations",
    """Kernel decorator: skip the compiler's middle-end transformations.

    Usable bare (``@ncc.skip_middle_end_transformations``), with parentheses, or as a function
    ``ncc.skip_middle_end_transformations(kernel)``; returns a new kernel.
    """)

enable_stack_allocator = _decorator(
    lambda f, log_level=50: update_allocator(f, "stack", log_level=int(log_level)),
    "enable_stack_allocator",
    """Kernel decorator: allocate SBUF/PSUM with the stack allocator (scoped bump allocation).

    Must be combined with ``skip_middle_end_transformations`` (checked when the kernel is
    traced). ``log_level`` is recorded. Returns a new kernel.
    """)

force_auto_alloc = _decorator(
    lambda f: update_compile_opts(f, force_auto_alloc=True),
    "force_auto_alloc",
    """Kernel decorator: ignore direct allocations; every tensor is auto-allocated.

    Returns a new kernel.
    """)


# ----------------------------------------------------------------------------- directives
class Directive:
    """A loop directive; pass as ``directives=`` to a range or use as a context manager.

    Attributes:
        name: ``"multi_buffer"``, ``"no_reorder"`` or ``"allocation_scope"``.
        args: literal arguments (``(factor,)`` for multi_buffer).
    """

    def __init__(self, name: str, *args):
        self.name, self.args = name, args
        self._entered: list = []

    def to_attr(self) -> tuple:
        """The IR literal: ``(name, *args)``."""
        return (self.name,) + self.args

    def __repr__(self):
        return f"ncc.{self.name}({', '.join(map(repr, self.args))})"

    def __eq__(self, other):
        return isinstance(other, Directive) and self.to_attr() == other.to_attr()

    def __hash__(self):
        return hash(self.to_attr())

    def __enter__(self):
        ctx = C.require(f"ncc.{self.name}")
        self._entered.append((ctx, set(ctx.names)))
        return self

    def __exit__(self, *exc):
        ctx, before = self._entered.pop()
        new = ctx.names - before
        tensors = tuple(sorted(n for n in new if n in ctx.decls))
        loops = tuple(sorted(n for n in new if n in ctx.var_ranges))
        ctx.attrs.setdefault("directive_scopes", []).append((self.to_attr(), tensors, loops))
        return False


def multi_buffer(factor=2) -> Directive:
    """Directive: keep ``factor`` copies of the tiles allocated in the loop body.

    Args:
        factor: number of buffers (>= 1).

    Returns:
        Directive
    """
    try:
        f = int(factor)
    except (TypeError, ValueError):
        f = 0
    if f < 1 or f != factor:
        raise NkiError("wb_bad_directive", f"ncc.multi_buffer factor must be a positive int, got "
                       f"{factor!r}", user_location())
    return Directive("multi_buffer", f)


def no_reorder() -> Directive:
    """Directive: keep the loop's instructions in program order.

    Returns:
        Directive
    """
    return Directive("no_reorder")


def allocation_scope() -> Directive:
    """Directive/context: tensors created inside share one allocation scope.

    Returns:
        Directive
    """
    return Directive("allocation_scope")


# ----------------------------------------------------------------------------- trace hooks
def begin_trace(func, ctx):
    """Copy the kernel's decorator fields into the trace context (before the body runs)."""
    fields = kernel_fields(func)
    for key in ("compile_opts", "allocator"):
        if fields.get(key):
            ctx.attrs[key] = tuple(fields[key])


def kernel_attrs(ctx) -> dict:
    """The kernel attributes this module records (only those that are set)."""
    out = {k: ctx.attrs[k] for k in ("compile_opts", "allocator") if ctx.attrs.get(k)}
    scopes = ctx.attrs.get("directive_scopes")
    if scopes:
        out["directive_scopes"] = tuple(scopes)
    return out


def check_kernel_fields(kernel, loc=None):
    """Rules between decorators: the stack allocator needs skip_middle_end_transformations."""
    opts = dict(kernel.attr("compile_opts", ()))
    alloc = dict(kernel.attr("allocator", ()))
    if alloc.get("kind") == "stack" and not opts.get("skip_middle_end_transformations"):
        raise NkiError("wb_stack_allocator_requires_skip_middle_end",
                       f"kernel '{kernel.name}' enables the stack allocator without "
                       "skip_middle_end_transformations", loc,
                       "decorate with @ncc.enable_stack_allocator and "
                       "@ncc.skip_middle_end_transformations together")
