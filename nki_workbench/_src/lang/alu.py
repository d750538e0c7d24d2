"""ALU operator names.

The ``op=`` arguments kernels pass (numpy ufuncs or ``nl`` functions)
mapped to one canonical name per operation (nki-api.md §4.1).
"""

from __future__ import annotations

import numpy as np

from ..errors import NkiError, user_location

__all__ = ["alu_name", "REDUCIBLE"]

# canonical name -> numpy callables that denote it (nl functions are added by name below)
_NUMPY = {
    "add": (np.add, np.sum), "subtract": (np.subtract,), "multiply": (np.multiply, np.prod),
    "divide": (np.divide, np.true_divide), "maximum": (np.maximum, np.max, np.amax),
    "minimum": (np.minimum, np.min, np.amin), "power": (np.power,),
    "bitwise_and": (np.bitwise_and,), "bitwise_or": (np.bitwise_or,),
    "bitwise_xor": (np.bitwise_xor,), "left_shift": (np.left_shift,),
    "right_shift": (np.right_shift,), "invert": (np.invert, np.bitwise_not),
    "equal": (np.equal,), "not_equal": (np.not_equal,), "greater": (np.greater,),
    "greater_equal": (np.greater_equal,), "less": (np.less,), "less_equal": (np.less_equal,),
    "logical_and": (np.logical_and,), "logical_or": (np.logical_or,),
    "logical_xor": (np.logical_xor,), "logical_not": (np.logical_not,), "abs": (np.abs,
                                                                                np.absolute),
    "reciprocal": (np.reciprocal,), "mod": (np.mod, np.remainder), "fmod": (np.fmod,),
}
# nl function names that denote an ALU op under another canonical name
_NL_ALIASES = {"max": "maximum", "min": "minimum", "sum": "add", "prod": "multiply"}
_BY_ID = {id(f): name for name, fs in _NUMPY.items() for f in fs}

REDUCIBLE = {"add", "subtract", "multiply", "maximum", "minimum", "bitwise_and", "bitwise_or",
             "bitwise_xor", "logical_and", "logical_or", "logical_xor"}


def alu_name(op, api: str = "op") -> str:
    """Canonical ALU name of ``op`` (``np.add``, ``nl.add``, ``np.amax``, ``'add'``...)."""
    if isinstance(op, str):
        name = _NL_ALIASES.get(op, op)
        if name in _NUMPY or name in ("rsqrt",):
            return name
    name = _BY_ID.get(id(op))
    if name is not None:
        return name
    mod = getattr(op, "__module__", "") or ""
    fname = getattr(op, "__name__", None)
    if fname and mod.startswith("nki_workbench"):
        name = _NL_ALIASES.get(fname, fname)
        if name in _NUMPY or name == "rsqrt":
            return name
    raise NkiError(None, f"{api}: unsupported ALU operator {op!r}", user_location(),
                   "use a numpy ufunc (np.add, np.maximum, ...) or the nl function")
