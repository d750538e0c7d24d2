"""Unwritten memory through computations (README "No silent zeros"), on both executors.

Element-wise and partition-local ops carry "never written" along to their results, so the
ragged-tile idiom (unmasked math on a partially loaded tile, then a masked store) is clean; an
op mixing partitions (matmul, transpose) reads the unwritten lanes: a warning naming the tile
and the line. ``uninitialized="error"`` is stricter: every read of an unwritten element is an
error, the element-wise ones of the ragged idiom included."""

import warnings

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import (
    CompiledFallbackWarning,
    NkiError,
    SimParams,
    UninitializedReadWarning,
    nki,
)

EXECUTORS = ("numpy", "jax")
A = np.random.default_rng(5).uniform(-1, 1, (128, 64)).astype(np.float32)
ROWS = 100


def ragged(a):
    out = nl.ndarray((ROWS, 64), nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_p < ROWS))
    s = nl.multiply(nl.exp(t), nl.sum(t, axis=1, keepdims=True))  # unmasked, partition-local
    nl.store(out[i_p, i_f], s, mask=(i_p < ROWS))
    return out


def mixed_transpose(a):
    out = nl.ndarray((64, 128), nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_p < ROWS))
    nl.store(out, nl.transpose(t))  # MIXES
    return out


def mixed_matmul(a):
    out = nl.ndarray((64, 64), nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_p < ROWS))
    nl.store(out, nl.matmul(t, t, transpose_x=True))  # MIXES
    return out


def _line(marker):
    src = open(__file__).read().splitlines()
    return [k + 1 for k, text in enumerate(src) if marker in text]


@pytest.mark.parametrize("backend", EXECUTORS)
def test_the_ragged_tile_idiom_is_clean(backend):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UninitializedReadWarning)
        warnings.simplefilter("ignore", CompiledFallbackWarning)
        out = nki.simulate_kernel(ragged, A, params=SimParams(backend=backend))
    a = A[:ROWS]
    np.testing.assert_allclose(out, np.exp(a) * a.sum(1, keepdims=True), rtol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompiledFallbackWarning)
        with pytest.raises(NkiError, match=r"wb_uninitialized_read\] 'exp' read 1792 element"):
            nki.simulate_kernel(ragged, A, params=SimParams(backend=backend,
                                                           uninitialized="error"))


@pytest.mark.parametrize("backend", EXECUTORS)
@pytest.mark.parametrize("kernel", [mixed_transpose, mixed_matmul], ids=["transpose", "matmul"])
def test_an_op_mixing_partitions_reads_the_unwritten_lanes(kernel, backend):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = nki.simulate_kernel(kernel, A, params=SimParams(backend=backend))
    msgs = [str(w.message) for w in rec if issubclass(w.category, UninitializedReadWarning)]
    lines = _line("# MIXES")
    assert msgs and "'t'" in msgs[0], [str(w.message) for w in rec]
    assert any(f"test_unwritten_taint.py:{n}" in msgs[0] for n in lines), msgs[0]
    assert np.isnan(out).any()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompiledFallbackWarning)
        with pytest.raises(NkiError) as info:
            nki.simulate_kernel(kernel, A, params=SimParams(backend=backend,
                                                           uninitialized="error"))
    assert info.value.code == "wb_uninitialized_read"
