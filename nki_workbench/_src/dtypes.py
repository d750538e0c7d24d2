"""The NKI dtype system: dtype objects, names, type promotion and hardware-like casts.

This module is the single source of truth about data types for the tracer, the IR and the CPU
simulator. It exposes the 13 NKI dtypes as the same objects NKI's ``nki.language`` exposes
(``nl.bfloat16`` is ``np.dtype(ml_dtypes.bfloat16)``, ``nl.tfloat32`` is ``np.dtype('|V4')``, ...),
and the rules the rest of the package must agree on:

* ``canonical`` / ``name_of`` / ``from_name``: normalising anything dtype-like, and the textual
  names the IR printer and parser use.
* ``promote`` / ``result_type``: NKI's type promotion (nki-api.md §2.16), held in one table.
* ``cast`` / ``static_cast`` / ``to_f32`` / ``from_f32``: value conversion with
  round-to-nearest-even for floats and saturation for integers, never producing float64.
* ``finfo`` / ``iinfo`` / ``itemsize`` and the ``fp32`` / ``bfp16`` constants (nki-api.md §2.1,
  §4.0).

tfloat32 has no numpy type: its values live in float32 arrays whose mantissa is rounded to 10 bits
(``storage_dtype(tfloat32)`` is float32).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

# ------------------------------------------------------------------ NKI dtype objects (§2.1)
bool_ = np.bool_
int8 = np.int8
int16 = np.int16
int32 = np.int32
uint8 = np.uint8
uint16 = np.uint16
uint32 = np.uint32
float16 = np.float16
float32 = np.float32
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)  # IEEE-style e4m3: has inf, max 240 (not e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
tfloat32 = np.dtype("|V4")  # a distinct 4-byte marker, exactly as in NKI's stub


@dataclasses.dataclass(frozen=True)
class _Spec:
    """One row of the dtype table."""

    name: str
    dtype: np.dtype
    family: str  # "bool" | "int" | "float"
    storage: np.dtype  # numpy dtype of simulator arrays holding this dtype
    signed: bool
    exponent_bits: int = 0  # floats only
    mantissa_bits: int = 0  # floats only
    int_min: int = 0  # ints only
    int_max: int = 0  # ints only


def _int_spec(name: str, np_type: type) -> _Spec:
    info = np.iinfo(np_type)
    dt = np.dtype(np_type)
    return _Spec(name, dt, "int", dt, info.min < 0, int_min=int(info.min), int_max=int(info.max))


def _float_spec(name: str, dt: np.dtype, exp: int, man: int, storage: Any = None) -> _Spec:
    store = dt if storage is None else np.dtype(storage)
    return _Spec(name, dt, "float", store, True, exponent_bits=exp, mantissa_bits=man)


# The table every lookup below is derived from; order = canonical listing order.
_SPECS: tuple[_Spec, ...] = (
    _Spec("bool", np.dtype(np.bool_), "bool", np.dtype(np.bool_), False),
    _int_spec("int8", np.int8),
    _int_spec("int16", np.int16),
    _int_spec("int32", np.int32),
    _int_spec("uint8", np.uint8),
    _int_spec("uint16", np.uint16),
    _int_spec("uint32", np.uint32),
    _float_spec("float16", np.dtype(np.float16), 5, 10),
    _float_spec("float32", np.dtype(np.float32), 8, 23),
    _float_spec("bfloat16", bfloat16, 8, 7),
    _float_spec("tfloat32", tfloat32, 8, 10, storage=np.float32),
    _float_spec("float8_e4m3", float8_e4m3, 4, 3),
    _float_spec("float8_e5m2", float8_e5m2, 5, 2),
)

DTYPE_NAMES: tuple[str, ...] = tuple(s.name for s in _SPECS)
_BY_NAME: dict[str, _Spec] = {s.name: s for s in _SPECS}
_BY_DTYPE: dict[np.dtype, _Spec] = {s.dtype: s for s in _SPECS}

# Extra spellings accepted by canonical() (lower-cased); anything else goes through np.dtype().
_ALIASES: dict[str, str] = {
    "bool_": "bool",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "single": "float32",
    "tf32": "tfloat32",
    "fp8_e4m3": "float8_e4m3",
    "fp8e4": "float8_e4m3",
    "fp8_e5m2": "float8_e5m2",
    "fp8e5": "float8_e5m2",
}

# Python's builtin types as dtype arguments; int and float mean NKI's widest type of their kind.
_PY_TYPES: dict[type, str] = {bool: "bool", int: "int32", float: "float32"}


# ------------------------------------------------------------------ normalisation
def _as_numpy_dtype(dtype_like: Any) -> np.dtype | None:
    """np.dtype(dtype_like) with native byte order, or None if numpy cannot interpret it."""
    if dtype_like is None:  # np.dtype(None) is float64: never what an NKI caller means
        return None
    try:
        dt = np.dtype(dtype_like)
    except (TypeError, ValueError):
        return None
    return dt.newbyteorder("=") if dt.byteorder in "<>" else dt


def _lookup(dtype_like: Any) -> _Spec | None:
    if isinstance(dtype_like, np.dtype):
        spec = _BY_DTYPE.get(dtype_like)
        if spec is not None:
            return spec
    if isinstance(dtype_like, str):
        key = dtype_like.strip().lower()
        spec = _BY_NAME.get(_ALIASES.get(key, key))
        if spec is not None:
            return spec
    if isinstance(dtype_like, type) and dtype_like in _PY_TYPES:
        return _BY_NAME[_PY_TYPES[dtype_like]]
    dt = _as_numpy_dtype(dtype_like)
    return None if dt is None else _BY_DTYPE.get(dt)


def _describe(dtype_like: Any) -> str:
    dt = _as_numpy_dtype(dtype_like)
    return repr(dtype_like) if dt is None else f"{dt.name} ({dtype_like!r})"


def _spec(dtype_like: Any) -> _Spec:
    spec = _lookup(dtype_like)
    if spec is None:
        raise TypeError(
            f"unsupported dtype {_describe(dtype_like)}: NKI dtypes are {', '.join(DTYPE_NAMES)} "
            "(NKI has no 64-bit or complex types)"
        )
    return spec


def canonical(dtype_like: npt.DTypeLike) -> np.dtype:
    """Normalises anything dtype-like to the NKI dtype it denotes.

    Args:
        dtype_like: an NKI dtype object (``bfloat16``, ``tfloat32``, ...), a numpy type or dtype, a
            Python type (``bool`` -> bool, ``int`` -> int32, ``float`` -> float32) or a name such as
            ``'bfloat16'``, ``'bf16'``, ``'fp8_e4m3'``, ``'tf32'``, ``'fp32'``, ``'int32'``.

    Returns:
        The canonical ``np.dtype`` (``tfloat32`` is ``np.dtype('|V4')``).

    Raises:
        TypeError: if the dtype is not an NKI dtype (float64, int64, complex, object, ...). The
            message names the dtype and lists the supported ones.
    """
    return _spec(dtype_like).dtype


def is_supported(dtype_like: Any) -> bool:
    """Returns whether ``canonical(dtype_like)`` would succeed."""
    return _lookup(dtype_like) is not None


def name_of(dtype_like: npt.DTypeLike) -> str:
    """Returns the canonical NKI name of a dtype, e.g. ``'bfloat16'`` or ``'float8_e4m3'``.

    Args:
        dtype_like: anything ``canonical`` accepts.

    Returns:
        One of ``DTYPE_NAMES``.
    """
    return _spec(dtype_like).name


def from_name(name: str) -> np.dtype:
    """Inverse of ``name_of``: the dtype for one of the 13 canonical names (IR text form).

    Args:
        name: a canonical name such as ``'bfloat16'``; aliases like ``'bf16'`` are rejected so that
            the IR text has exactly one spelling per dtype.

    Returns:
        The canonical ``np.dtype``.

    Raises:
        ValueError: if ``name`` is not a canonical NKI dtype name.
    """
    spec = _BY_NAME.get(name)
    if spec is None:
        expected = ", ".join(DTYPE_NAMES)
        raise ValueError(f"unknown NKI dtype name {name!r}; expected one of {expected}")
    return spec.dtype


def itemsize(dtype_like: npt.DTypeLike) -> int:
    """Returns the bytes one element occupies on the device (tfloat32 -> 4, bool -> 1)."""
    return _spec(dtype_like).dtype.itemsize


sizeinbytes = itemsize  # NKI: nki.language.constants.sizeinbytes


def storage_dtype(dtype_like: npt.DTypeLike) -> np.dtype:
    """Returns the numpy dtype of simulator arrays holding values of this dtype.

    tfloat32 values are stored in float32 arrays (mantissa rounded to 10 bits); every other NKI
    dtype is stored as itself.
    """
    return _spec(dtype_like).storage


def is_float(dtype_like: npt.DTypeLike) -> bool:
    """Returns whether the dtype is a floating-point type (tfloat32, bfloat16 and fp8 included)."""
    return _spec(dtype_like).family == "float"


def is_int(dtype_like: npt.DTypeLike) -> bool:
    """Returns whether the dtype is a signed or unsigned integer type (bool excluded)."""
    return _spec(dtype_like).family == "int"


def is_bool(dtype_like: npt.DTypeLike) -> bool:
    """Returns whether the dtype is bool."""
    return _spec(dtype_like).family == "bool"


def is_signed(dtype_like: npt.DTypeLike) -> bool:
    """Returns whether the dtype can hold negative values (signed ints and all floats)."""
    return _spec(dtype_like).signed


# ------------------------------------------------------------------ promotion (§2.16)
# Types NKI introduces when neither operand's value set contains the other's, tried in order. A
# chain entry of another family (float32 closing the int chain) is the unconditional last resort:
# there is no int64 on the hardware, so (int32, uint32) -> float32.
_WIDENING: dict[str, tuple[str, ...]] = {
    "float": ("bfloat16", "float32"),
    "int": ("int16", "int32", "float32"),
}


def _contains(big: _Spec, small: _Spec) -> bool:
    # Same-family value-set inclusion: exponent and mantissa widths for floats, range for ints.
    if big.family == "float":
        return big.exponent_bits >= small.exponent_bits and big.mantissa_bits >= small.mantissa_bits
    return big.int_min <= small.int_min and big.int_max >= small.int_max


def _widen(a: _Spec, b: _Spec) -> _Spec:
    # "The wider type, or a new wider type covering both" (§2.16), for two types of one family.
    if _contains(a, b):
        return a
    if _contains(b, a):
        return b
    for name in _WIDENING[a.family]:
        cand = _BY_NAME[name]
        if cand.family != a.family or (_contains(cand, a) and _contains(cand, b)):
            return cand
    raise AssertionError(f"no widening for {a.name}, {b.name}")  # unreachable: chains end wide


# (family of a, family of b) -> rule; bool is absorbed by the other operand.
_FAMILY_RULES: dict[tuple[str, str], Callable[[_Spec, _Spec], _Spec]] = {
    ("bool", "bool"): lambda a, b: a,
    ("bool", "int"): lambda a, b: b,
    ("bool", "float"): lambda a, b: b,
    ("int", "bool"): lambda a, b: a,
    ("float", "bool"): lambda a, b: a,
    ("int", "float"): lambda a, b: b,
    ("float", "int"): lambda a, b: a,
    ("int", "int"): _widen,
    ("float", "float"): _widen,
}

# The full 13 x 13 promotion table, derived once from the rules above.
_PROMOTION: dict[tuple[np.dtype, np.dtype], np.dtype] = {
    (a.dtype, b.dtype): (a if a is b else _FAMILY_RULES[a.family, b.family](a, b)).dtype
    for a in _SPECS
    for b in _SPECS
}


def promote(a: npt.DTypeLike, b: npt.DTypeLike) -> np.dtype:
    """Returns the dtype NKI gives a binary arithmetic op on operands of dtypes ``a`` and ``b``.

    Rules (nki-api.md §2.16), with every documented example reproduced exactly:

    * same type -> itself; bool with anything -> the other type.
    * (float, int) -> the float type: (int32, float16) -> float16, (uint16, tfloat32) -> tfloat32.
    * (float, float): if one format contains the other's values (exponent and mantissa widths both
      >=), that one; otherwise the first of bfloat16, float32 containing both:
      (float32, tfloat32) -> float32, (float32, bfloat16) -> float32,
      (float16, bfloat16) -> float32, (float8_e4m3, float16) -> float16,
      (float8_e4m3, bfloat16) -> bfloat16, (float8_e4m3, float8_e5m2) -> bfloat16.
    * (int, int): if one range contains the other, that one; otherwise the first of int16, int32
      containing both, else float32 (no int64): (int16, int32) -> int32, (uint8, uint16) -> uint16,
      (uint16, int32) -> int32, (int8, uint8) -> int16, (int8, uint16) -> int32,
      (int32, uint32) -> float32.

    Assumptions for pairs the docs do not list (they follow from the rule above):
    (tfloat32, float16) -> tfloat32 and (tfloat32, bfloat16) -> tfloat32 (tf32's 8e10m holds both);
    (float8_e5m2, float16) -> float16; (float8_e5m2, bfloat16) -> bfloat16; fp8 with tfloat32 ->
    tfloat32; (int16, uint16) -> int32; (int8 or int16, uint32) -> float32.

    Note the rules are a table, not a lattice: folding three dtypes can depend on the order, e.g.
    ((float16, bfloat16), tfloat32) -> float32 but (float16, (bfloat16, tfloat32)) -> tfloat32.

    Args:
        a: first operand dtype (anything ``canonical`` accepts).
        b: second operand dtype.

    Returns:
        The promoted NKI dtype.
    """
    return _PROMOTION[_spec(a).dtype, _spec(b).dtype]


def _operand_dtype(operand: Any) -> np.dtype:
    # Weakly typed scalars stand for the widest NKI type of their kind (§2.16).
    if isinstance(operand, np.generic):
        spec = _lookup(operand.dtype)
        if spec is not None:
            return spec.dtype  # numpy scalars of NKI dtypes are strongly typed
        kind = operand.dtype.kind
        if kind in "iu":
            return np.dtype(np.int32)  # 64-bit numpy ints (np.int64(2)) count as Python ints
        if kind == "f":
            return np.dtype(np.float32)  # 64-bit numpy floats (1 / np.sqrt(d)) as Python floats
        raise TypeError(f"unsupported scalar operand {operand!r} of dtype {operand.dtype}")
    if isinstance(operand, bool):
        return np.dtype(np.uint8)
    if isinstance(operand, int):
        return np.dtype(np.int32)
    if isinstance(operand, float):
        return np.dtype(np.float32)
    if isinstance(operand, (np.dtype, type, str)):
        return canonical(operand)
    operand_dtype = getattr(operand, "dtype", None)
    if operand_dtype is not None:
        return canonical(operand_dtype)  # arrays, tiles and anything else carrying a dtype
    raise TypeError(f"cannot determine an NKI dtype for operand {operand!r}")


def result_type(*operands: Any) -> np.dtype:
    """Returns the promoted dtype of an op over ``operands``, folding ``promote`` left to right.

    Operands may be dtype-likes, objects with a ``dtype`` attribute (arrays, tiles), numpy scalars
    (strongly typed with their own dtype, e.g. ``np.float16(2)``) or Python scalars. Python scalars
    are weakly typed and count as the widest NKI type of their kind: bool -> uint8, int -> int32,
    float -> float32, so ``result_type(int8, 2)`` is int32 and ``result_type(float16, 1.2)`` is
    float32. Assumption: numpy scalars of 64-bit types, which NKI cannot hold (``np.float64``,
    ``np.int64``), are treated like the Python scalars of their kind.

    Args:
        *operands: at least one operand.

    Returns:
        The promoted NKI dtype.

    Raises:
        TypeError: with no operands, or for an operand with no NKI dtype.
    """
    if not operands:
        raise TypeError("result_type() needs at least one operand")
    return functools.reduce(promote, (_operand_dtype(op) for op in operands))


# ------------------------------------------------------------------ casts
# Paths picked by timing 1024x1024 arrays (numpy 2.4, ml_dtypes 0.6; ms, ours vs the alternative):
#   bf16 -> f32: astype 0.10 vs uint16 << 16 bit trick 0.21. ml_dtypes' astype is ~8x slower on
#                strided views, so those are made contiguous first (0.46 vs 3.4).
#   f32 -> bf16: astype 0.50 vs integer RNE bit trick 1.00 (strided: 1.2 vs 4.0).
#   fp8 -> f32: 256-entry table 0.9 vs astype 6.5; f16 -> f32: 65536-entry table 1.2 vs astype 2.0.
#   f32 -> fp8: table indexed by (sign, exponent, kept mantissa, round bit, sticky) 2.0 vs 8.5.
_F32 = np.dtype(np.float32)
_TF32_DROP = 13  # float32 mantissa bits a tf32 value lacks (23 - 10)


def _dense(arr: np.ndarray) -> np.ndarray:
    # ml_dtypes' casts are fast only on C- or F-contiguous arrays.
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        return arr
    return np.ascontiguousarray(arr)


@functools.cache
def _widen_table(dtype: np.dtype) -> np.ndarray:
    # float32 value of every bit pattern of a 1- or 2-byte float, computed by ml_dtypes/numpy.
    bits = np.arange(1 << (8 * dtype.itemsize), dtype=np.uint32)
    with np.errstate(invalid="ignore", over="ignore"):
        return bits.astype(f"u{dtype.itemsize}").view(dtype).astype(np.float32)


def _widen_by_table(arr: np.ndarray) -> np.ndarray:
    return np.take(_widen_table(arr.dtype), arr.view(f"u{arr.dtype.itemsize}"))


def _widen_bf16(arr: np.ndarray) -> np.ndarray:
    # why: a bf16 is the high half of its float32, so a 16-bit shift widens it exactly (every
    # bit pattern, NaN payloads included) at a third of the cost of ml_dtypes' astype
    out = np.empty(arr.shape, dtype=np.uint32)
    np.left_shift(arr.view(np.uint16), 16, out=out, dtype=np.uint32)
    return out.view(np.float32)


# Source dtype -> float32 widening; anything else numeric goes through astype.
_TO_F32: dict[np.dtype, Callable[[np.ndarray], np.ndarray]] = {
    _F32: lambda arr: arr,
    bfloat16: _widen_bf16,
    np.dtype(np.float16): _widen_by_table,
    float8_e4m3: _widen_by_table,
    float8_e5m2: _widen_by_table,
}


def to_f32(x: npt.ArrayLike) -> np.ndarray:
    """Widens an array to float32: the simulator's hot-path conversion before any arithmetic.

    Exact for every NKI float dtype (bf16, fp16, fp8 and tf32 storage); integers and float64 are
    rounded to nearest even like ``astype``. An array that already is float32 is returned as is
    (no copy), so treat the result as read-only.

    Args:
        x: a numpy array or scalar of a bool, integer or float dtype.

    Returns:
        A float32 ndarray of the same shape.

    Raises:
        TypeError: for complex, object or other non-numeric input.
    """
    arr = np.asarray(x)
    widen = _TO_F32.get(arr.dtype)
    if widen is not None:
        return np.asarray(widen(arr))
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"to_f32() cannot convert an array of dtype {arr.dtype}")
    return arr.astype(np.float32)


@functools.cache
def _narrow_table(dtype: np.dtype, mantissa_bits: int) -> np.ndarray:
    # Result bits for every (bits >> round_pos, sticky) key, rounded by ml_dtypes.
    round_pos = 22 - mantissa_bits  # bit position of the first dropped float32 mantissa bit
    keys = np.arange(1 << (33 - round_pos), dtype=np.uint32)
    representatives = ((keys >> 1) << round_pos) | (keys & 1)
    with np.errstate(invalid="ignore", over="ignore"):
        return representatives.view(np.float32).astype(dtype).view(f"u{dtype.itemsize}")


def _fp8_from_f32(arr: np.ndarray, spec: _Spec) -> np.ndarray:
    # Bit-exact with ml_dtypes' RNE: the result only depends on the bits above round_pos + sticky.
    table = _narrow_table(spec.dtype, spec.mantissa_bits)
    round_pos = 22 - spec.mantissa_bits
    bits = arr.view(np.uint32)
    key = (bits >> (round_pos - 1)) & np.uint32(0xFFFFFFFE)
    key |= (bits & np.uint32((1 << round_pos) - 1)) != 0
    return np.take(table, key).view(spec.dtype)


def _round_tf32(arr: np.ndarray, spec: _Spec | None = None) -> np.ndarray:
    # RNE of the float32 mantissa to 10 bits; overflow carries into the exponent (max -> inf), NaN
    # becomes the canonical quiet NaN with its sign kept (as ml_dtypes does for bfloat16).
    bits = arr.view(np.uint32)
    lsb = (bits >> _TF32_DROP) & np.uint32(1)
    rounded = (bits + np.uint32((1 << (_TF32_DROP - 1)) - 1) + lsb) & np.uint32(0xFFFFE000)
    nan = (bits & np.uint32(0x80000000)) | np.uint32(0x7FC00000)
    return np.where(np.isnan(arr), nan, rounded).astype(np.uint32, copy=False).view(np.float32)


# Target name -> float32 narrowing; other targets use astype.
_FROM_F32: dict[str, Callable[[np.ndarray, _Spec], np.ndarray]] = {
    "float32": lambda arr, spec: arr,
    "bfloat16": lambda arr, spec: _dense(arr).astype(bfloat16),
    "tfloat32": _round_tf32,
    "float8_e4m3": _fp8_from_f32,
    "float8_e5m2": _fp8_from_f32,
}


def _narrow_f32(arr: np.ndarray, spec: _Spec) -> np.ndarray:
    narrow = _FROM_F32.get(spec.name)
    if narrow is None:
        return arr.astype(spec.storage)
    return narrow(arr, spec)


def from_f32(x: npt.ArrayLike, dtype: npt.DTypeLike) -> np.ndarray:
    """Narrows a float32 array to the storage dtype of ``dtype``: the simulator's store path.

    Same result as ``cast`` (bit-exact with ml_dtypes' round-to-nearest-even for bf16 and fp8,
    tf32 rounded to 10 mantissa bits), through the fastest measured path. A float32 target
    returns the input itself (no copy). Non-float32 input is handed to ``cast``.

    Args:
        x: a float32 numpy array or scalar.
        dtype: the NKI dtype to convert to.

    Returns:
        An ndarray of ``storage_dtype(dtype)``.
    """
    spec = _spec(dtype)
    arr = np.asarray(x)
    if arr.dtype != _F32:
        return cast(arr, spec.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(_narrow_f32(arr, spec))


def _float_to_float(arr: np.ndarray, spec: _Spec) -> np.ndarray:
    if arr.dtype in _TO_F32:
        # NKI floats widen to float32 exactly, so narrowing from there is the single RNE step.
        return _narrow_f32(to_f32(arr), spec)
    if spec.name == "tfloat32":
        return _round_tf32(arr.astype(np.float32))  # float64 input: rounded twice (to f32, tf32)
    # float64 -> narrow float: numpy's astype rounds once; ml_dtypes' goes through float32 first.
    return _dense(arr).astype(spec.storage)


def _float_to_int(arr: np.ndarray, spec: _Spec) -> np.ndarray:
    # Truncate toward zero, NaN -> 0, saturate; float64 holds every int32/uint32 bound exactly.
    wide = (arr if arr.dtype == np.float64 else to_f32(arr)).astype(np.float64)
    wide = np.trunc(wide)
    np.copyto(wide, 0.0, where=np.isnan(wide))
    np.clip(wide, spec.int_min, spec.int_max, out=wide)
    return wide.astype(spec.storage)


def _int_to_int(arr: np.ndarray, spec: _Spec) -> np.ndarray:
    # Saturate: clip to the intersection of both ranges (representable in the source type).
    src = np.iinfo(arr.dtype)
    low = arr.dtype.type(max(src.min, spec.int_min))
    high = arr.dtype.type(min(src.max, spec.int_max))
    return np.clip(arr, low, high).astype(spec.storage)


def _int_to_float(arr: np.ndarray, spec: _Spec) -> np.ndarray:
    # Through float32 like the engines' convert path (16/8-bit targets round twice above 2**24).
    return _narrow_f32(arr.astype(np.float32), spec)


def _to_bool(arr: np.ndarray, spec: _Spec) -> np.ndarray:
    # Nonzero -> True; NaN is nonzero (C / numpy truthiness).
    wide = to_f32(arr) if arr.dtype in _TO_F32 else arr
    return wide != 0


# (source family, target family) -> conversion; bool sources are first viewed as uint8 0/1.
_CAST_RULES: dict[tuple[str, str], Callable[[np.ndarray, _Spec], np.ndarray]] = {
    ("float", "float"): _float_to_float,
    ("float", "int"): _float_to_int,
    ("float", "bool"): _to_bool,
    ("int", "float"): _int_to_float,
    ("int", "int"): _int_to_int,
    ("int", "bool"): _to_bool,
}


def _source_family(dt: np.dtype) -> str:
    if dt.kind == "b":
        return "bool"
    if dt.kind in "iu":
        return "int"
    if dt.kind == "f" or dt in _TO_F32:
        return "float"
    raise TypeError(f"cannot cast an array of dtype {dt} to an NKI dtype")


def cast(x: npt.ArrayLike, dtype: npt.DTypeLike) -> np.ndarray:
    """Converts values to the storage dtype of ``dtype`` with hardware-like rules.

    * float -> float: round to nearest even (ml_dtypes for bf16/fp8, numpy for fp16/fp32); tf32
      rounds the float32 mantissa to 10 bits (RNE, integer bit ops). Overflow gives inf as in
      ml_dtypes; denormals are kept. NaN -> quiet NaN.
    * float -> int (assumption ``FLOAT_TO_INT = truncate toward zero``, matching numpy and the
      numpy-based NKI simulator): truncate, then saturate to the integer range; NaN -> 0,
      +inf -> max, -inf -> min. Never numpy's undefined wrap-around.
    * int -> int (assumption ``INT_TO_INT = saturate``): clamp to the target range, like the
      engines' convert-through-fp32 path for differing dtypes but without its precision loss.
      Raw bit reinterpretation (bitvec ops) is ``ndarray.view``, not a cast.
    * int -> float: through float32, as the engines convert, then rounded as float -> float.
    * anything -> bool: nonzero -> True (NaN -> True); bool -> anything: 0 / 1.

    Args:
        x: a numpy array, numpy scalar, Python scalar or nested list; float64 and 64-bit integer
            input is accepted.
        dtype: the NKI dtype to convert to (anything ``canonical`` accepts).

    Returns:
        A new ndarray (0-d for scalar input) of ``storage_dtype(dtype)``; never float64.

    Raises:
        TypeError: for an unsupported target dtype or a complex / object / void source.
    """
    spec = _spec(dtype)
    arr = np.asarray(x)
    family = _source_family(arr.dtype)
    if family == "bool":
        arr, family = arr.astype(np.uint8), "int"
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.asarray(_CAST_RULES[family, spec.family](arr, spec))
    return out.copy() if out is arr else out  # float32 -> float32 passes the input through


def static_cast(input_data: Any, dtype: npt.DTypeLike) -> Any:
    """Casts a Python scalar or numpy array to an NKI dtype (``nl.static_cast``).

    Used outside kernels to build bf16 / fp8 inputs, e.g. ``static_cast(q, 'bfloat16')``. Follows
    the rounding and saturation rules of ``cast``.

    Args:
        input_data: a Python scalar, numpy scalar or array-like.
        dtype: the target dtype, as a dtype object or a name.

    Returns:
        A numpy scalar for scalar input, else an ndarray, of ``storage_dtype(dtype)``.
    """
    out = cast(input_data, dtype)
    return out if isinstance(input_data, np.ndarray) or out.ndim else out[()]


# ------------------------------------------------------------------ finfo / iinfo / constants
@dataclasses.dataclass(frozen=True)
class FloatInfo:
    """Machine limits of an NKI float dtype, like ``numpy.finfo``.

    Attributes:
        dtype: the NKI dtype described.
        bits: bits one element occupies (32 for tfloat32's container).
        nmant: explicit mantissa bits.
        nexp: exponent bits.
        eps: distance from 1.0 to the next larger value.
        max: largest finite value.
        min: most negative finite value (``-max``).
        tiny: smallest positive normal value (same as ``smallest_normal``).
        smallest_normal: smallest positive normal value.
        smallest_subnormal: smallest positive subnormal value.
    """

    dtype: np.dtype
    bits: int
    nmant: int
    nexp: int
    eps: Any
    max: Any
    min: Any
    tiny: Any
    smallest_normal: Any
    smallest_subnormal: Any


def _tf32_finfo() -> FloatInfo:
    # float32 bit patterns of tf32's limits: 10 mantissa bits, float32's exponent range.
    def value(bits: int) -> np.float32:
        return np.array(bits, np.uint32).view(np.float32)[()]

    top = value(0x7F7FE000)
    return FloatInfo(
        dtype=tfloat32,
        bits=32,
        nmant=10,
        nexp=8,
        eps=np.float32(2.0**-10),
        max=top,
        min=-top,
        tiny=value(0x00800000),
        smallest_normal=value(0x00800000),
        smallest_subnormal=value(0x00002000),
    )


@functools.cache
def _finfo(name: str) -> FloatInfo:
    if name == "tfloat32":
        return _tf32_finfo()
    dt = _BY_NAME[name].dtype
    info = ml_dtypes.finfo(dt)  # also covers numpy's own float16 / float32
    return FloatInfo(
        dtype=dt,
        bits=dt.itemsize * 8,
        nmant=int(info.nmant),
        nexp=int(info.nexp),
        eps=info.eps,
        max=info.max,
        min=info.min,
        tiny=info.smallest_normal,
        smallest_normal=info.smallest_normal,
        smallest_subnormal=info.smallest_subnormal,
    )


def finfo(dtype: npt.DTypeLike) -> FloatInfo:
    """Returns the machine limits of an NKI float dtype (``nl.finfo``).

    Works for bfloat16 and fp8 (via ml_dtypes) and tfloat32 (10 mantissa bits, float32's exponent
    range; values are float32 scalars). Other values are scalars of the dtype itself.

    Args:
        dtype: a float NKI dtype.

    Returns:
        A ``FloatInfo``.

    Raises:
        TypeError: for a non-float or unsupported dtype.
    """
    spec = _spec(dtype)
    if spec.family != "float":
        raise TypeError(f"finfo() needs a float dtype, got {spec.name}; use iinfo()")
    return _finfo(spec.name)


def iinfo(dtype: npt.DTypeLike) -> np.iinfo:
    """Returns ``numpy.iinfo`` for an NKI integer dtype.

    Raises:
        TypeError: for a non-integer or unsupported dtype.
    """
    spec = _spec(dtype)
    if spec.family != "int":
        raise TypeError(f"iinfo() needs an integer dtype, got {spec.name}; use finfo()")
    return np.iinfo(spec.dtype)


class fp32:  # lower-case: NKI's spelling (nl.fp32, nisa.fp32)
    """fp32 constants, as ``nl.fp32`` / ``nisa.fp32`` (nki-api.md §2.1, §4.0).

    Attributes:
        min: float32 with bit pattern 0xff7fffff, the most negative finite value (-3.4028235e38).
    """

    min = np.array(0xFF7FFFFF, np.uint32).view(np.float32)[()]


class bfp16:  # lower-case: NKI's spelling (nl.bfp16)
    """bfloat16 constants, as ``nl.bfp16`` (nki-api.md §2.1).

    Attributes:
        min: bfloat16 with bit pattern 0xff80, exactly as NKI documents it as "minimum".
    """

    # 0xff80 is -inf in bfloat16 (the most negative finite value is 0xff7f); kept as documented.
    min = np.array(0xFF80, np.uint16).view(bfloat16)[()]
