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
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

# The dtype table and the casts live in their own modules; this module is the one to import.
from .dtype_casts import (
    cast as cast,
)
from .dtype_casts import (
    from_f32 as from_f32,
)
from .dtype_casts import (
    narrow_table as narrow_table,
)
from .dtype_casts import (
    static_cast as static_cast,
)
from .dtype_casts import (
    to_f32 as to_f32,
)
from .dtype_table import (
    DTYPE_NAMES as DTYPE_NAMES,
)
from .dtype_table import (
    DtypeSpec as DtypeSpec,
)
from .dtype_table import (
    bfloat16 as bfloat16,
)
from .dtype_table import (
    bool_ as bool_,
)
from .dtype_table import (
    canonical as canonical,
)
from .dtype_table import (
    float8_e4m3 as float8_e4m3,
)
from .dtype_table import (
    float8_e5m2 as float8_e5m2,
)
from .dtype_table import (
    float16 as float16,
)
from .dtype_table import (
    float32 as float32,
)
from .dtype_table import (
    from_name as from_name,
)
from .dtype_table import (
    int8 as int8,
)
from .dtype_table import (
    int16 as int16,
)
from .dtype_table import (
    int32 as int32,
)
from .dtype_table import (
    is_bool as is_bool,
)
from .dtype_table import (
    is_float as is_float,
)
from .dtype_table import (
    is_int as is_int,
)
from .dtype_table import (
    is_signed as is_signed,
)
from .dtype_table import (
    is_supported as is_supported,
)
from .dtype_table import (
    itemsize as itemsize,
)
from .dtype_table import (
    name_of as name_of,
)
from .dtype_table import (
    promote as promote,
)
from .dtype_table import (
    result_type as result_type,
)
from .dtype_table import (
    sizeinbytes as sizeinbytes,
)
from .dtype_table import (
    spec_of as spec_of,
)
from .dtype_table import (
    storage_dtype as storage_dtype,
)
from .dtype_table import (
    tfloat32 as tfloat32,
)
from .dtype_table import (
    uint8 as uint8,
)
from .dtype_table import (
    uint16 as uint16,
)
from .dtype_table import (
    uint32 as uint32,
)


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
    dt = from_name(name)
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
    spec = spec_of(dtype)
    if spec.family != "float":
        raise TypeError(f"finfo() needs a float dtype, got {spec.name}; use iinfo()")
    return _finfo(spec.name)


def iinfo(dtype: npt.DTypeLike) -> np.iinfo:
    """Returns ``numpy.iinfo`` for an NKI integer dtype.

    Raises:
        TypeError: for a non-integer or unsupported dtype.
    """
    spec = spec_of(dtype)
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
