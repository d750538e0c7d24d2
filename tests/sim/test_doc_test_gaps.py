"""What the SDK 2.26 doc tests pass that we used to refuse: numpy scalar immediates, np.bool_
predicates, Python ``and`` between mask predicates, jitted kernels named ``test_*``."""

import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import NkiError, nki

RNG = np.random.default_rng(21)


def top8_replaced(a, imm):
    out = a.copy()
    idx = np.argsort(-a, axis=1, kind="stable")[:, :8]
    np.put_along_axis(out, idx, imm, axis=1)
    return out


@nki.jit(mode="simulation")
def k_replace(a, imm):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(out, nisa.nc_match_replace8(data=x, vals=nisa.max8(src=x), imm=imm))
    return out


@pytest.mark.parametrize("imm", [np.float32(-np.inf), np.float64(-7.5), np.int32(-3), -2.0])
def test_match_replace8_takes_numpy_scalar_immediates(imm):
    a = RNG.random((64, 96), dtype=np.float32)
    np.testing.assert_array_equal(k_replace(a, imm), top8_replaced(a, np.float32(imm)))


def test_match_replace8_refuses_a_bool_immediate():
    with pytest.raises(NkiError, match="imm must be a float32 scalar"):
        k_replace(RNG.random((64, 96), dtype=np.float32), np.True_)


@nki.jit(mode="simulation")
def k_and_mask(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n, m = a.shape
    ix, iy = nl.mgrid[0:n, 0:m]
    t = nl.zeros((n, m), dtype=a.dtype)
    t[ix, iy] = nl.load(a[ix, iy], mask=(ix < n // 2 and iy < m // 2))  # Python `and`
    nl.store(out, t)
    return out


@nki.jit(mode="simulation")
def k_and_chain(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n, m = a.shape
    ix, iy = nl.mgrid[0:n, 0:m]
    t = nl.zeros((n, m), dtype=a.dtype)
    both = ix >= 8 and iy >= 4 and ix < 40  # a chain, kept in a variable
    t[ix, iy] = nl.load(a[ix, iy], mask=both)
    nl.store(out, t)
    return out


def test_python_and_between_mask_predicates_is_their_conjunction():
    a = RNG.random((64, 96), dtype=np.float32)
    ref = np.zeros_like(a)
    ref[:32, :48] = a[:32, :48]
    np.testing.assert_array_equal(k_and_mask(a), ref)
    ref = np.zeros_like(a)
    ref[8:40, 4:] = a[8:40, 4:]
    np.testing.assert_array_equal(k_and_chain(a), ref)


@nki.jit(mode="simulation")
def k_if_on_indices(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(a.shape[0])[:, None]
    if ix < 3 and ix > 1:  # still not traceable
        nl.store(out, nl.load(a))
    return out


def test_if_on_index_predicates_is_still_refused():
    with pytest.raises(NkiError) as info:
        k_if_on_indices(np.zeros((8, 8), np.float32))
    assert info.value.code == "err_control_flow_condition_depending_on_arange"


@nki.jit(mode="simulation")
def k_select_bool(pred, a, b):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    dst = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=dst, predicate=nl.load(pred), on_true=nl.load(a), on_false=nl.load(b),
                       reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=r, reduce_op=nl.max)
    nl.store(out, dst)
    nl.store(red, r)
    return out, red


def test_select_reduce_takes_a_bool_predicate():
    a, b = RNG.random((32, 40), dtype=np.float32), RNG.random((32, 1), dtype=np.float32)
    p = RNG.random((32, 40)) > 0.5
    out, red = k_select_bool(p, a, b)
    ref = np.where(p, a, b)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(red, ref.max(axis=1, keepdims=True))


# ----------------------------------------------------------------------------- cumulative
@nki.jit(mode="simulation")
def k_cumulative(a, imm0, imm1, op0, op1, cmd, vector):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    i0 = nl.load(imm0) if vector else 0.5
    i1 = nl.load(imm1) if vector else 3.0
    dst = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(src=x, dst=dst, op0=op0, op1=op1, imm0=i0, imm1=i1,
                                  reduce_cmd=cmd)
    nl.store(out, dst)
    again = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)  # continues the accumulator
    nisa.tensor_scalar_cumulative(src=x, dst=again, op0=op0, op1=op1, imm0=i0,
                                  reduce_cmd=nisa.reduce_cmd.reduce)
    nl.store(out2, again)
    return out, out2


ACC = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum}


@pytest.mark.parametrize("op1", ["add", "multiply", "maximum", "minimum"])
@pytest.mark.parametrize("cmd", ["reset_reduce", "load_reduce"])
@pytest.mark.parametrize("vector", [False, True])
def test_tensor_scalar_cumulative_matches_numpy_accumulate(op1, cmd, vector):
    a = RNG.uniform(0.5, 1.5, (32, 24)).astype(np.float32)
    imm0 = RNG.uniform(0.0, 1.0, (32, 1)).astype(np.float32)
    imm1 = RNG.uniform(1.0, 2.0, (32, 1)).astype(np.float32)
    out, out2 = k_cumulative(a, imm0, imm1, nl.add, getattr(nl, op1), getattr(nisa.reduce_cmd, cmd),
                             vector)
    i0, i1 = (imm0, imm1) if vector else (np.float32(0.5), np.float32(3.0))
    f = ACC[op1]
    y = (a + i0).astype(np.float32)
    start = f(i1, y[:, :1]) if cmd == "load_reduce" else y[:, :1]
    ref = f.accumulate(np.concatenate([start, y[:, 1:]], axis=1), axis=1)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    ref2 = f.accumulate(np.concatenate([f(ref[:, -1:], y[:, :1]), y[:, 1:]], axis=1), axis=1)
    np.testing.assert_allclose(out2, ref2, rtol=1e-5)


def test_tensor_scalar_cumulative_refuses_load_reduce_without_imm1():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        dst = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(src=nl.load(a), dst=dst, op0=nl.add, op1=nl.add, imm0=0.0,
                                      reduce_cmd=nisa.reduce_cmd.load_reduce)
        nl.store(out, dst)
        return out
    with pytest.raises(NkiError, match="imm1"):
        k(np.ones((8, 8), np.float32))


@nki.jit(mode="simulation")
def k_optional_input(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    u = nl.load(b) if b else None  # presence test on a kernel argument
    nl.store(out, t if u is None else nl.add(t, u))
    return out


def test_truth_value_of_a_kernel_argument_tests_presence():
    a = RNG.random((16, 8), dtype=np.float32)
    np.testing.assert_allclose(k_optional_input(a, a), 2 * a)
    np.testing.assert_allclose(k_optional_input(a, None), a)
