"""nki.isa copies: tensor_copy, tensor_copy_dynamic_src/dst, tensor_copy_predicated, dma_copy
(indirect indices, oob_mode, dst_rmw_op, dge_mode) and dma_transpose."""

import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench.nki.isa.constants import oob_mode

RNG = np.random.default_rng(5)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _copy_kernel(eng, dtype=None, target="trn1"):
    @nki.jit(mode="simulation", platform_target=target)
    def k(a):
        out = nl.ndarray(a.shape, dtype=dtype or a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_copy(nl.load(a), engine=eng, dtype=dtype))
        return out
    return k


def test_tensor_copy_engines_and_cast():
    a = rand(64, 32)
    np.testing.assert_array_equal(_copy_kernel(nisa.vector_engine)(a), a)
    np.testing.assert_array_equal(_copy_kernel(nisa.gpsimd_engine)(a), a)
    h = _copy_kernel(nisa.unknown_engine, nl.float16)(a)
    np.testing.assert_array_equal(h, a.astype(np.float16))
    big = np.full((4, 4), 2**24 + 1, dtype=np.int32)
    np.testing.assert_array_equal(_copy_kernel(nisa.vector_engine)(big), big)  # bit-exact
    # NC-v2 ScalarE copies go through fp32: 2**24 + 1 is not representable
    np.testing.assert_array_equal(_copy_kernel(nisa.scalar_engine)(big), big - 1)
    np.testing.assert_array_equal(_copy_kernel(nisa.scalar_engine, target="trn2")(big), big)
    with pytest.raises(nki.NkiError, match="cannot run on the tensor engine"):
        _copy_kernel(nisa.tensor_engine)(a)


def test_tensor_copy_gpsimd_cannot_touch_psum():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        p = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.psum)
        p[...] = nl.load(a)
        nl.store(out, nisa.tensor_copy(p, engine=nisa.gpsimd_engine))
        return out
    with pytest.raises(nki.NkiError) as e:
        k(rand(8, 8))
    assert e.value.code == "err_unsupported_memory"


# ----------------------------------------------------------------------------- dynamic copies
@nki.jit(mode="simulation")
def k_dyn_src0(in_tensor, idx_tensor):
    out_tensor = nl.ndarray([128, 64], dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:128, 0:1]
    in_sbuf = nl.load(in_tensor)
    idx_sbuf = nl.load(idx_tensor)
    out_sbuf = nl.ndarray([128, 64], dtype=in_tensor.dtype, buffer=nl.sbuf)
    for b_idx in nl.affine_range(idx_sbuf.shape[1]):
        out_sbuf[ix, b_idx] = nisa.tensor_copy_dynamic_src(in_sbuf[ix, idx_sbuf[0, b_idx] + iy])
    nl.store(out_tensor, value=out_sbuf)
    return out_tensor


@nki.jit(mode="simulation")
def k_dyn_src1(in_tensor, idx_tensor):
    out_tensor = nl.ndarray([128, 8, 4], dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    ix, iy, iz = nl.mgrid[0:128, 0:1, 0:4]
    in_sbuf = nl.load(in_tensor)
    idx_sbuf = nl.load(idx_tensor)
    out_sbuf = nl.ndarray([128, 8, 4], dtype=in_tensor.dtype, buffer=nl.sbuf)
    for b_idx in nl.affine_range(idx_tensor.shape[1]):
        out_sbuf[ix, b_idx, iz] = nisa.tensor_copy_dynamic_src(
            in_sbuf[ix, idx_sbuf[0, b_idx], iz])
    nl.store(out_tensor, value=out_sbuf)
    return out_tensor


def test_tensor_copy_dynamic_src_doc_examples():
    a = RNG.random((128, 512)).astype(np.float32)
    idx = (4 + np.arange(64, dtype=np.int32))[None, :]
    np.testing.assert_array_equal(k_dyn_src0(a, idx), np.take(a, idx[0], axis=1))
    b = RNG.random((128, 512, 4)).astype(np.float32)
    idx8 = (7 + 3 * np.arange(8, dtype=np.int32))[None, :]
    np.testing.assert_array_equal(k_dyn_src1(b, idx8), np.take(b, idx8[0], axis=1))


@nki.jit(mode="simulation")
def k_dyn_dst(src, idx):
    out = nl.ndarray([32, 16], dtype=src.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:32, 0:1]
    s = nl.load(src)
    ids = nl.load(idx)
    dst = nl.zeros([32, 16], dtype=src.dtype)
    for i in nl.sequential_range(4):
        nisa.tensor_copy_dynamic_dst(dst=dst[ix, ids[0, i] + iy], src=s[ix, i + iy])
    nl.store(out, dst)
    return out


def test_tensor_copy_dynamic_dst_scatter():
    src = rand(32, 4)
    idx = np.array([[9, 2, 15, 0]], dtype=np.int32)
    ref = np.zeros((32, 16), np.float32)
    ref[:, idx[0]] = src
    np.testing.assert_array_equal(k_dyn_dst(src, idx), ref)


def test_dynamic_sbuf_index_outside_dynamic_copies_is_refused():
    @nki.jit(mode="simulation")
    def k(a, idx):
        out = nl.ndarray([8, 1], dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:8, 0:1]
        s = nl.load(a)
        ids = nl.load(idx)
        nl.store(out, nl.exp(s[ix, ids[0, 0] + iy]))
        return out
    with pytest.raises(nki.NkiError) as e:
        k(rand(8, 8), np.zeros((1, 1), np.int32))
    assert e.value.code == "err_copy_dynamic_indirect_indices_not_natively_supported"


# ----------------------------------------------------------------------------- predicated
@nki.jit(mode="simulation")
def k_pred(a, b, p):
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    pred = nl.load(p)
    d1 = nl.load(b)
    nisa.tensor_copy_predicated(src=nl.load(a), dst=d1, predicate=pred)
    nl.store(o1, d1)
    d2 = nl.load(b)
    nisa.tensor_copy_predicated(src=nl.load(a), dst=d2, predicate=pred, reverse_pred=True)
    nl.store(o2, d2)
    return o1, o2


def test_tensor_copy_predicated():
    a, b = rand(128, 64), rand(128, 64)
    p = RNG.random((128, 64)) > 0.5
    o1, o2 = k_pred(a, b, p)
    np.testing.assert_array_equal(o1, np.where(p, a, b))
    np.testing.assert_array_equal(o2, np.where(p, b, a))
    with pytest.raises(nki.NkiError, match="predicate must be an integer"):
        k_pred(a, b, p.astype(np.float32))


# ----------------------------------------------------------------------------- dma_copy
@nki.jit(mode="simulation")
def k_dma(a):
    b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(src=a, dst=b)
    return b


def test_dma_copy_doc_example():
    a = RNG.random((256, 1)).astype(np.float32)
    np.testing.assert_array_equal(k_dma(a), a)


def _gather_kernel(mode):
    @nki.jit(mode="simulation")
    def k(a, idx):
        out = nl.ndarray((idx.shape[0], a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        ids = nl.load(idx)
        iy = nl.arange(a.shape[1])[None, :]
        t = nl.zeros((idx.shape[0], a.shape[1]), dtype=a.dtype)
        nisa.dma_copy(dst=t, src=a[ids, iy], oob_mode=mode)
        nl.store(out, t)
        return out
    return k


def test_dma_copy_indirect_gather_and_oob_modes():
    a = rand(128, 512)
    idx = np.array([[3], [0], [127], [40]], dtype=np.int32)
    np.testing.assert_array_equal(_gather_kernel(oob_mode.error)(a, idx), a[idx[:, 0]])
    bad = np.array([[3], [129], [1], [500]], dtype=np.int32)
    with pytest.raises(IndexError, match="index 66048 is out of bounds for axis 0 with size "
                                         "65536"):
        _gather_kernel(oob_mode.error)(a, bad)
    out = _gather_kernel(oob_mode.skip)(a, bad)
    np.testing.assert_array_equal(out[[0, 2]], a[[3, 1]])
    np.testing.assert_array_equal(out[[1, 3]], 0)  # skipped rows keep the zeros


@nki.jit(mode="simulation")
def k_scatter_add(acc_in, src, idx):
    out = nl.ndarray(acc_in.shape, dtype=acc_in.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc_in)
    ids = nl.load(idx)
    iy = nl.arange(src.shape[1])[None, :]
    nisa.dma_copy(dst=out[ids, iy], src=nl.load(src), dst_rmw_op=np.add)
    return out


def test_dma_copy_scatter_accumulate_serialises_duplicates():
    base, src = rand(16, 8), rand(4, 8)
    idx = np.array([[2], [5], [2], [15]], dtype=np.int32)
    ref = base.copy()
    np.add.at(ref, idx[:, 0], src)
    np.testing.assert_allclose(k_scatter_add(base, src, idx), ref, atol=1e-6)


def test_dma_copy_argument_rules():
    @nki.jit(mode="simulation")
    def k(a):
        b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(src=a, dst=b, dge_mode=nisa.dge_mode.hwdge)
        return b
    with pytest.raises(nki.NkiError, match="hwdge"):
        k(rand(4, 4))

    @nki.jit(mode="simulation")
    def k2(a):
        b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(src=a, dst=b, dst_rmw_op=np.add, oob_mode=oob_mode.skip)
        return b
    with pytest.raises(nki.NkiError, match="oob_mode"):
        k2(rand(4, 4))


# ----------------------------------------------------------------------------- dma_transpose
@nki.jit(mode="simulation")
def k_dma_t(a):
    t = nisa.dma_transpose(a)
    out = nl.ndarray(t.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


def test_dma_transpose_default_permutations():
    a = rand(32, 64)
    np.testing.assert_array_equal(k_dma_t(a), a.T)
    b = rand(4, 8, 16)
    np.testing.assert_array_equal(k_dma_t(b), b.transpose(2, 1, 0))
    c = rand(2, 3, 4, 5)
    np.testing.assert_array_equal(k_dma_t(c), c.transpose(3, 1, 2, 0))


def test_dma_transpose_refuses_indirect_indices():
    @nki.jit(mode="simulation")
    def k(a, idx):
        ids = nl.load(idx)
        iy = nl.arange(a.shape[1])[None, :]
        t = nisa.dma_transpose(a[ids, iy])
        out = nl.ndarray(t.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out
    with pytest.raises(nki.NkiError) as e:
        k(rand(8, 8), np.zeros((4, 1), np.int32))
    assert e.value.code == "err_indirect_indices_are_not_supported_with_nki_api"


@nki.jit(mode="simulation")
def k_dma_into_fresh_tile(a):
    out = nl.ndarray(a.shape, dtype=nl.float16, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=nl.float16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nl.store(out, t)
    return out


def test_dma_copy_into_fresh_sbuf_tile_casts():
    a = rand(64, 32)
    np.testing.assert_array_equal(k_dma_into_fresh_tile(a), a.astype(np.float16))


def _full_kernel(value, dtype):
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray((128, 64), dtype=dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.full((128, 64), value, dtype=dtype))
        return out
    return k


@pytest.mark.parametrize("value, dtype", [
    (0, nl.float32), (3, nl.bfloat16), (-1, nl.int8), (300, nl.int8), (1.5, nl.bfloat16),
    (70000.0, nl.float16), (-3.7, nl.int32), (1.0000001, nl.bfloat16), (True, nl.float32),
    (2 ** 24 + 1, nl.float32), (0.1, nl.float8_e4m3)])
def test_a_fill_converts_like_every_element_would(value, dtype):
    # why: memset converts its constant to the tile's dtype once; that must be the tile the
    # element-wise conversion gives (saturation, rounding, overflow to inf, truncation)
    from nki_workbench._src import dtype_casts as DC
    src = np.bool_ if isinstance(value, bool) else \
        np.float32 if isinstance(value, float) else np.asarray(value).dtype
    want = DC.cast(np.full((128, 64), value, dtype=src), dtype)
    got = nki.simulate_kernel(_full_kernel(value, dtype), np.zeros((128, 64), np.float32))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
