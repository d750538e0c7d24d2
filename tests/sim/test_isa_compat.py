"""Compatibility points found by running the SDK's nki.isa doc tests against the workbench.

Each test restates, in our own kernels, one thing NKI accepts that the workbench had to learn
(or one numeric behaviour we keep on purpose where an upstream check relies on looser
simulation).
"""

import ml_dtypes
import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import nki


def _top8_kernel(x):
    out = nl.ndarray((x.shape[0], 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nisa.max8(src=t))
    return out


@pytest.mark.parametrize("flag", [True, False])
def test_jit_accepts_kernel_return_flag_in_simulation(flag):
    # NKI's jit takes kernel_return=; the convention itself is read off the kernel.
    x = np.random.default_rng(3).standard_normal((16, 40)).astype(np.float32)
    k = nki.jit(_top8_kernel, mode="simulation", kernel_return=flag)
    got = k(x)
    want = -np.sort(-x, axis=1)[:, :8]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_kernel_return_false_with_legacy_output_argument():
    def double_into(src, dst):
        nl.store(dst, value=nl.multiply(nl.load(src), 2.0))

    x = np.random.default_rng(4).random((8, 24)).astype(np.float32)
    y = np.zeros_like(x)
    nki.simulate_kernel(nki.jit(double_into, kernel_return=False), x, y)
    np.testing.assert_allclose(y, 2.0 * x, atol=1e-6)


def test_trace_decorator_accepts_kernel_return():
    x = np.random.default_rng(5).random((4, 32)).astype(np.float32)
    got = nki.simulate_kernel(nki.trace(_top8_kernel, kernel_return=True), x)
    np.testing.assert_allclose(got, -np.sort(-x, axis=1)[:, :8], atol=1e-6)


def test_kernel_return_must_be_a_bool():
    with pytest.raises(TypeError, match="kernel_return must be True or False"):
        nki.jit(_top8_kernel, mode="simulation", kernel_return="yes")(
            np.zeros((2, 8), np.float32))


def test_activation_with_bf16_dtype_rounds_before_a_float32_store():
    # Kept on purpose: an upstream doc test compares this against float32 numpy with
    # np.allclose defaults, which only a simulator that skips the bf16 rounding passes.
    def sq_affine(x, bias):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        r = nisa.activation(op=np.square, data=nl.load(x), bias=nl.load(bias), scale=3.0,
                            dtype=nl.bfloat16)
        nl.store(out, r)
        return out

    rng = np.random.default_rng(6)
    x = rng.random((32, 64)).astype(np.float32)
    b = rng.random((32, 1)).astype(np.float32)
    got = nki.jit(sq_affine, mode="simulation")(x, b)
    exact = np.square(3.0 * x + b).astype(np.float32)
    np.testing.assert_array_equal(got, exact.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert not np.allclose(got, exact)
