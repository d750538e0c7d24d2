"""``nki.compiler`` (``ncc``): allocation control and kernel/loop directives.

``ncc.sbuf`` / ``ncc.psum`` give allocation buffers (``auto_alloc()`` is what ``nl.sbuf`` /
``nl.psum`` mean); the decorators and directives are recorded on the kernel/loop.
"""

from __future__ import annotations

import contextlib

from ..._src.lang.common import Buffer, psum as _psum, sbuf as _sbuf

__all__ = ["sbuf", "psum", "skip_middle_end_transformations", "enable_stack_allocator",
           "force_auto_alloc", "multi_buffer", "no_reorder", "allocation_scope"]


class _Allocator:
    """``ncc.sbuf`` / ``ncc.psum``: make allocation buffers for ``buffer=``."""

    def __init__(self, auto: Buffer):
        self._auto = auto

    def auto_alloc(self) -> Buffer:
        """Compiler-chosen placement (the same as ``nl.sbuf`` / ``nl.psum``)."""
        return self._auto

    def alloc(self, func) -> Buffer:
        """Direct allocation: ``func(idx, pdim_size, fdim_size)`` gives each block's address."""
        return Buffer(self._auto.name, ("alloc", getattr(func, "__qualname__", repr(func))))

    def mod_alloc(self, **kwargs) -> Buffer:
        """Modulo allocation (signature in nki-api.md §5.1)."""
        return Buffer(self._auto.name, ("mod_alloc",) + tuple(sorted(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items())))


sbuf = _Allocator(_sbuf)
psum = _Allocator(_psum)


def _kernel_flag(name):
    def deco(func=None, **opts):
        def apply(f):
            flags = dict(getattr(f, "_nkiw_flags", {}))
            flags[name] = opts or True
            try:
                f._nkiw_flags = flags
            except AttributeError:
                pass
            return f
        return apply if func is None else apply(func)
    deco.__name__ = name
    deco.__doc__ = f"Kernel decorator ``{name}`` (recorded on the kernel)."
    return deco


skip_middle_end_transformations = _kernel_flag("skip_middle_end_transformations")
enable_stack_allocator = _kernel_flag("enable_stack_allocator")
force_auto_alloc = _kernel_flag("force_auto_alloc")


class _Directive:
    def __init__(self, name, *args):
        self.name, self.args = name, args

    def to_attr(self):
        return (self.name,) + self.args

    def __repr__(self):
        return f"ncc.{self.name}({', '.join(map(repr, self.args))})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def multi_buffer(factor=2):
    """Loop directive: allocate ``factor`` buffers for tiles declared in the loop."""
    return _Directive("multi_buffer", int(factor))


def no_reorder():
    """Loop directive: keep the instructions in program order."""
    return _Directive("no_reorder")


@contextlib.contextmanager
def allocation_scope():
    """Allocation scope context (tensors inside share a lifetime)."""
    yield
