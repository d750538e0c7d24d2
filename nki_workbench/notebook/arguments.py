"""Argument parsing shared by the ``%%nki`` magic, the explorer and the CLI.

* ``parse_shapes("a=128x512:bf16, b=512")`` → ``{"a": TensorSpec((128, 512), bfloat16), ...}``
  (dtype defaults to float32).
* ``parse_grid("2,2")`` → ``(2, 2)``.
* ``parse_params("TILE_N=128,256,512")`` → ``("TILE_N", [128, 256, 512])``.
* ``random_inputs(specs, seed)`` → seeded arrays for placeholders (the CLI's ``--random``).
* ``bind_arguments(func, positional, named)`` → positional args in signature order.
"""

from __future__ import annotations

import ast
import inspect as _pyinspect
import re

import numpy as np

from .._src import dtypes as D
from .._src.trace.kernel import TensorSpec

__all__ = ["ArgError", "parse_shapes", "parse_grid", "parse_params", "random_inputs",
           "bind_arguments", "kernel_function", "DTYPE_SHORTHANDS", "parse_dtype"]

DTYPE_SHORTHANDS = {
    "f32": "float32", "fp32": "float32", "f16": "float16", "fp16": "float16",
    "bf16": "bfloat16", "tf32": "tfloat32", "f8e4m3": "float8_e4m3", "fp8e4m3": "float8_e4m3",
    "fp8_e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2", "fp8e5m2": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2", "i8": "int8", "i16": "int16", "i32": "int32", "u8": "uint8",
    "u16": "uint16", "u32": "uint32",
}
"""Short dtype spellings ``--shapes`` accepts (``a=128x512:f32``), besides the NKI names."""

_SHAPE_RE = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*([0-9]+(?:\s*[x×]\s*[0-9]+)*)"
                       r"\s*(?::\s*(\w+))?\s*$")


class ArgError(ValueError):
    """A malformed option value (the message names the bad part)."""


def parse_shapes(text: str) -> dict:
    """Placeholder tensors from ``"a=128x512:bf16, b=512:float32"``.

    Args:
        text: comma-separated ``NAME=D0xD1x...[:DTYPE]`` items; DTYPE is an NKI dtype name or
            alias (``bf16``, ``fp32``, ``float8_e4m3``...), default ``float32``.

    Returns:
        ``{name: TensorSpec}`` in the order given.
    """
    out = {}
    for item in (p for p in text.split(",") if p.strip()):
        m = _SHAPE_RE.match(item)
        if m is None:
            raise ArgError(f"bad shape {item.strip()!r}: expected NAME=D0xD1[:DTYPE], e.g. "
                           "a=128x512:bf16")
        name, dims, dtype = m.group(1), m.group(2), m.group(3) or "float32"
        shape = tuple(int(d) for d in re.split(r"\s*[x×]\s*", dims))
        if any(d <= 0 for d in shape):
            raise ArgError(f"bad shape {item.strip()!r}: dimensions must be positive")
        try:
            dt = parse_dtype(dtype)
        except ArgError as exc:
            raise ArgError(f"bad shape {item.strip()!r}: {exc}") from None
        if name in out:
            raise ArgError(f"'{name}' is given twice in the shapes")
        out[name] = TensorSpec(shape, dt)
    if not out:
        raise ArgError("no shapes given: expected NAME=D0xD1[:DTYPE], ...")
    return out


def parse_dtype(text: str):
    """An NKI dtype from its name or a shorthand (``f32``, ``bf16``, ``fp8e4m3``, ``i32``...).

    Raises:
        ArgError: naming the dtype names and shorthands accepted.
    """
    key = text.strip().lower()
    try:
        return D.canonical(DTYPE_SHORTHANDS.get(key, key))
    except (TypeError, ValueError, KeyError):
        raise ArgError(f"unknown dtype {text!r}; NKI dtypes: {', '.join(D.DTYPE_NAMES)}; "
                       f"shorthands: {', '.join(DTYPE_SHORTHANDS)}") from None


def parse_grid(text: str) -> tuple:
    """``"2,2"`` → ``(2, 2)``; every extent must be a positive integer."""
    try:
        grid = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise ArgError(f"bad grid {text!r}: expected positive integers like 2,2") from None
    if not grid or any(g <= 0 for g in grid):
        raise ArgError(f"bad grid {text!r}: expected positive integers like 2,2")
    return grid


def _literal(text: str):
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        raise ArgError(f"bad value {text.strip()!r}: expected a Python literal") from None


def parse_params(text: str) -> tuple:
    """``"TILE_N=128,256,512"`` → ``("TILE_N", [128, 256, 512])`` (values are literals)."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise ArgError(f"bad parameter {text!r}: expected NAME=V1,V2,...")
    vals = [_literal(v) for v in values.split(",") if v.strip()]
    if not vals:
        raise ArgError(f"parameter '{name.strip()}' has no values")
    return name.strip(), vals


def random_inputs(specs: dict, seed: int = 0) -> dict:
    """Seeded arrays standing for placeholders (normal floats, small non-negative ints)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, s in specs.items():
        if D.is_float(s.dtype):
            data = rng.standard_normal(s.shape).astype(np.float32)
            out[name] = D.cast(data, D.name_of(s.dtype)) if D.name_of(s.dtype) != "float32" \
                else data
        else:
            out[name] = rng.integers(0, 8, size=s.shape).astype(D.storage_dtype(s.dtype))
    return out


def kernel_function(kernel):
    """The Python function behind a kernel (``@nki.jit`` object or plain function)."""
    return getattr(kernel, "func", kernel)


def bind_arguments(kernel, positional: list, named: dict) -> tuple:
    """Order arguments by the kernel's signature.

    Args:
        kernel: the kernel (``@nki.jit`` or function).
        positional: values for the first parameters, in order.
        named: ``{parameter: value}`` for the rest (shapes, ``name=expr`` arguments).

    Returns:
        ``(args, kwargs)``: ``named`` entries that follow the positional ones in the signature
        become positional (NKI kernels take tensors positionally); the others stay keywords.
    """
    sig = _pyinspect.signature(kernel_function(kernel))
    names = list(sig.parameters)
    for n in named:
        if n not in sig.parameters:
            raise ArgError(f"kernel '{kernel_function(kernel).__name__}' has no parameter "
                           f"'{n}' (parameters: {', '.join(names) or 'none'})")
    args = list(positional)
    named = dict(named)
    for n in names[len(args):]:
        p = sig.parameters[n]
        if n in named and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            args.append(named.pop(n))
        else:
            break
    missing = [n for n in names[len(args):] if n not in named
               and sig.parameters[n].default is sig.parameters[n].empty
               and sig.parameters[n].kind in (sig.parameters[n].POSITIONAL_OR_KEYWORD,
                                              sig.parameters[n].POSITIONAL_ONLY)]
    if missing:
        raise ArgError(f"no value for kernel parameter(s) {', '.join(missing)}: pass them with "
                       "--args or --shapes")
    return args, named
