"""Hypothesis property tests: core element-wise ops and reductions vs numpy on random shapes
(1..300 rows x 1..1024 columns, ragged partition tiles handled with masks)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nki_workbench.nki.language as nl
from nki_workbench import nki

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
shapes = st.tuples(st.integers(1, 300), st.integers(1, 1024))


def k_binary(a, b, op):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    n, m = a.shape
    i_f = nl.arange(m)[None, :]
    for p in nl.affine_range((n + 127) // 128):
        i_p = p * 128 + nl.arange(128)[:, None]
        x = nl.load(a[i_p, i_f], mask=(i_p < n))
        y = nl.load(b[i_p, i_f], mask=(i_p < n))
        z = getattr(nl, op)(x, y, mask=(i_p < n))
        nl.store(out[i_p, i_f], value=z, mask=(i_p < n))
    return out


def k_unary(a, op):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    n, m = a.shape
    i_f = nl.arange(m)[None, :]
    for p in nl.affine_range((n + 127) // 128):
        i_p = p * 128 + nl.arange(128)[:, None]
        x = nl.load(a[i_p, i_f], mask=(i_p < n))
        nl.store(out[i_p, i_f], value=getattr(nl, op)(x, mask=(i_p < n)), mask=(i_p < n))
    return out


def k_reduce(a, op):
    n, m = a.shape
    out = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    i_f = nl.arange(m)[None, :]
    for p in nl.affine_range((n + 127) // 128):
        i_p = p * 128 + nl.arange(128)[:, None]
        x = nl.load(a[i_p, i_f], mask=(i_p < n))
        r = getattr(nl, op)(x, axis=1, keepdims=True, mask=(i_p < n))
        nl.store(out[i_p, nl.arange(1)[None, :]], value=r, mask=(i_p < n))
    return out


def arrays(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-2, 2, size=shape).astype(np.float32)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**16), op=st.sampled_from(["add", "multiply",
                                                                      "subtract", "maximum"]))
def test_binary_ops_match_numpy(shape, seed, op):
    a, b = arrays(shape, seed), arrays(shape, seed + 1)
    ref = {"add": a + b, "multiply": a * b, "subtract": a - b, "maximum": np.maximum(a, b)}[op]
    np.testing.assert_allclose(nki.simulate_kernel(k_binary, a, b, op), ref, rtol=1e-6,
                               atol=1e-6)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_exp_matches_numpy(shape, seed):
    a = arrays(shape, seed)
    np.testing.assert_allclose(nki.simulate_kernel(k_unary, a, "exp"), np.exp(a), rtol=1e-6)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**16),
       op=st.sampled_from(["sum", "max", "min", "mean"]))
def test_reductions_match_numpy(shape, seed, op):
    a = arrays(shape, seed)
    ref = getattr(np, op)(a, axis=1, keepdims=True)
    np.testing.assert_allclose(nki.simulate_kernel(k_reduce, a, op), ref, rtol=1e-5,
                               atol=1e-4)
