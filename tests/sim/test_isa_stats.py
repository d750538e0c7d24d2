"""nki.isa statistics and search: bn_stats, bn_aggr, max8, nc_find_index8, nc_match_replace8,
nc_stream_shuffle, local_gather."""

import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import IsaHintWarning, nki

RNG = np.random.default_rng(13)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- bn_stats / bn_aggr
@nki.jit(mode="simulation")
def k_bn(a):
    # bn_stats per 512-chunk side by side, then one bn_aggr (the documented example 2)
    P, F = a.shape
    n = F // 512
    stats_out = nl.ndarray((P, 6), dtype=nl.float32, buffer=nl.shared_hbm)
    mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    stats = nl.ndarray((P, 6 * n), dtype=nl.float32, buffer=nl.sbuf)
    ix, iy = nl.mgrid[0:P, 0:512]
    iz, iw = nl.mgrid[0:P, 0:6]
    for i in nl.affine_range(n):
        stats[iz, i * 6 + iw] = nisa.bn_stats(x[ix, i * 512 + iy], dtype=nl.float32)
    nl.store(stats_out, stats[iz, iw])
    nl.store(mv, nisa.bn_aggr(stats))
    return stats_out, mv


def test_bn_stats_and_aggr_match_numpy():
    a = rand(128, 1024) * 3 + 1
    stats, mv = k_bn(a)
    c0 = a[:, 0:512]
    even, odd = c0[:, 0::2], c0[:, 1::2]
    ref = np.stack([np.full(128, 256.0), even.mean(1), even.var(1) * 256,
                    np.full(128, 256.0), odd.mean(1), odd.var(1) * 256], axis=1)
    np.testing.assert_allclose(stats, ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(mv[:, 0], a.mean(1), atol=1e-4)
    np.testing.assert_allclose(mv[:, 1], a.var(1), rtol=1e-4)


def test_bn_stats_odd_size_and_limits():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.bn_aggr(nisa.bn_stats(nl.load(a), dtype=nl.float32)))
        return out
    a = rand(16, 7)
    out = k(a)
    np.testing.assert_allclose(out[:, 0], a.mean(1), atol=1e-5)
    np.testing.assert_allclose(out[:, 1], a.var(1), rtol=1e-4)
    with pytest.raises(nki.NkiError) as e:
        k(rand(4, 513))
    assert e.value.code == "err_size_of_dimension_exceed_arch_limit"


# ----------------------------------------------------------------------------- max8 / find
@nki.jit(mode="simulation")
def k_top8(a):
    vals = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    rep = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    idx2 = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    x = nl.load(a)
    m = nisa.max8(src=x)
    nl.store(vals, m)
    nl.store(idx, nisa.nc_find_index8(data=x, vals=m))
    di = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
    nl.store(rep, nisa.nc_match_replace8(data=x, vals=m, imm=-1e9, dst_idx=di))
    nl.store(idx2, di)
    return vals, idx, rep, idx2


def test_max8_find_index8_match_replace8():
    a = rand(64, 200)
    vals, idx, rep, idx2 = k_top8(a)
    order = np.argsort(-a, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(vals, np.take_along_axis(a, order, axis=1))
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(idx2, order)
    ref = a.copy()
    np.put_along_axis(ref, order, np.float32(-1e9), axis=1)
    np.testing.assert_array_equal(rep, ref)


@nki.jit(mode="simulation")
def k_replace_dups(a, v):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.nc_match_replace8(data=nl.load(a), vals=nl.load(v), imm=0.0))
    return out


def test_match_replace8_duplicate_values_take_successive_slots():
    a = np.array([[5, 1, 5, 5, 2, 9, 9, 3, 7, 8]], dtype=np.float32)
    v = np.array([[5, 5, 9, 1, 2, 3, 7, 8]], dtype=np.float32)
    np.testing.assert_array_equal(k_replace_dups(a, v),
                                  [[0, 0, 0, 5, 0, 0, 9, 0, 0, 0]])


def test_find_index8_absent_value_warns():
    @nki.jit(mode="simulation")
    def k(a, v):
        out = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        nl.store(out, nisa.nc_find_index8(data=nl.load(a), vals=nl.load(v)))
        return out
    a = np.arange(16, dtype=np.float32)[None, :]
    v = np.array([[3, 4, 5, 6, 7, 8, 9, 99]], dtype=np.float32)
    with pytest.warns(IsaHintWarning, match="do not occur"):
        out = k(a, v)
    np.testing.assert_array_equal(out[0, :7], [3, 4, 5, 6, 7, 8, 9])


def test_max8_limits_and_partition_start():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.max8(src=nl.load(a)))
        return out
    with pytest.raises(nki.NkiError, match="8 to 16384"):
        k(rand(4, 4))

    @nki.jit(mode="simulation")
    def k2(a):
        out = nl.ndarray((16, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        nl.store(out, nisa.max8(src=x[8:24, :]))
        return out
    with pytest.raises(nki.NkiError) as e:
        k2(rand(128, 16))
    assert e.value.code == "wb_partition_start"


# ----------------------------------------------------------------------------- nc_stream_shuffle
@nki.jit(mode="simulation")
def k_shuffle(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    d = nl.zeros(a.shape, dtype=a.dtype)
    mask = [31 - i for i in range(30)] + [255, 255]
    nisa.nc_stream_shuffle(src=x, dst=d, shuffle_mask=mask)
    nl.store(out, d)
    return out


def test_nc_stream_shuffle_reverses_each_quadrant():
    a = rand(128, 16)
    ref = np.zeros_like(a)
    for q in range(4):
        for i in range(30):
            ref[q * 32 + i] = a[q * 32 + 31 - i]
    np.testing.assert_array_equal(k_shuffle(a), ref)


@nki.jit(mode="simulation")
def k_bcast(a):
    out = nl.ndarray((32, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    d = nl.ndarray((32, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(src=nl.load(a), dst=d, shuffle_mask=[0] * 32)
    nl.store(out, d)
    return out


def test_nc_stream_shuffle_broadcast_one_partition():
    a = rand(1, 8)
    np.testing.assert_array_equal(k_bcast(a), np.repeat(a, 32, axis=0))


def test_nc_stream_shuffle_mask_rules():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        nisa.nc_stream_shuffle(src=x, dst=x, shuffle_mask=[40] * 32)
        nl.store(out, x)
        return out
    with pytest.raises(nki.NkiError, match="0..31 or 255"):
        k(rand(32, 4))


# ----------------------------------------------------------------------------- local_gather
@nki.jit(mode="simulation")
def k_local_gather(src_buffer, index, num_elem_per_idx, num_valid_indices, output_shape):
    output = nl.ndarray(output_shape, dtype=src_buffer.dtype, buffer=nl.shared_hbm)
    src_tile = nl.load(src_buffer)
    index_tile = nl.load(index)
    out_tile = nisa.local_gather(src_tile, index_tile, num_elem_per_idx, num_valid_indices)
    nl.store(output, out_tile)
    return output


def _gather_ref(src, index, e, nv):
    out = np.empty((src.shape[0], nv, e), dtype=src.dtype)
    for c in range(src.shape[0] // 16):
        rows = slice(16 * c, 16 * c + 16)
        ids = index[rows].flatten(order="F")[:nv]
        out[rows] = np.take(src[rows], ids, axis=1)
    return out


def test_local_gather_doc_example():
    src = RNG.random((128, 512, 4)).astype(np.float32)
    per_core = RNG.integers(0, 512, (16, 4)).astype(np.uint16)
    index = np.tile(per_core, (8, 1))
    out = k_local_gather(src, (index * 4).astype(np.uint16), 4, 64, (128, 4, 16, 4))
    np.testing.assert_array_equal(out, _gather_ref(src, index, 4, 64).reshape(128, 4, 16, 4))


def test_local_gather_single_elements_and_errors():
    src = rand(32, 64)
    index = RNG.integers(0, 64, (32, 2)).astype(np.uint16)
    out = k_local_gather(src, index, 1, None, (32, 32, 1))
    ref = np.empty((32, 32, 1), np.float32)
    for c in range(2):
        rows = slice(16 * c, 16 * c + 16)
        ref[rows, :, 0] = src[rows][:, index[rows].flatten(order="F")]
    np.testing.assert_array_equal(out, ref)
    with pytest.raises(nki.NkiError, match="uint16"):
        k_local_gather(src, index.astype(np.int32), 1, None, (32, 32, 1))
    with pytest.raises(nki.NkiError, match="num_elem_per_idx"):
        k_local_gather(src, index, 3, None, (32, 32, 3))
