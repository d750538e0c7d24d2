"""nki.isa.nc_matmul (stationary/moving, K accumulation, fp8, is_transpose, PE tiling,
double_row_gen3) and nc_transpose (TensorE / VectorE)."""

import ml_dtypes
import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import IsaHintWarning, nki

RNG = np.random.default_rng(3)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@nki.jit(mode="simulation")
def k_matmul(a_t, b):
    # a_t: [K, M] (stationary), b: [K, N] (moving); K = 256 accumulated in PSUM
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        s = nl.load(a_t[k * 128:(k + 1) * 128, :])
        m = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(s, m)
    nl.store(out, acc)
    return out


def test_nc_matmul_accumulates_over_k():
    a_t, b = rand(256, 128), rand(256, 512)
    np.testing.assert_allclose(k_matmul(a_t, b), a_t.T @ b, atol=1e-3)
    ir = nki.trace_kernel(k_matmul, a_t, b).kernel
    mm = [i for i in ir.body[-2].body if getattr(i, "op", "") == "nc_matmul"]
    assert mm and mm[0].attr("engine") == "tensor" and mm[0].attr("acc") == "add"


@nki.jit(mode="simulation")
def k_mm_dtype(a_t, b):
    out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.nc_matmul(nl.load(a_t), nl.load(b)))
    return out


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2])
def test_nc_matmul_low_precision_operands_accumulate_in_fp32(dt):
    a_t, b = rand(128, 64).astype(dt), rand(128, 96).astype(dt)
    ref = a_t.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(k_mm_dtype(a_t, b), ref, rtol=1e-5, atol=1e-4)


def test_nc_matmul_rejects_int_and_psum_operands():
    with pytest.raises(nki.NkiError, match="dtype int32"):
        k_mm_dtype(np.ones((4, 4), np.int32), np.ones((4, 4), np.int32))

    @nki.jit(mode="simulation")
    def k(a_t):
        out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
        p[...] = nl.load(a_t)
        nl.store(out, nisa.nc_matmul(p, nl.load(a_t)))
        return out
    with pytest.raises(nki.NkiError) as e:
        k(rand(4, 4))
    assert e.value.code == "err_unsupported_memory"


def test_nc_matmul_shape_limits():
    with pytest.raises(nki.NkiError) as e:
        k_mm_dtype(rand(64, 8), rand(32, 8))
    assert e.value.code == "err_num_partition_mismatch"
    with pytest.raises(nki.NkiError) as e:
        k_mm_dtype(rand(8, 8), rand(8, 1024))
    assert e.value.code == "err_size_of_dimension_exceed_arch_limit"


@nki.jit(mode="simulation")
def k_transpose_mm(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    ident = nl.load(nl.shared_identity_matrix(n=a.shape[0], dtype=nl.float32))
    nl.store(out, nisa.nc_matmul(x, ident, is_transpose=True))
    return out


def test_nc_matmul_is_transpose():
    a = rand(64, 32)
    np.testing.assert_array_equal(k_transpose_mm(a), a.T)


def test_nc_matmul_onezero_hint_is_checked():
    @nki.jit(mode="simulation")
    def k(a_t, b):
        out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.nc_matmul(nl.load(a_t), nl.load(b), is_moving_onezero=True))
        return out
    a_t = rand(16, 8)
    b = (RNG.random((16, 8)) > 0.5).astype(np.float32)
    np.testing.assert_allclose(k(a_t, b), a_t.T @ b, atol=1e-5)
    with pytest.warns(IsaHintWarning, match="is_moving_onezero"):
        k(a_t, b + 0.5)


@nki.jit(mode="simulation")
def k_tiled(a_t, b):
    # four 64x64 matmuls sharing the PE array (tile_position from loop indices)
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        for j in nl.affine_range(2):
            s = nl.load(a_t[:, i * 64:(i + 1) * 64])
            m = nl.load(b[:, j * 64:(j + 1) * 64])
            r = nisa.nc_matmul(s, m, tile_position=((i % 2) * 64, (j % 2) * 64),
                               tile_size=(64, 64))
            nl.store(out[i * 64:(i + 1) * 64, j * 64:(j + 1) * 64], r)
    return out


def test_nc_matmul_tile_position():
    a_t, b = rand(64, 128), rand(64, 128)
    np.testing.assert_allclose(k_tiled(a_t, b), a_t.T @ b, atol=1e-4)


@pytest.mark.parametrize("pos, size, msg", [
    ((0, 0), (), "both be given"),
    ((0, 16), (64, 64), "multiple of 32"),
    ((96, 0), (64, 64), "leaves the 128x128"),
    ((0, 0), (32, 64), "smaller than"),
    ((0, 0), (48, 64), "multiple of 32"),
])
def test_nc_matmul_tiling_errors(pos, size, msg):
    @nki.jit(mode="simulation")
    def k(a_t, b):
        out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.nc_matmul(nl.load(a_t), nl.load(b), tile_position=pos,
                                     tile_size=size))
        return out
    with pytest.raises(nki.NkiError, match=msg) as e:
        k(rand(64, 64), rand(64, 64))
    assert e.value.code == "wb_nc_matmul_tiling"


def test_nc_matmul_32x32_tile_refused_on_nc_v2_only():
    def make(target):
        @nki.jit(mode="simulation", platform_target=target)
        def k(a_t, b):
            out = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nisa.nc_matmul(nl.load(a_t), nl.load(b), tile_position=(32, 32),
                                         tile_size=(32, 32)))
            return out
        return k
    a_t, b = rand(32, 32), rand(32, 32)
    with pytest.raises(nki.NkiError, match="NeuronCore-v2"):
        make("trn1")(a_t, b)
    np.testing.assert_allclose(make("trn2")(a_t, b), a_t.T @ b, atol=1e-4)


@nki.jit(mode="simulation", platform_target="trn2")
def k_double_row(s, m):
    out = nl.ndarray((s.shape[2], m.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.nc_matmul(nl.load(s), nl.load(m), perf_mode="double_row_gen3"))
    return out


def test_nc_matmul_double_row_gen3():
    s = rand(128, 2, 64).astype(ml_dtypes.float8_e4m3)
    m = rand(128, 2, 256).astype(ml_dtypes.float8_e4m3)
    ref = np.einsum("kli,klj->ij", s.astype(np.float32), m.astype(np.float32))
    np.testing.assert_allclose(k_double_row(s, m), ref, rtol=1e-5, atol=1e-3)
    with pytest.raises(nki.NkiError, match="fp8"):
        k_double_row(rand(8, 2, 8), rand(8, 2, 8))


# ----------------------------------------------------------------------------- nc_transpose
def _transpose_kernel(target, eng):
    @nki.jit(mode="simulation", platform_target=target)
    def k(a):
        out = nl.ndarray((int(np.prod(a.shape[1:])), a.shape[0]), dtype=a.dtype,
                         buffer=nl.shared_hbm)
        nl.store(out, nisa.nc_transpose(nl.load(a), engine=eng))
        return out
    return k


def test_nc_transpose_engines_and_collapsed_free_axes():
    a = rand(128, 4, 16)
    k = _transpose_kernel("trn1", nisa.unknown_engine)
    np.testing.assert_array_equal(k(a), a.reshape(128, 64).T)
    ir = nki.trace_kernel(k, a).kernel
    t = [i for i in ir.body if getattr(i, "op", "") == "nc_transpose"][0]
    assert t.attr("engine") == "tensor"
    small = rand(32, 16)
    k2 = _transpose_kernel("trn1", nisa.unknown_engine)
    np.testing.assert_array_equal(k2(small), small.T)
    ir2 = nki.trace_kernel(k2, small).kernel
    assert [i.attr("engine") for i in ir2.body if getattr(i, "op", "") == "nc_transpose"] == \
        ["vector"]
    with pytest.raises(nki.NkiError) as e:
        _transpose_kernel("trn1", nisa.vector_engine)(rand(64, 16))
    assert e.value.code == "err_size_of_dimension_exceed_arch_limit"


def test_nc_transpose_tensor_engine_nan_on_nc_v2_only():
    a = rand(64, 48)
    a[3, 5] = np.nan
    t1 = _transpose_kernel("trn1", nisa.tensor_engine)(a)
    assert np.isnan(t1[5]).all()  # the matmul with identity spreads the NaN over the row
    np.testing.assert_array_equal(np.delete(t1, 5, axis=0), np.delete(a.T, 5, axis=0))
    t2 = _transpose_kernel("trn2", nisa.tensor_engine)(a)
    np.testing.assert_array_equal(t2, a.T)
