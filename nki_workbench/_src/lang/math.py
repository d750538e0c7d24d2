"""Element-wise ``nki.language`` functions.

Unary math, binary arithmetic, comparisons,
logic and bitwise ops, and ``where``. Each emits one IR instruction named after the function;
numerics live in the simulator's rule table.
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import NkiError, user_location
from ..trace import emit as M
from .common import broadcast, out_dtype, tiles_in

# name -> one-line meaning (the doc of the generated function)
UNARY = {
    "abs": "|x|", "negative": "-x", "sign": "sign of x (-1, 0 or 1)", "trunc": "x rounded toward 0",
    "floor": "largest integer <= x", "ceil": "smallest integer >= x", "exp": "e**x",
    "log": "natural logarithm", "cos": "cosine", "sin": "sine", "tan": "tangent",
    "tanh": "hyperbolic tangent", "arctan": "inverse tangent", "sqrt": "square root",
    "rsqrt": "1 / sqrt(x)", "reciprocal": "1 / x", "square": "x * x",
    "sigmoid": "1 / (1 + exp(-x))", "relu": "max(0, x)", "gelu": "x * Phi(x) (exact, erf-based)",
    "gelu_dx": "derivative of gelu", "gelu_apprx_tanh": "tanh approximation of gelu",
    "gelu_apprx_sigmoid": "x * sigmoid(1.702 x), the sigmoid approximation of gelu",
    "silu": "x * sigmoid(x)", "silu_dx": "derivative of silu", "erf": "error function",
    "erf_dx": "derivative of erf: 2/sqrt(pi) * exp(-x**2)", "softplus": "log(1 + exp(x))",
    "mish": "x * tanh(softplus(x))", "invert": "bitwise NOT (~x)",
}
BINARY = {
    "add": "x + y", "subtract": "x - y", "multiply": "x * y", "divide": "x / y (true division)",
    "power": "x ** y", "maximum": "element-wise max", "minimum": "element-wise min",
    "bitwise_and": "x & y", "bitwise_or": "x | y", "bitwise_xor": "x ^ y",
    "left_shift": "x << y", "right_shift": "x >> y (logical shift)",
}
COMPARE = {
    "equal": "x == y", "not_equal": "x != y", "greater": "x > y", "greater_equal": "x >= y",
    "less": "x < y", "less_equal": "x <= y", "logical_and": "x and y", "logical_or": "x or y",
    "logical_xor": "x xor y",
}
_INT_ONLY = {"invert", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"}


def elementwise(op: str, args, dtype, mask, kwargs=None, default=None):
    """Emit an element-wise instruction over tiles/scalars broadcast together."""
    api = f"nl.{op}"
    tiles = tiles_in(args)
    if not tiles:
        raise NkiError(None, f"{api} needs at least one tile operand, got only scalars",
                       user_location())
    for k, t in enumerate(tiles):
        M.require_tile(t, api, "xy"[k] if k < 2 else f"arg{k}")
    shape = broadcast(api, *[t.shape for t in tiles])
    dt = D.canonical(dtype) if dtype is not None else (default or out_dtype(None, *args))
    if op in _INT_ONLY and not all(D.is_int(M.dtype_of(a)) or D.is_bool(M.dtype_of(a))
                                   for a in args):
        raise NkiError(None, f"{api} is a bitwise op and takes integer operands, got "
                       f"{[D.name_of(M.dtype_of(a)) for a in args]}", user_location())
    return M.compute(op, list(args), shape, dt, mask=mask, api=api)


def _make_unary(name, meaning):
    def f(x, *, dtype=None, mask=None, **kwargs):
        return elementwise(name, [x], dtype, mask, kwargs)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = (f"Element-wise {meaning}.\n\n    Args:\n        x: input tile.\n        dtype: "
                 "output dtype (default: x's dtype).\n        mask: compile-time predicate "
                 "limiting computed elements.\n\n    Returns:\n        A new SBUF tile.\n    ")
    return f


def _make_binary(name, meaning, boolean=False):
    def f(x, y, *, dtype=None, mask=None, **kwargs):
        return elementwise(name, [x, y], dtype, mask, kwargs,
                           default=D.canonical("bool") if boolean else None)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = (f"Element-wise {meaning}, numpy broadcasting.\n\n    Args:\n        x: tile or "
                 "scalar.\n        y: tile or scalar.\n        dtype: output dtype (default: "
                 + ("bool" if boolean else "NKI type promotion of x and y") + ").\n        mask: "
                 "compile-time predicate.\n\n    Returns:\n        A new SBUF tile.\n    ")
    return f


for _n, _m in UNARY.items():
    globals()[_n] = _make_unary(_n, _m)
for _n, _m in BINARY.items():
    globals()[_n] = _make_binary(_n, _m)
for _n, _m in COMPARE.items():
    globals()[_n] = _make_binary(_n, _m, boolean=True)


def logical_not(x, *, dtype=bool, mask=None, **kwargs):
    """Element-wise logical NOT.

    Args:
        x: input tile.
        dtype: output dtype (default bool).
        mask: compile-time predicate.

    Returns:
        A new SBUF tile.
    """
    return elementwise("logical_not", [x], dtype, mask, kwargs)


def mod(x, y, dtype=None, mask=None, **kwargs):
    """Element-wise remainder with the sign of the divisor (``np.mod``).

    Args:
        x: tile or scalar.
        y: tile or scalar.
        dtype: output dtype.
        mask: compile-time predicate.

    Returns:
        A new SBUF tile.
    """
    return elementwise("mod", [x, y], dtype, mask, kwargs)


def fmod(x, y, dtype=None, mask=None, **kwargs):
    """Element-wise C-style remainder with the sign of the dividend (``np.fmod``).

    Args:
        x: tile or scalar.
        y: tile or scalar.
        dtype: output dtype.
        mask: compile-time predicate.

    Returns:
        A new SBUF tile.
    """
    return elementwise("fmod", [x, y], dtype, mask, kwargs)


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    """Select ``x`` where ``condition`` is true, else ``y`` (``y`` may be a scalar).

    Args:
        condition: boolean (or integer, non-zero = true) tile.
        x: tile or scalar.
        y: tile or scalar.
        dtype: output dtype (default: promotion of x and y).
        mask: compile-time predicate.

    Returns:
        A new SBUF tile.
    """
    dt = D.canonical(dtype) if dtype is not None else out_dtype(None, *[v for v in (x, y)])
    return elementwise("where", [condition, x, y], dt, mask, kwargs)


__all__ = sorted(list(UNARY) + list(BINARY) + list(COMPARE) +
                 ["logical_not", "mod", "fmod", "where", "elementwise"])
