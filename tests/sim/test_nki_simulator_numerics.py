"""SimParams(numerics="nki-simulator"): NKI's own simulator's numerics, on both executors, next to
the default hardware-like rounding."""

import ml_dtypes
import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import NkiError, nki
from nki_workbench._src.options import NUMERICS_ENV, SimParams

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(31)
NKI_SIM = SimParams(numerics="nki-simulator")


def act_bf16(b, c):
    out = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
    r = nisa.activation(op=np.square, data=nl.load(b), bias=nl.load(c), scale=2.0,
                        dtype=nl.bfloat16)
    nl.store(out, r)
    return out


def test_low_precision_tiles_stay_float32_only_when_asked():
    b = RNG.random((128, 64), dtype=np.float32) * 100
    c = RNG.random((128, 1), dtype=np.float32) * 100
    golden = np.square(b * 2 + c)
    k = nki.jit(act_bf16)
    nki_sim = nki.simulate_kernel(k, b, c, params=NKI_SIM)
    np.testing.assert_allclose(nki_sim, golden, rtol=1e-6)  # NKI's own doc-test tolerance holds
    hw = nki.simulate_kernel(k, b, c)
    np.testing.assert_array_equal(hw, golden.astype(BF16).astype(np.float32))  # rounded tile
    assert not np.allclose(hw, golden, rtol=1e-5, atol=0)


def bf16_out(a):
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.multiply(nl.load(a), 3.0, dtype=nl.bfloat16)
    u = nl.add(t, 1.0, dtype=nl.bfloat16)
    nl.store(out, u)
    return out


def test_hbm_tensors_keep_their_dtype_under_nki_simulator_numerics():
    a = RNG.random((64, 32), dtype=np.float32)
    got = nki.simulate_kernel(nki.jit(bf16_out), a, params=NKI_SIM)
    assert got.dtype == BF16
    # one rounding (at the store) instead of one per instruction
    np.testing.assert_array_equal(got, (a * 3 + 1).astype(BF16))
    hw = nki.simulate_kernel(nki.jit(bf16_out), a)
    np.testing.assert_array_equal(hw, ((a * 3).astype(BF16).astype(np.float32) + 1).astype(BF16))


def dropout(a, prob):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.dropout(nl.load(a), nl.load(prob)))
    return out


def test_dropout_probability_of_one_or_more_drops_everything_on_hardware_numerics():
    a = RNG.random((128, 64), dtype=np.float32) + 1
    prob = np.full((128, 1), 1.0, np.float32)
    prob[64:] = 37.5  # beyond 1: still "always"
    np.testing.assert_array_equal(nki.simulate_kernel(nki.jit(dropout), a, prob), 0)
    zero = np.zeros((128, 1), np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(nki.jit(dropout), a, zero), a)


def test_nki_simulator_numerics_keep_every_element_in_dropout():
    a = RNG.random((128, 64), dtype=np.float32) + 1
    prob = np.full((128, 1), 0.5, np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(nki.jit(dropout), a, prob,
                                                      params=NKI_SIM), a)


def test_numerics_from_the_environment_and_bad_values(monkeypatch):
    b = RNG.random((128, 64), dtype=np.float32) * 100
    c = RNG.random((128, 1), dtype=np.float32) * 100
    monkeypatch.setenv(NUMERICS_ENV, "nki-simulator")
    got = nki.simulate_kernel(nki.jit(act_bf16), b, c)
    np.testing.assert_allclose(got, np.square(b * 2 + c), rtol=1e-6)
    hw = nki.simulate_kernel(nki.jit(act_bf16), b, c, params=SimParams(numerics="hardware"))
    assert not np.allclose(hw, np.square(b * 2 + c), rtol=1e-5, atol=0)
    monkeypatch.setenv(NUMERICS_ENV, "fast")
    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(nki.jit(act_bf16), b, c)
    assert info.value.code == "wb_bad_numerics"
    with pytest.raises(ValueError, match="numerics"):
        SimParams(numerics="fp64")
