"""Subnormal floats: the interpreter keeps them (numpy, as NKI's simulator); XLA's CPU runtime
flushes them, so the compiled executor hands inputs holding them to the interpreter, saying so."""

import warnings

import ml_dtypes
import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import CompiledFallbackWarning, SimParams, nki
from nki_workbench._src.sim import jax_exec
from nki_workbench._src.sim.jax_static import subnormal_input


def add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


def mul(a, b):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), nl.load(b)))
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_subnormal_inputs_give_the_same_bits_on_both_executors(dtype, monkeypatch):
    monkeypatch.setattr(jax_exec, "_NOTICED", set())  # why: the notice is once per kernel
    tiny = np.finfo(np.float32).smallest_normal
    a = np.full((128, 8), tiny / 4, np.float32).astype(dtype)  # subnormal in both dtypes
    b = np.full((128, 8), tiny / 8, np.float32).astype(dtype)
    ref = nki.simulate_kernel(add, a, b, params=SimParams(backend="numpy"))
    assert ref.astype(np.float32)[0, 0] == np.float32(tiny / 4) + np.float32(tiny / 8)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = nki.simulate_kernel(add, a, b, params=SimParams(backend="jax"))
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))
    assert any(issubclass(w.category, CompiledFallbackWarning) and "subnormal" in str(w.message)
               for w in rec)


def test_detection_reads_bits_not_values():
    k = nki.trace_kernel(add, np.ones((128, 8), np.float32), np.ones((128, 8), np.float32)).kernel
    normal = np.full((128, 8), 1.0, np.float32)
    sub = normal.copy()
    sub[5, 3] = np.float32(1e-40)
    neg = normal.copy()
    neg[0, 0] = -np.float32(1e-45)
    assert subnormal_input(k, [normal, normal]) is None
    assert subnormal_input(k, [normal, sub]) == k.params[1].name
    assert subnormal_input(k, [neg, normal]) == k.params[0].name
    zeros = np.zeros((128, 8), np.float32)
    zeros[1, 1] = -0.0
    assert subnormal_input(k, [zeros, normal]) is None  # +-0 are not subnormal


def test_products_of_normal_inputs_keep_their_subnormal_result_in_the_interpreter():
    a = np.full((128, 8), 1e-20, np.float32)
    out = nki.simulate_kernel(mul, a, a, params=SimParams(backend="numpy"))
    assert out[0, 0] == np.float32(1e-20) * np.float32(1e-20) != 0  # 1e-40: subnormal
