"""Kernels that hit Python's own limits while being traced fail with an NkiError naming the
kernel line, not with a raw RecursionError / OverflowError / ValueError from deep inside."""

import numpy as np
import pytest

from nki_workbench import nki
from nki_workbench._src.errors import NkiError
from nki_workbench._src.trace import context as C
from nki_workbench.nki import language as nl

A = np.zeros((128, 4), np.float32)


def _grow(t, n):
    return _grow(nl.add(t, 1.0), n + 1)  # never stops


def test_unbounded_recursion_names_the_kernel_line():
    @nki.jit
    def recursive(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, _grow(nl.load(a), 0))
        return out
    with pytest.raises(NkiError, match="recursed too deeply") as info:
        nki.simulate_kernel(recursive, A)
    assert "test_trace_limits.py:16" in str(info.value)  # the recursive call's line
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert C.current() is None


@pytest.mark.parametrize("value", [10 ** 5000, -(2 ** 65), 2 ** 64],
                         ids=["10^5000", "-2^65", "2^64"])
def test_integer_constants_beyond_64_bits_are_refused(value):
    @nki.jit
    def huge(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), value))
        return out
    with pytest.raises(NkiError, match=r"integer constant of \d+ bits") as info:
        nki.simulate_kernel(huge, A)
    assert "test_trace_limits.py:" in str(info.value)


def test_a_64_bit_constant_is_still_accepted():
    @nki.jit
    def big(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), 2 ** 40))
        return out
    np.testing.assert_allclose(nki.simulate_kernel(big, A), A + np.float32(2 ** 40))
