"""Subnormal floats: the interpreter keeps them (numpy, as NKI's simulator); XLA's CPU runtime
flushes them (no XLA option changes that: ``--xla_cpu_ftz=false`` only drops an LLVM attribute,
the CPU client still sets FTZ/DAZ around every execution; measured with jax 0.10.2). So the
compiled executor hands inputs holding them to the interpreter, saying so; a subnormal produced
inside a compiled program is 0 by default, and with ``numerics_jax.CHECK_FLUSHES``
(``NKI_WORKBENCH_CHECK_SUBNORMALS=1``) the program flags it and the interpreter re-runs."""

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki_workbench.nki.language as nl
from nki_workbench import CompiledFallbackWarning, SimParams, nki
from nki_workbench._src.semantics import numerics_jax
from nki_workbench._src.sim import jax_exec
from nki_workbench._src.sim.jax_static import _MAGNITUDE_BITS, _has_subnormal, subnormal_input


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


# ----------------------------------------------------------------------------- produced inside
def cancel_then_scale(a, b):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.add(nl.load(a), nl.load(b)), 1e30))  # 1e-39 * 1e30
    return out


def legit_zeros(a, b):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(out, nl.add(nl.subtract(x, x), nl.multiply(nl.load(b), 0.0)))  # exact zeros
    return out


def _interpreter_runs(monkeypatch):
    calls = []
    original = jax_exec._Compiled.interpreter

    def counted(self):
        calls.append(self.kernel.name)
        return original(self)
    monkeypatch.setattr(jax_exec._Compiled, "interpreter", counted)
    return calls


NORMAL_PAIRS = {
    "mul": (np.full((128, 8), 1e-20, np.float32), np.full((128, 8), 1e-20, np.float32)),
    "cancel_then_scale": (np.full((128, 8), 3e-38, np.float32),
                          np.full((128, 8), -2.9e-38, np.float32)),
}
KERNELS = {"mul": mul, "cancel_then_scale": cancel_then_scale}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_by_default_a_subnormal_produced_inside_the_compiled_program_is_flushed(name,
                                                                                monkeypatch):
    monkeypatch.setattr(numerics_jax, "CHECK_FLUSHES", False)
    a, b = NORMAL_PAIRS[name]
    assert subnormal_input(nki.trace_kernel(KERNELS[name], a, b).kernel, [a, b]) is None
    ref = nki.simulate_kernel(KERNELS[name], a, b, params=SimParams(backend="numpy"))
    out = nki.simulate_kernel(KERNELS[name], a, b, params=SimParams(backend="jax"))
    assert ref[0, 0] != 0 and out[0, 0] == 0  # the documented difference (docs/semantics.md)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_checked_programs_rerun_in_the_interpreter_and_keep_the_subnormal(name, monkeypatch):
    monkeypatch.setattr(numerics_jax, "CHECK_FLUSHES", True)
    calls = _interpreter_runs(monkeypatch)
    a, b = (x.copy() for x in NORMAL_PAIRS[name])  # why: new arrays, not the repeat fast path
    ref = nki.simulate_kernel(KERNELS[name], a, b, params=SimParams(backend="numpy"))
    out = nki.simulate_kernel(KERNELS[name], a, b, params=SimParams(backend="jax"))
    np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32))
    assert ref[0, 0] != 0 and calls  # the compiled program's flag sent it to the interpreter
    if name == "mul":
        assert ref[0, 0] == np.float32(1e-20) * np.float32(1e-20)
    else:
        assert ref[0, 0] == (np.float32(3e-38) + np.float32(-2.9e-38)) * np.float32(1e30)


def test_checked_programs_stay_compiled_for_exact_zeros_and_normal_values(monkeypatch):
    monkeypatch.setattr(numerics_jax, "CHECK_FLUSHES", True)
    calls = _interpreter_runs(monkeypatch)
    a = np.random.default_rng(1).uniform(-1, 1, (128, 8)).astype(np.float32)
    out = nki.simulate_kernel(legit_zeros, a, a, params=SimParams(backend="jax"))
    np.testing.assert_array_equal(out, np.zeros_like(a))
    out = nki.simulate_kernel(mul, a, a, params=SimParams(backend="jax"))
    np.testing.assert_array_equal(out, a * a)
    assert calls == []  # no flag: both ran compiled


# ----------------------------------------------------------------------------- big arrays
def big_add(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :],
                 nl.add(nl.load(a[i * 128:(i + 1) * 128, :]), nl.load(b[i * 128:(i + 1) * 128, :])))
    return out


def big_mul(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :],
                 nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]),
                             nl.load(b[i * 128:(i + 1) * 128, :])))
    return out


BIG = (4096, 2048)  # why: 8M elements: XLA splits each fusion over its intra-op threads


def _big(dtype, lo, hi, seed):
    """``BIG`` values of magnitude in [lo, hi) with random signs, as ``dtype``."""
    rng = np.random.default_rng(seed)
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), BIG)).astype(np.float32)
    return (mag * rng.choice(np.float32([-1, 1]), BIG)).astype(dtype)


def _numpy_ref(op, a, b, dtype):
    """The exact float32 result of ``a op b`` rounded to ``dtype`` (numpy keeps subnormals)."""
    r = np.add(a.astype(np.float32), b.astype(np.float32)) if op == "add" else \
        np.multiply(a.astype(np.float32), b.astype(np.float32))
    return r.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("op", ["add", "multiply"])
def test_big_subnormal_inputs_are_kept_on_both_executors(op, dtype, monkeypatch):
    monkeypatch.setattr(jax_exec, "_NOTICED", set())
    tiny = float(np.finfo(np.float32).smallest_normal)
    a = _big(dtype, tiny / 2**6, tiny, 1)  # every element subnormal (bf16: 7 bits, 2^-133)
    b = _big(dtype, tiny / 2**6, tiny, 2) if op == "add" else _big(dtype, 0.5, 4, 2)
    want = _numpy_ref(op, a, b, dtype)
    assert np.count_nonzero(want.astype(np.float32)) > 0.9 * want.size
    kern = big_add if op == "add" else big_mul
    for backend in ("numpy", "jax"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompiledFallbackWarning)
            out = nki.simulate_kernel(kern, a, b, params=SimParams(backend=backend))
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8), err_msg=backend)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("op", ["add", "multiply"])
def test_big_subnormal_results_of_normal_inputs_are_kept_when_checked(op, dtype, monkeypatch):
    monkeypatch.setattr(numerics_jax, "CHECK_FLUSHES", True)
    calls = _interpreter_runs(monkeypatch)
    tiny = float(np.finfo(np.float32).smallest_normal)
    if op == "add":  # normal operands 2^-7 apart in magnitude near 2^-125: subnormal sums
        a = _big(dtype, 2 * tiny, 4 * tiny, 3)
        b = (-a.astype(np.float32) * np.float32(1 - 2**-7)).astype(dtype)
    else:  # products of normal operands below 2^-126
        a, b = _big(dtype, 1e-20, 1e-19, 3), _big(dtype, 1e-20, 1e-19, 4)
    assert subnormal_input(nki.trace_kernel(big_add, a, b).kernel, [a, b]) is None
    want = _numpy_ref(op, a, b, dtype)
    sub = np.abs(want.astype(np.float32)) < tiny
    assert np.count_nonzero(want.astype(np.float32)[sub]) > 0.1 * want.size  # subnormals kept
    kern = big_add if op == "add" else big_mul
    for backend in ("numpy", "jax"):
        out = nki.simulate_kernel(kern, a, b, params=SimParams(backend=backend))
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8), err_msg=backend)
    assert calls  # the compiled program flagged its flushed results; the interpreter re-ran


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_the_subnormal_scan_finds_one_anywhere_and_nothing_else(dtype):
    bits = _MAGNITUDE_BITS[np.dtype(dtype)]
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    clean = np.array([0.0, -0.0, tiny, -tiny, np.inf, -np.inf, np.nan, 1.0], dtype)
    big = np.resize(clean, 3 * (1 << 16) + 5)  # why: past several scan chunks, a ragged tail
    assert not _has_subnormal(big, *bits)
    for where in (0, (1 << 16) - 1, 1 << 16, big.size - 1):
        for v in (tiny / 2, -tiny / 2, float(ml_dtypes.finfo(dtype).smallest_subnormal)):
            x = big.copy()
            x[where] = v
            assert _has_subnormal(x, *bits), (where, v)
    strided = big.copy()
    strided[3 * 7] = tiny / 4
    assert _has_subnormal(strided[::3], *bits)  # a non-contiguous input
    assert not _has_subnormal(strided[1::3], *bits)


def _reference_has_subnormal(x) -> bool:
    wide = np.abs(x.astype(np.float64))
    return bool(np.any((wide > 0) & (wide < float(ml_dtypes.finfo(x.dtype).smallest_normal))))


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16]),
       size=st.integers(1, 3 * (1 << 16) + 7), seed=st.integers(0, 2**32 - 1),
       zeros=st.sampled_from(["none", "+0", "-0", "both"]),
       plant=st.sampled_from(["none", "+sub", "-sub"]))
def test_the_two_reduction_scan_agrees_with_float_comparisons(dtype, size, seed, zeros, plant):
    """Random bit patterns (no subnormals unless planted), zeros of either sign anywhere: the
    integer scan (fast path without zeros, exact path with) says what float64 comparisons say."""
    rng = np.random.default_rng(seed)
    kind, _, largest = _MAGNITUDE_BITS[np.dtype(dtype)]
    bits = rng.integers(0, np.iinfo(kind).max, size, dtype=kind, endpoint=True)
    sign = kind(1 << (8 * np.dtype(kind).itemsize - 1))
    exponent = (sign - 1) & ~kind(largest)
    normal = (bits & exponent) != 0
    bits[~normal] |= kind(largest + 1)  # why: random patterns, moved off the subnormal range
    x = bits.view(dtype)
    if zeros != "none":
        where = rng.integers(0, size, max(1, size // 1000))
        x[where] = -0.0 if zeros == "-0" else 0.0
        if zeros == "both":
            x[where[::2]] = -0.0
    assert not _has_subnormal(x, *_MAGNITUDE_BITS[np.dtype(dtype)])
    if plant != "none":
        i = int(rng.integers(0, size))
        pattern = kind(rng.integers(1, largest, endpoint=True))
        x.view(kind)[i] = pattern | (sign if plant == "-sub" else kind(0))
    assert _has_subnormal(x, *_MAGNITUDE_BITS[np.dtype(dtype)]) == _reference_has_subnormal(x)
    assert _reference_has_subnormal(x) == (plant != "none")
