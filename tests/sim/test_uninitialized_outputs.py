"""``SimParams(uninitialized="error")`` makes an output with unwritten elements an error, as the
README says; the default warns. Both executors (this module is parametrised by conftest)."""

import warnings

import numpy as np
import pytest

from nki_workbench import SimParams, UninitializedReadWarning, nki
from nki_workbench._src.errors import NkiError
from nki_workbench._src.sim.analysis import fully_written_outputs
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
    decl = next(n for n, line in enumerate(open(__file__), 1)
                if "rows 128..255 are never written" in line) - 1  # (the line above that store)
    assert f"test_uninitialized_outputs.py:{decl}" in str(info.value)  # the output's declaration


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


# ---------------------------------------------------------------------------------------------
# Outputs proven written whole (sim/analysis.fully_written_outputs) are allocated without their
# NaN fill and written-mask; these pin that the proof is sound and changes no value or warning.
def _row_tiles(n_tiles, n_written):
    @nki.jit
    def rows(a):
        out = nl.ndarray((n_tiles * 128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(n_written):
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(nl.load(a), float(i)))
        return out
    return rows


@pytest.mark.parametrize("n_tiles,n_written", [(1, 1), (3, 3), (3, 2), (4, 1)])
def test_row_tiles_are_covered_exactly_when_every_tile_is_stored(n_tiles, n_written):
    kernel = _row_tiles(n_tiles, n_written)
    traced = nki.trace_kernel(kernel, A).kernel
    assert fully_written_outputs(traced) == ({"out"} if n_written == n_tiles else frozenset())
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = nki.simulate_kernel(kernel, A)
    for i in range(n_written):
        np.testing.assert_array_equal(out[i * 128:(i + 1) * 128], A + i)
    assert np.isnan(out[n_written * 128:]).all()
    missing = (n_tiles - n_written) * 128 * 8
    msgs = [str(w.message) for w in rec if issubclass(w.category, UninitializedReadWarning)]
    want = f"output 'out': {missing} of {n_tiles * 1024} elements were never written"
    assert [want in m for m in msgs] == ([True] if missing else [])


@nki.jit
def stored_from_half_a_tile(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    t[0:64, :] = nl.load(a[0:64, :])  # rows 64..127 of the tile are never written
    nl.store(out, value=t)
    return out


def test_a_covered_output_still_reports_what_came_from_unwritten_tiles():
    traced = nki.trace_kernel(stored_from_half_a_tile, A).kernel
    assert fully_written_outputs(traced) == {"out"}  # every element is stored ...
    with pytest.warns(UninitializedReadWarning) as rec:
        out = nki.simulate_kernel(stored_from_half_a_tile, A)
    np.testing.assert_array_equal(out[:64], A[:64])
    assert np.isnan(out[64:]).all()  # ... but half of them are poison from the tile
    assert any("output 'out': 512 of 1024 elements were never written" in str(w.message)
               for w in rec)
    with pytest.raises(NkiError, match="wb_uninitialized_read"):
        nki.simulate_kernel(stored_from_half_a_tile, A, params=SimParams(uninitialized="error"))


@nki.jit
def stored_then_read_back(a):
    out = nl.ndarray((256, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], value=nl.load(a))
    nl.store(out[128:256, :], value=nl.load(out[0:128, :]))
    return out


def test_an_output_the_kernel_reads_is_not_covered_and_runs_as_before():
    traced = nki.trace_kernel(stored_then_read_back, A).kernel
    assert fully_written_outputs(traced) == frozenset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = nki.simulate_kernel(stored_then_read_back, A)
    np.testing.assert_array_equal(out, np.concatenate([A, A]))


def test_the_write_bound_keeps_the_proof_cheap_and_sound():
    traced = nki.trace_kernel(_row_tiles(3, 3), A).kernel
    assert fully_written_outputs(traced, max_writes=3) == {"out"}
    assert fully_written_outputs(traced, max_writes=2) == frozenset()  # not enumerated: no proof
