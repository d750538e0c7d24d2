"""Python operators of traced tensors, installed on :class:`NkiTensor` from the front end.

``tile + 1``, ``a < b``, ``t[i] = x`` and ``t[i] += x`` are ``nki.language`` operations, so the
trace layer's tensor class does not know them: :func:`install` puts them on the class (as
``jax.numpy`` installs array methods on tracers). ``nki_workbench._src.lang`` calls it on import.
"""

from __future__ import annotations

import numpy as np

from ..errors import NkiError, user_location
from ..trace import emit as M
from ..trace.tensor import NkiTensor
from . import math as _math
from . import memory as _memory

__all__ = ["install", "BINARY", "REFLECTED", "UNARY", "IN_PLACE"]

# operator -> nl function (the reflected form swaps the operands)
BINARY = {"__add__": "add", "__sub__": "subtract", "__mul__": "multiply",
          "__truediv__": "divide", "__pow__": "power", "__mod__": "mod",
          "__lshift__": "left_shift", "__rshift__": "right_shift", "__and__": "bitwise_and",
          "__or__": "bitwise_or", "__xor__": "bitwise_xor", "__lt__": "less",
          "__le__": "less_equal", "__gt__": "greater", "__ge__": "greater_equal",
          "__eq__": "equal", "__ne__": "not_equal"}
REFLECTED = {"__radd__": "add", "__rsub__": "subtract", "__rmul__": "multiply",
             "__rtruediv__": "divide", "__rpow__": "power", "__rand__": "bitwise_and",
             "__ror__": "bitwise_or"}
UNARY = {"__invert__": "invert", "__neg__": "negative", "__abs__": "abs"}
IN_PLACE = {"__iadd__": "add", "__isub__": "subtract", "__imul__": "multiply",
            "__itruediv__": "divide"}
_OPERAND = (NkiTensor, int, float, bool, np.generic)


def _binary(fn, reflected: bool):
    def op(self, other):
        if not isinstance(other, _OPERAND):
            return NotImplemented
        return fn(other, self) if reflected else fn(self, other)
    op.__name__ = fn.__name__
    return op


def _unary(fn):
    def op(self):
        return fn(self)
    op.__name__ = fn.__name__
    return op


def _setitem(self, key, value):
    # why: the reference count of `value` says whether it is an unnamed temporary that the
    # assignment may retarget; emit calibrates the threshold on this same call structure
    temp = M.refs(value) <= M.SET_TEMP_REFS
    M.assign(self[key], value, temp=temp, store=_memory.store)


def _in_place(opname):
    def op(self, value):
        temp = M.refs(value) <= M.IADD_TEMP_REFS  # why: same frame depth as the calibration
        view = self.inplace_view()
        if not isinstance(value, _OPERAND):
            raise NkiError(None, f"cannot apply '{opname}' in place with a "
                           f"{type(value).__name__}", user_location())
        M.assign(view, value, acc=opname, temp=temp, store=_memory.store)
        return view
    op.__name__ = f"i{opname}"
    return op


def _astype(self, dtype) -> NkiTensor:
    """A copy cast to ``dtype``."""
    return _memory.copy(self, dtype=dtype)


def _broadcast_to(self, shape) -> NkiTensor:
    """Broadcast (numpy rules) to ``shape``."""
    return _memory.broadcast_to(self, shape=shape)


def _pos(self):
    return self


def install(cls=NkiTensor) -> None:
    """Put the ``nl`` operators, assignment, ``astype`` and ``broadcast_to`` on ``cls``."""
    for name, op in BINARY.items():
        setattr(cls, name, _binary(getattr(_math, op), False))
    for name, op in REFLECTED.items():
        setattr(cls, name, _binary(getattr(_math, op), True))
    for name, op in UNARY.items():
        setattr(cls, name, _unary(getattr(_math, op)))
    for name, op in IN_PLACE.items():
        setattr(cls, name, _in_place(op))
    cls.__pos__ = _pos
    cls.__setitem__ = _setitem
    cls.astype = _astype
    cls.broadcast_to = _broadcast_to
    cls.__hash__ = object.__hash__  # why: __eq__ is element-wise; tensors stay dict keys
