"""nki.isa selections and generated tiles: affine_select, range_select, select_reduce, dropout,
iota, memset, sequence_bounds."""

import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import nki

RNG = np.random.default_rng(9)
FP32_MIN = np.array(0xFF7FFFFF, np.uint32).view(np.float32)[()]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- affine_select
@nki.jit(mode="simulation")
def k_causal(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:128, 0:128]
    x = nl.load(a)
    nl.store(out, nisa.affine_select(pred=(iy < ix), on_true_tile=x[ix, iy],
                                     on_false_value=nl.fp32.min))
    return out


def test_affine_select_causal_mask():
    a = rand(128, 128)
    ref = np.where(np.tril(np.ones((128, 128), bool), k=-1), a, FP32_MIN)
    np.testing.assert_array_equal(k_causal(a), ref)


@nki.jit(mode="simulation")
def k_affine_offset(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(a.shape[0])[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    x = nl.load(a)
    nl.store(out, nisa.affine_select(pred=(i_f * 2 - i_p >= 3), on_true_tile=x,
                                     on_false_value=-1.0))
    return out


def test_affine_select_general_affine_and_int16():
    a = RNG.integers(-100, 100, (16, 32)).astype(np.int16)
    p, f = np.mgrid[0:16, 0:32]
    np.testing.assert_array_equal(k_affine_offset(a), np.where(f * 2 - p >= 3, a, -1))


def test_affine_select_rejects_compound_predicates_and_int32():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:8, 0:8]
        nl.store(out, nisa.affine_select(pred=(iy < ix) & (ix < 4), on_true_tile=nl.load(a),
                                         on_false_value=0.0))
        return out
    with pytest.raises(nki.NkiError) as e:
        k(rand(8, 8))
    assert e.value.code == "err_unsupported_expression_in_mask"
    with pytest.raises(nki.NkiError, match="int32"):
        k_causal(np.zeros((128, 128), np.int32))


# ----------------------------------------------------------------------------- range_select
@nki.jit(mode="simulation", platform_target="trn2")
def k_range(a, lo, hi):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    b0, b1 = nl.load(lo), nl.load(hi)
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    half = a.shape[1] // 2
    # chain: first half resets, second half accumulates and reads out
    o1 = nisa.range_select(on_true_tile=x[:, 0:half], comp_op0=np.greater_equal,
                           comp_op1=np.less, bound0=b0, bound1=b1,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce, range_start=0)
    o2 = nisa.range_select(on_true_tile=x[:, half:a.shape[1]], comp_op0=np.greater_equal,
                           comp_op1=np.less, bound0=b0, bound1=b1,
                           reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=r, range_start=half)
    nl.store(out[:, 0:half], o1)
    nl.store(out[:, half:a.shape[1]], o2)
    nl.store(red, r)
    return out, red


def test_range_select_chain_and_reduce():
    a = rand(64, 128)
    lo = RNG.integers(0, 60, (64, 1)).astype(np.float32)
    hi = lo + RNG.integers(1, 60, (64, 1)).astype(np.float32)
    out, red = k_range(a, lo, hi)
    idx = np.arange(128)[None, :]
    keep = (idx >= lo) & (idx < hi)
    ref = np.where(keep, a, FP32_MIN)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(red, ref.max(axis=1, keepdims=True))


def test_range_select_needs_trn2_and_fp32_min():
    @nki.jit(mode="simulation")
    def k(a, lo, hi):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.range_select(on_true_tile=nl.load(a), comp_op0=np.greater_equal,
                                        comp_op1=np.less, bound0=nl.load(lo),
                                        bound1=nl.load(hi)))
        return out
    args = rand(4, 8), np.zeros((4, 1), np.float32), np.ones((4, 1), np.float32)
    with pytest.raises(nki.NkiError, match="NeuronCore-v3"):
        k(*args)

    @nki.jit(mode="simulation", platform_target="trn2")
    def k2(a, lo, hi):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.range_select(on_true_tile=nl.load(a), comp_op0=np.greater_equal,
                                        comp_op1=np.less, bound0=nl.load(lo),
                                        bound1=nl.load(hi), on_false_value=0.0))
        return out
    with pytest.raises(nki.NkiError, match="fp32.min"):
        k2(*args)


# ----------------------------------------------------------------------------- select_reduce
@nki.jit(mode="simulation")
def k_select_reduce(a, p, f):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x, pred, off = nl.load(a), nl.load(p), nl.load(f)
    d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=d, predicate=pred, on_true=x, on_false=off, reduce_res=r,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)
    d2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.select_reduce(dst=d2, predicate=pred, on_true=x, on_false=-5.0, reverse_pred=True)
    nl.store(out, d)
    nl.store(out2, d2)
    nl.store(red, r)
    return out, out2, red


def test_select_reduce():
    a = rand(32, 24)
    p = (RNG.random((32, 24)) > 0.3).astype(np.uint8)
    f = rand(32, 1)
    out, out2, red = k_select_reduce(a, p, f)
    ref = np.where(p != 0, a, f)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(out2, np.where(p == 0, a, -5.0).astype(np.float32))
    np.testing.assert_array_equal(red, ref.max(axis=1, keepdims=True))
    with pytest.raises(nki.NkiError, match="predicate must be"):
        k_select_reduce(a, p.astype(np.int32), f)


# ----------------------------------------------------------------------------- dropout
@nki.jit(mode="simulation")
def k_dropout(a, prob):
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o3 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o1, nisa.dropout(x, prob=0.0))
    nl.store(o2, nisa.dropout(x, prob=1.0))
    nl.store(o3, nisa.dropout(x, prob=nl.load(prob)))
    return o1, o2, o3


def test_dropout_probabilities():
    a = np.abs(rand(128, 512)) + 1.0
    prob = np.linspace(0, 1, 128, dtype=np.float32).reshape(128, 1)
    o1, o2, o3 = k_dropout(a, prob)
    np.testing.assert_array_equal(o1, a)
    np.testing.assert_array_equal(o2, 0)
    kept = (o3 != 0).mean(axis=1)
    assert np.all((o3 == 0) | (o3 == a))  # no rescaling of kept values
    np.testing.assert_allclose(kept, 1 - prob[:, 0], atol=0.1)  # per-partition probability
    assert kept[0] == 1.0 and kept[-1] == 0.0


# ----------------------------------------------------------------------------- iota
@nki.jit(mode="simulation")
def k_iota():
    o1 = nl.ndarray((1, 512), dtype=nl.int32, buffer=nl.shared_hbm)
    o2 = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray((128, 512), dtype=nl.int32, buffer=nl.shared_hbm)
    o4 = nl.ndarray((4, 1), dtype=nl.uint32, buffer=nl.shared_hbm)
    expr_a = nl.arange(0, 128)[:, None]
    expr_b = nl.arange(0, 512)[None, :]
    nl.store(o1, nisa.iota(expr_b, dtype=nl.int32))
    nl.store(o2, nisa.iota(5 + expr_a * -2, dtype=nl.float32))
    nl.store(o3, nisa.iota(expr_a + expr_b, dtype=nl.int32))
    for i in nl.affine_range(4):
        nl.store(o4[i:i + 1, 0:1], nisa.iota(i * 3, dtype=nl.uint32))
    return o1, o2, o3, o4


def test_iota_doc_examples():
    o1, o2, o3, o4 = k_iota()
    np.testing.assert_array_equal(o1, np.arange(512)[None, :])
    np.testing.assert_array_equal(o2, (5 - 2 * np.arange(128))[:, None].astype(np.float32))
    np.testing.assert_array_equal(o3, np.arange(128)[:, None] + np.arange(512)[None, :])
    np.testing.assert_array_equal(o4, np.arange(4)[:, None] * 3)


def test_iota_rules():
    @nki.jit(mode="simulation")
    def k():
        out = nl.ndarray((1, 8), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, nisa.iota(nl.arange(8), dtype=nl.int32))
        return out
    with pytest.raises(nki.NkiError) as e:
        k()
    assert e.value.code == "err_1d_arange_not_supported"

    @nki.jit(mode="simulation")
    def k2():
        out = nl.ndarray((1, 8), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, nisa.iota(nl.arange(8)[None, :], dtype=nl.bool_))
        return out
    with pytest.raises(nki.NkiError, match="dtype bool"):
        k2()


# ----------------------------------------------------------------------------- memset
@nki.jit(mode="simulation")
def k_memset():
    o1 = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    o2 = nl.ndarray((32, 16), dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(o1, nisa.memset((128, 64), 0.5, dtype=nl.bfloat16))
    i_p = nl.arange(32)[:, None]
    i_f = nl.arange(16)[None, :]
    t = nisa.memset((32, 16), 0, dtype=nl.int32)
    t[i_p, i_f] = nisa.memset((32, 16), 7, dtype=nl.int32, engine=nisa.gpsimd_engine,
                              mask=(i_f < 4))
    nl.store(o2, t)
    return o1, o2


def test_memset_value_engine_and_mask():
    o1, o2 = k_memset()
    np.testing.assert_array_equal(o1.astype(np.float32), 0.5)
    ref = np.zeros((32, 16), np.int32)
    ref[:, :4] = 7
    np.testing.assert_array_equal(o2, ref)
    ir = nki.trace_kernel(k_memset).kernel
    engines = [i.attr("engine") for i in ir.body if getattr(i, "op", "") == "memset"]
    assert "gpsimd" in engines and "vector" in engines


# ----------------------------------------------------------------------------- sequence_bounds
@nki.jit(mode="simulation")
def k_bounds(ids):
    out = nl.ndarray((1, 2, ids.shape[1]), dtype=ids.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.sequence_bounds(segment_ids=nl.load(ids)))
    return out


def test_sequence_bounds_doc_example():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], dtype=np.int32)
    out = k_bounds(ids)
    np.testing.assert_array_equal(out[0, 0], [9, 1, 1, 3, 3, 3, 9, 7, 7])
    np.testing.assert_array_equal(out[0, 1], [-1, 3, 3, 6, 6, 6, -1, 9, 9])
    f = np.array([[4, 4, 0, 0, 5]], dtype=np.float32)
    np.testing.assert_array_equal(k_bounds(f)[0], [[0, 0, 5, 5, 4], [2, 2, -1, -1, 5]])
    with pytest.raises(nki.NkiError, match=r"\[1, n\]"):
        k_bounds(np.zeros((2, 4), np.int32))
