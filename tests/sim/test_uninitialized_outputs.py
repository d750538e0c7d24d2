"""``SimParams(uninitialized="error")`` makes an output with unwritten elements an error, as the
README says; the default warns. Both executors (this module is parametrised by conftest)."""

import warnings

import numpy as np
import pytest

from nki_workbench import SimParams, UninitializedReadWarning, nki
from nki_workbench._src.errors import NkiError
from nki_workbench.nki import language as nl


@nki.jit
def half_written(a):
    out = nl.ndarray((256, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a))  # rows 128..255 are never written
    return out


A = np.ones((128, 8), np.float32)


def test_unwritten_output_elements_are_an_error_when_asked():
    with pytest.raises(NkiError, match=r"wb_uninitialized_read.*output 'out': 1024 of 2048 "
                                       "elements were never written") as info:
        nki.simulate_kernel(half_written, A, params=SimParams(uninitialized="error"))
    assert "test_uninitialized_outputs.py:16" in str(info.value)  # the output's declaration


def test_by_default_they_warn_and_hold_nan():
    with pytest.warns(UninitializedReadWarning, match="1024 of 2048 elements were never"):
        out = nki.simulate_kernel(half_written, A)
    np.testing.assert_array_equal(out[:128], A)
    assert np.isnan(out[128:]).all()


def test_a_whole_output_passes_under_error():
    @nki.jit
    def whole(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = nki.simulate_kernel(whole, A, params=SimParams(uninitialized="error"))
    np.testing.assert_array_equal(got, A)
