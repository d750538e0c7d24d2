"""Directly allocated public-style kernels against numpy, on both executors."""

import warnings

import kernels_allocated as K
import numpy as np
import pytest

import nki_workbench.nki.compiler as ncc
import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import CompiledFallbackWarning, NkiError, nki

RNG = np.random.default_rng(7)


def rmsnorm_matmul(x, w, eps=1e-6):
    x = x.astype(np.float64)
    return (x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps)) @ w.astype(np.float64)


@pytest.mark.parametrize("rows,k", [(128, 256), (384, 512)])
def test_allocated_rmsnorm_matmul_runs_and_matches_numpy(rows, k):
    x = RNG.random((rows, k), dtype=np.float32)
    w = RNG.random((k, 512), dtype=np.float32) / k
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*no `neuronx-cc` compiler")
        # its rsqrt activation is range-checked on the data: under jax it falls back (a notice)
        warnings.filterwarnings("ignore", category=CompiledFallbackWarning)
        got = K.allocated_rmsnorm_matmul(x, w)
    np.testing.assert_allclose(got, rmsnorm_matmul(x, w), rtol=1e-4, atol=1e-4)


def psum_accumulate(a, b):
    out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
    for m in nl.affine_range(a.shape[0] // 128):
        ps[...] += nisa.nc_matmul(nl.load(a[m * 128:(m + 1) * 128, :]),
                                  nl.load(b[m * 128:(m + 1) * 128, :]))
    nl.store(out, value=nl.copy(ps, dtype=np.float32))
    return out


def test_matmul_accumulation_into_a_fresh_psum_tile_starts_from_zero():
    a, b = RNG.random((384, 128), dtype=np.float32), RNG.random((384, 512), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = nki.simulate_kernel(nki.jit(psum_accumulate), a, b)
    np.testing.assert_allclose(got, a.T @ b, rtol=1e-4)


def vector_accumulate(a):
    out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
    ps[...] += nl.load(a)  # not a matmul: an unwritten PSUM tile stays unwritten
    nl.store(out, value=nl.copy(ps, dtype=np.float32))
    return out


def test_non_matmul_accumulation_into_unwritten_psum_still_reads_uninitialised():
    from nki_workbench import UninitializedReadWarning
    with pytest.warns(UninitializedReadWarning):
        got = nki.simulate_kernel(nki.jit(vector_accumulate), np.ones((128, 512), np.float32))
    assert np.isnan(got).all()


def declared_auto_in_direct(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    u = nl.zeros((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    t[...] = nl.load(a)
    u[...] = nl.add(t, u)
    nl.store(out, value=u)
    return out


def test_declared_auto_tensor_next_to_direct_ones_is_refused():
    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(nki.jit(declared_auto_in_direct), np.ones((128, 512), np.float32))
    assert info.value.code == "wb_alloc_mixed_auto_and_direct"
    assert "'u'" in str(info.value)
