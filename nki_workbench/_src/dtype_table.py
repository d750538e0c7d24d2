"""The NKI dtype table: the 13 dtype objects, their names and predicates, and type promotion.

The rows every other dtype rule is derived from (:class:`DtypeSpec`), normalisation of anything
dtype-like (``canonical``, ``name_of``, ``from_name``) and NKI's promotion table (``promote``,
``result_type``, nki-api.md §2.16). Callers import these names from
:mod:`nki_workbench._src.dtypes`, which re-exports them.
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
class DtypeSpec:
    """One row of the dtype table: what the casts and limits of one NKI dtype are derived from."""

    name: str
    dtype: np.dtype
    family: str  # "bool" | "int" | "float"
    storage: np.dtype  # numpy dtype of simulator arrays holding this dtype
    signed: bool
    exponent_bits: int = 0  # floats only
    mantissa_bits: int = 0  # floats only
    int_min: int = 0  # ints only
    int_max: int = 0  # ints only


def _int_spec(name: str, np_type: type) -> DtypeSpec:
    info = np.iinfo(np_type)
    dt = np.dtype(np_type)
    return DtypeSpec(name, dt, "int", dt, info.min < 0, int_min=int(info.min),
                     int_max=int(info.max))


def _float_spec(name: str, dt: np.dtype, exp: int, man: int, storage: Any = None) -> DtypeSpec:
    store = dt if storage is None else np.dtype(storage)
    return DtypeSpec(name, dt, "float", store, True, exponent_bits=exp, mantissa_bits=man)


# The table every lookup below is derived from; order = canonical listing order.
_SPECS: tuple[DtypeSpec, ...] = (
    DtypeSpec("bool", np.dtype(np.bool_), "bool", np.dtype(np.bool_), False),
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
_BY_NAME: dict[str, DtypeSpec] = {s.name: s for s in _SPECS}
_BY_DTYPE: dict[np.dtype, DtypeSpec] = {s.dtype: s for s in _SPECS}

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


def _lookup(dtype_like: Any) -> DtypeSpec | None:
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


def spec_of(dtype_like: Any) -> DtypeSpec:
    """Returns the table row of an NKI dtype (anything ``canonical`` accepts).

    Raises:
        TypeError: if the dtype is not an NKI dtype; the message lists the supported ones.
    """
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
    return spec_of(dtype_like).dtype


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
    return spec_of(dtype_like).name


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
    return spec_of(dtype_like).dtype.itemsize


sizeinbytes = itemsize  # NKI: nki.language.constants.sizeinbytes


def storage_dtype(dtype_like: npt.DTypeLike) -> np.dtype:
    """Returns the numpy dtype of simulator arrays holding values of this dtype.

    tfloat32 values are stored in float32 arrays (mantissa rounded to 10 bits); every other NKI
    dtype is stored as itself.
    """
    return spec_of(dtype_like).storage


def is_float(dtype_like: npt.DTypeLike) -> bool:
    """Returns whether the dtype is a floating-point type (tfloat32, bfloat16 and fp8 included)."""
    return spec_of(dtype_like).family == "float"


def is_int(dtype_like: npt.DTypeLike) -> bool:
    """Returns whether the dtype is a signed or unsigned integer type (bool excluded)."""
    return spec_of(dtype_like).family == "int"


def is_bool(dtype_like: npt.DTypeLike) -> bool:
    """Returns whether the dtype is bool."""
    return spec_of(dtype_like).family == "bool"


def is_signed(dtype_like: npt.DTypeLike) -> bool:
    """Returns whether the dtype can hold negative values (signed ints and all floats)."""
    return spec_of(dtype_like).signed


# ------------------------------------------------------------------ promotion (§2.16)
# Types NKI introduces when neither operand's value set contains the other's, tried in order. A
# chain entry of another family (float32 closing the int chain) is the unconditional last resort:
# there is no int64 on the hardware, so (int32, uint32) -> float32.
_WIDENING: dict[str, tuple[str, ...]] = {
    "float": ("bfloat16", "float32"),
    "int": ("int16", "int32", "float32"),
}


def _contains(big: DtypeSpec, small: DtypeSpec) -> bool:
    # Same-family value-set inclusion: exponent and mantissa widths for floats, range for ints.
    if big.family == "float":
        return big.exponent_bits >= small.exponent_bits and big.mantissa_bits >= small.mantissa_bits
    return big.int_min <= small.int_min and big.int_max >= small.int_max


def _widen(a: DtypeSpec, b: DtypeSpec) -> DtypeSpec:
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
_FAMILY_RULES: dict[tuple[str, str], Callable[[DtypeSpec, DtypeSpec], DtypeSpec]] = {
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
    return _PROMOTION[spec_of(a).dtype, spec_of(b).dtype]


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
