"""Simulator memory: tensor storage buffers, poison values, constants and allocation tuning."""

from __future__ import annotations

import base64
import functools

import numpy as np

from .. import dtypes as D
from .. import platform as _platform

__all__ = ["Buf", "poison", "poisoner", "decode_const", "tune_malloc", "storage", "LOW_FLOATS"]


class Buf:
    """A tensor's storage: ``data`` and which elements were written (``init``; None = all)."""

    __slots__ = ("data", "init", "name", "stamp", "f32", "owner")

    def __init__(self, name, data, init=None):
        self.name = name
        self.data = data
        self.init = init
        self.stamp = None  # affine iteration (and write site) that last wrote each element
        self.owner = None  # SPMD program (and write site) that last wrote each element
        self.f32 = None  # float32 copy of ``data`` kept for read-only low-precision buffers

    def writable(self):
        """Make ``data`` safe to write (copy-on-write of shared read-only views)."""
        if not self.data.flags.writeable:
            self.data = np.array(self.data, order="C")  # why: tiles are row-major
        self.f32 = None
        return self.data


def poison(shape, dtype_name: str):
    """An array of ``shape`` holding the poison of an NKI dtype (NaN; int min/max; False)."""
    return poisoner(tuple(shape), dtype_name)()


@functools.lru_cache(maxsize=4096)
def poisoner(shape: tuple, dtype_name: str):
    """A function returning a new array of :func:`poison` (the fill decided once per kind)."""
    st = D.storage_dtype(D.from_name(dtype_name))
    if st.kind == "f" or st.kind == "V" or dtype_name in ("bfloat16", "float8_e4m3",
                                                          "float8_e5m2"):
        fill = np.full((), np.nan, dtype=st)
    elif st.kind == "b":
        return functools.partial(np.zeros, shape, dtype=st)
    else:
        info = np.iinfo(st)
        fill = np.full((), info.min if info.min < 0 else info.max, dtype=st)

    def make():
        out = np.empty(shape, dtype=st)
        out[...] = fill  # why: the same bits as np.full, without its Python-level casting
        return out
    return make


def tune_malloc():
    """Apply the glibc heap tuning if it was asked for (:func:`..platform.tune_malloc`).

    The simulators call this before running; by default it changes nothing.
    """
    if _platform.malloc_tuning_requested():
        _platform.tune_malloc()


def decode_const(decl):
    """The numpy value of a constant tensor declaration (``nl.shared_constant``)."""
    dt = D.storage_dtype(D.from_name(decl.dtype))
    raw = base64.b64decode(decl.data)
    return np.frombuffer(raw, dtype=dt).reshape(decl.shape).copy()


LOW_FLOATS = {"bfloat16", "float16", "float8_e4m3", "float8_e5m2"}


@functools.cache
def storage(dtype_name: str):
    """Numpy storage dtype of an NKI dtype name (cached: it is on every write)."""
    return D.storage_dtype(D.from_name(dtype_name))
