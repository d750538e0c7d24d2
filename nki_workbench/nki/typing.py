"""``nki.typing`` (``nt``): tensor annotations and argument placeholders.

* ``nt.tensor[[8192, 4096], nl.bfloat16]`` — a placeholder argument standing for an input of
  that shape and dtype (tracing and benchmarking need no data).
* ``x: nt.tensor[128, 512] = ...`` — annotation of a shape (checked when used with
  ``.assert_shape``).
* ``nt.mutable_tensor`` (also ``nt.tensor[nt.mutable]``) — a parameter annotation allowing the
  kernel to update an input in place (it must then be returned).
"""

from __future__ import annotations

from .._src import dtypes as _D
from .._src.trace.kernel import TensorSpec

__all__ = ["tensor", "mutable_tensor", "mutable", "TensorSpec", "scalar"]


class _Mutable:
    """Marker for ``nt.tensor[nt.mutable]``."""

    def __repr__(self):
        return "nt.mutable"


mutable = _Mutable()


class _Annotation:
    def __init__(self, shape=None, dtype=None, mutable=False):
        self.shape, self.dtype, self.mutable = shape, dtype, mutable

    def __repr__(self):
        return f"nt.tensor[{self.shape}, {self.dtype}]" + (" (mutable)" if self.mutable else "")


class tensor:  # noqa: N801 - NKI's spelling
    """``nt.tensor[[shape], dtype]`` placeholder / ``nt.tensor[...]`` annotation."""

    mutable = False

    def __class_getitem__(cls, item):
        items = item if isinstance(item, tuple) else (item,)
        if any(i is mutable for i in items):
            return _Annotation(mutable=True)
        if len(items) == 2 and isinstance(items[0], (list, tuple)):
            shape, dtype = items
            return TensorSpec(tuple(int(s) for s in shape), _D.canonical(dtype))
        if all(isinstance(i, int) for i in items):
            return _Annotation(shape=tuple(items))
        raise TypeError(f"nt.tensor[{item!r}]: use nt.tensor[[d0, d1, ...], dtype] for a "
                        "placeholder or nt.tensor[d0, d1] as an annotation")


class mutable_tensor(tensor):  # noqa: N801
    """Parameter annotation: the kernel may update this input in place (and must return it)."""

    mutable = True


def scalar(x):
    """Mark a value as a run-time scalar (the do-while condition form of NKI 2.25).

    Dynamic while-loops are not traceable here; this raises a clear error.
    """
    from .._src.errors import NkiError, user_location
    raise NkiError("err_dynamic_control_flow_not_supported",
                   "run-time scalars (data-dependent while loops) are not supported by the "
                   "workbench tracer", user_location(),
                   "use nl.sequential_range with a static trip count and masks")
