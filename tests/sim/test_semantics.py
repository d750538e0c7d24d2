"""Simulator semantics: poisoning of unwritten memory, races in affine loops, dtypes, RNG."""

import warnings

import ml_dtypes
import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import (
    LoopCarriedDependencyWarning,
    NkiError,
    SimParams,
    UninitializedReadWarning,
    nki,
)

A = np.arange(128 * 64, dtype=np.float32).reshape(128, 64) / 100


def k_partial_tile(a):
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32)
    t[:, 0:32] = nl.load(a[:, 0:32])
    nl.store(out, nl.sum(t, axis=1, keepdims=True))  # reads 32 never-written columns
    return out


def test_uninitialised_read_warns_with_tensor_and_line_and_poisons():
    with pytest.warns(UninitializedReadWarning) as rec:
        out = nki.simulate_kernel(k_partial_tile, A)
    msg = str(rec[0].message)
    assert "'t'" in msg and "test_semantics.py:" in msg and "128 of 128" in msg
    assert np.isnan(out).all()  # never a silent zero


def test_uninitialised_read_error_mode():
    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(k_partial_tile, A, params=SimParams(uninitialized="error"))
    assert info.value.code == "wb_uninitialized_read"
    assert "test_semantics.py:" in str(info.value)


def test_masked_out_lanes_are_poison_not_zero():
    def k(a):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        t = nl.load(a[i_p, i_f], mask=(i_p < 100))
        nl.store(out, nl.exp(t))  # stores the lanes the load skipped
        return out

    with pytest.warns(UninitializedReadWarning, match="1792 of 8192"):
        out = nki.simulate_kernel(k, A)
    np.testing.assert_allclose(out[:100], np.exp(A[:100]), rtol=1e-6)
    assert np.isnan(out[100:]).all()


def test_unwritten_output_elements_warn_and_are_nan():
    def k(a):
        out = nl.ndarray((256, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0:128, :], nl.load(a))
        return out

    with pytest.warns(UninitializedReadWarning, match="8192 of 16384"):
        out = nki.simulate_kernel(k, A)
    assert np.isnan(out[128:]).all()


def test_int_poison_is_recognisable():
    def k(a):
        out = nl.ndarray((128, 4), nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 4), nl.int32)
        nl.store(out, t)
        return out

    with pytest.warns(UninitializedReadWarning):
        out = nki.simulate_kernel(k, A)
    assert (out == np.iinfo(np.int32).min).all()


def k_racy(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), nl.float32)
    for i in nl.affine_range(4):
        acc[...] = nl.add(acc, nl.load(a))  # carried dependency
    nl.store(out, acc)
    return out


def test_loop_carried_dependency_in_affine_range_is_reported():
    with pytest.warns(LoopCarriedDependencyWarning) as rec:
        nki.simulate_kernel(k_racy, A)
    msg = str(rec[0].message)
    assert "'acc'" in msg and "sequential_range" in msg and "test_semantics.py:" in msg


def test_sequential_range_has_no_race_warning():
    def k(a):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 64), nl.float32)
        for i in nl.sequential_range(4):
            acc[...] = nl.add(acc, nl.load(a))
        nl.store(out, acc)
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nki.simulate_kernel(k, A), 4 * A, rtol=1e-6)


def test_psum_accumulation_is_not_a_race():
    def k(a):
        out = nl.ndarray((64, 64), nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((64, 64), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(2):
            x = nl.load(a[i * 64:(i + 1) * 64, :])
            acc += nl.matmul(x, x, transpose_x=True)
        nl.store(out, nl.copy(acc))
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nki.simulate_kernel(k, A), A.T @ A, rtol=1e-4)


def test_shuffled_affine_order_exposes_the_race():
    def k(a):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        last = nl.zeros((128, 8), nl.float32)
        for i in nl.affine_range(8):
            last[...] = nl.load(a[:, nl.ds(i * 8, 8)])  # the last iteration wins
        nl.store(out, last)
        return out

    warnings.simplefilter("ignore")
    in_order = nki.simulate_kernel(k, A)
    np.testing.assert_allclose(in_order, A[:, 56:64])
    shuffled = [nki.simulate_kernel(k, A, params=SimParams(shuffle_affine=True, seed=s))
                for s in range(5)]
    assert any(not np.allclose(r, in_order) for r in shuffled)


def test_bf16_rounding_on_store_and_fp32_math():
    def k(a, b):
        out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

    a = np.full((128, 4), 1.0, ml_dtypes.bfloat16)
    b = np.full((128, 4), 2 ** -9, ml_dtypes.bfloat16)  # below half an ulp of 1.0 in bf16
    out = nki.simulate_kernel(k, a, b)
    assert out.dtype == ml_dtypes.bfloat16 and (out.astype(np.float32) == 1.0).all()


def test_type_promotion_of_operands():
    def k(a, b):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        s = nl.add(nl.load(a), nl.load(b))  # (float16, bfloat16) -> float32
        assert s.dtype == np.float32
        i = nl.multiply(nl.load(b), 1.5)  # bf16 tile with a Python float -> float32
        assert i.dtype == np.float32
        nl.store(out, s)
        return out

    a = np.ones((128, 4), np.float16)
    b = np.ones((128, 4), ml_dtypes.bfloat16)
    np.testing.assert_array_equal(nki.simulate_kernel(k, a, b), np.full((128, 4), 2.0))


def test_rand_and_dropout_are_seeded():
    def k(a):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.random_seed(7)
        r = nl.rand((128, 64))
        d = nl.dropout(nl.load(a), rate=0.5)
        nl.store(out, nl.add(r, d))
        return out

    a = np.ones((128, 64), np.float32)
    r1, r2 = nki.simulate_kernel(k, a), nki.simulate_kernel(k, a)
    np.testing.assert_array_equal(r1, r2)
    frac = ((r1 - np.floor(r1)) == r1).mean()  # entries where dropout zeroed the 1.0
    assert 0.4 < frac < 0.6


def test_program_ids_and_num_programs():
    def k(a):
        out = nl.ndarray((2, 3, 128, 1), nl.float32, buffer=nl.shared_hbm)
        assert nl.num_programs() == 6 and nl.num_programs(1) == 3 and nl.program_ndim() == 2
        t = nl.full((128, 1), 1.0, nl.float32)
        p0, p1 = nl.program_id(0), nl.program_id(1)
        nl.store(out[p0, p1], nl.multiply(t, 1.0))
        return out

    out = nki.simulate_kernel(nki.jit(k)[2, 3], A)
    assert out.shape == (2, 3, 128, 1) and (out == 1).all()


def test_all_reduce_across_programs():
    def k(a):
        out = nl.ndarray((4, 128, 8), nl.float32, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        t = nl.load(a[pid])
        s = nl.all_reduce(t, op=np.add, program_axes=0)
        nl.store(out[pid], s)
        return out

    a = np.random.default_rng(0).random((4, 128, 8), dtype=np.float32)
    out = nki.simulate_kernel(nki.jit(k)[4], a)
    for p in range(4):
        np.testing.assert_allclose(out[p], a.sum(0), rtol=1e-5)
    ir = nki.trace_kernel(nki.jit(k)[4], a)
    assert "has_collectives=True" in ir.text


def test_gather_flattened_and_atomic_rmw():
    def k(data, idx, rows):
        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        g = nl.gather_flattened(nl.load(data), nl.load(idx))
        nl.store(out, g)
        return out

    data = np.random.default_rng(1).random((128, 4, 16), dtype=np.float32)
    idx = np.random.default_rng(2).integers(0, 64, (128, 8)).astype(np.uint32)
    ref = np.take_along_axis(data.reshape(128, 64), idx.astype(np.int64), axis=1)
    np.testing.assert_array_equal(nki.simulate_kernel(k, data, idx, 0), ref)

    def rmw(table: nki.typing.mutable_tensor, ids, vals):
        i_p = nl.arange(ids.shape[0])[:, None]
        i_f = nl.arange(table.shape[1])[None, :]
        nl.atomic_rmw(table[nl.load(ids[i_p])[i_p, 0], i_f], value=nl.load(vals), op=np.add)
        return table

    table = np.zeros((16, 4), np.float32)
    ids = np.array([1, 3, 1, 1] + [0] * 4, np.int32)
    vals = np.ones((8, 4), np.float32)
    out = nki.simulate_kernel(rmw, table, ids, vals)
    expect = np.zeros((16, 4), np.float32)
    np.add.at(expect, ids, vals)
    np.testing.assert_array_equal(out, expect)


def test_indirect_out_of_bounds_raises_at_run_time():
    def k(data, idx):
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        i_p = nl.arange(4)[:, None]
        rows = nl.load(data[nl.load(idx[i_p])[i_p, 0], nl.arange(8)[None, :]])
        nl.store(out, rows)
        return out

    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(k, np.zeros((16, 8), np.float32), np.array([0, 1, 99, 2], np.int32))
    assert info.value.code == "err_tensor_access_out_of_bound" and "99" in str(info.value)


def test_list_and_dataclass_arguments_holding_tensors():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        w: object
        scale: float

    def k(xs, cfg):
        out = nl.ndarray(xs[0].shape, nl.float32, buffer=nl.shared_hbm)
        acc = nl.add(nl.load(xs[0]), nl.load(xs[1]))
        nl.store(out, nl.multiply(nl.multiply(acc, nl.load(cfg.w)), cfg.scale))
        return out

    rng = np.random.default_rng(5)
    x0, x1, w = (rng.random((128, 8), np.float32) for _ in range(3))
    out = nki.simulate_kernel(k, [x0, x1], Cfg(w, 0.5))
    np.testing.assert_allclose(out, (x0 + x1) * w * 0.5, rtol=1e-6)
    ir = nki.trace_kernel(k, [x0, x1], Cfg(w, 0.5)).text
    assert "param xs_0:" in ir and "param cfg_w:" in ir and "('cfg_scale', 0.5)" in ir


def test_constants_specialise_the_trace():
    traces = []
    from nki_workbench._src.trace.kernel import TRACE_HOOKS
    TRACE_HOOKS.append(traces.append)
    try:
        @nki.jit(mode="simulation")
        def k(a, factor):
            out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.multiply(nl.load(a), factor))
            return out

        a = np.ones((128, 4), np.float32)
        np.testing.assert_array_equal(k(a, 2.0), 2 * a)
        np.testing.assert_array_equal(k(a + 1, 2.0), 2 * (a + 1))  # same spec: cached trace
        np.testing.assert_array_equal(k(a, 3.0), 3 * a)            # new constant: re-trace
    finally:
        TRACE_HOOKS.remove(traces.append)
    assert len(traces) == 2


def test_trace_is_flat_in_trip_count():
    def make(n):
        def k(a):
            out = nl.ndarray((128, 4 * n), a.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(n):
                nl.store(out[:, nl.ds(4 * i, 4)], nl.exp(nl.load(a[:, nl.ds(4 * i, 4)])))
            return out
        return k

    small = nki.trace_kernel(make(2), np.zeros((128, 8), np.float32)).text
    big = nki.trace_kernel(make(4096), np.zeros((128, 4 * 4096), np.float32)).text
    assert len(small.splitlines()) == len(big.splitlines())
    assert "affine_range(0, 4096, 1)" in big


def test_in_place_accumulation_into_an_outer_tile_is_not_a_race():
    """`acc[...] += x` / `-=` / `*=` inside affine loops are accumulations NKI allows."""
    def k(a):
        out = nl.ndarray((3, 128, 8), nl.float32, buffer=nl.shared_hbm)
        s = nl.zeros((128, 8), nl.float32)
        d = nl.full((128, 8), 100.0, nl.float32)
        p = nl.ones((128, 8), nl.float32)
        for i in nl.affine_range(4):
            x = nl.load(a[i])
            s[...] += x
            d[...] -= x
            p[...] *= 2.0
        nl.store(out[0], s)
        nl.store(out[1], d)
        nl.store(out[2], p)
        return out

    a = np.random.default_rng(3).random((4, 128, 8), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = nki.simulate_kernel(k, a)
    np.testing.assert_allclose(out[0], a.sum(0), rtol=1e-6)
    np.testing.assert_allclose(out[1], 100 - a.sum(0), rtol=1e-6)
    np.testing.assert_array_equal(out[2], np.full((128, 8), 16.0))


def test_a_returned_top_level_tile_becomes_an_hbm_output():
    """NKI's simulator returns SBUF tiles; the IR shows the store the compiler would add."""
    def k(a):
        t = nl.exp(nl.load(a))
        return t

    a = np.random.default_rng(4).random((128, 16), dtype=np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(k, a), np.exp(a), rtol=1e-6)
    text = nki.trace_kernel(k, a).text
    assert "_out: shared_hbm float32[128, 16] output" in text
    assert "_out = store(" in text


def test_a_tile_from_inside_a_loop_cannot_be_returned():
    def k(a):
        for i in nl.affine_range(2):
            t = nl.load(a[i * 64:(i + 1) * 64, :])
        return t

    with pytest.raises(NkiError):
        nki.simulate_kernel(k, np.zeros((128, 4), np.float32))
