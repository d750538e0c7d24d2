"""nki.tensor methods (nki-api.md §1.6): shape/dtype/ndim/itemsize, reshape, view, astype,
broadcast_to, expand_dims, assert_shape and indexing forms."""

import ml_dtypes
import numpy as np

import nki_workbench.nki.language as nl
from nki_workbench import nki


def test_properties_and_methods():
    seen = {}

    def k(a):
        seen.update(shape=a.shape, dtype=a.dtype, ndim=a.ndim, itemsize=a.itemsize)
        out = nl.ndarray((4, 128, 16), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a.reshape((128, 2, 8))[:, 1, :])          # reshape view + int index
        seen["t"] = t.shape
        nl.store(out[0, :, 0:8], t)
        nl.store(out[0, :, 8:16], t)
        nl.store(out[1], nl.load(a).astype(nl.float32))       # astype copy
        row = nl.load(a[0:1, :])
        nl.store(out[2], row.broadcast_to((128, 16)))          # partition broadcast
        e = nl.load(a[:, 0:1]).expand_dims(2)                 # [128, 1, 1]
        seen["e"] = e.shape
        nl.store(out[3], nl.load(a.view(nl.int32)).astype(nl.float32))  # bitcast view
        return out

    a = np.arange(128 * 16, dtype=np.float32).reshape(128, 16)
    out = nki.simulate_kernel(k, a)
    assert seen["shape"] == (128, 16) and seen["dtype"] == np.float32
    assert seen["ndim"] == 2 and seen["itemsize"] == 4
    assert seen["t"] == (128, 8) and seen["e"] == (128, 1, 1)
    np.testing.assert_array_equal(out[0][:, :8], a[:, 8:16])
    np.testing.assert_array_equal(out[0][:, 8:], a[:, 8:16])
    np.testing.assert_array_equal(out[1], a)
    np.testing.assert_array_equal(out[2], np.broadcast_to(a[0:1], (128, 16)))
    np.testing.assert_array_equal(out[3], a.view(np.int32).astype(np.float32))


def test_indexing_forms_agree():
    """Slices, nl.ds, arange grids and mgrid address the same elements."""
    def k(a):
        out = nl.ndarray((4, 64, 32), a.dtype, buffer=nl.shared_hbm)
        i = 1
        nl.store(out[0], nl.load(a[64:128, 32:64]))
        nl.store(out[1], nl.load(a[nl.ds(i * 64, 64), nl.ds(32, 32)]))
        ip, jf = nl.arange(64)[:, None], nl.arange(32)[None, :]
        nl.store(out[2], nl.load(a[64 + ip, 32 + jf]))
        g = nl.mgrid[64:128, 32:64]
        nl.store(out[3], nl.load(a[g.p, g.x]))
        return out

    a = np.random.default_rng(0).random((128, 64), dtype=np.float32)
    out = nki.simulate_kernel(k, a)
    for n in range(4):
        np.testing.assert_array_equal(out[n], a[64:128, 32:64])


def test_strided_and_reversed_access():
    def k(a):
        out = nl.ndarray((3, 128, 32), a.dtype, buffer=nl.shared_hbm)
        ip, jf = nl.arange(128)[:, None], nl.arange(32)[None, :]
        t = nl.load(a)
        nl.store(out[0], nl.copy(t[ip, 2 * jf]))          # even columns
        nl.store(out[1], nl.copy(t[ip, 2 * jf + 1]))      # odd columns
        nl.store(out[2], nl.copy(t[:, 63:31:-1]))        # reversed slice
        return out

    a = np.random.default_rng(1).random((128, 64), dtype=np.float32)
    out = nki.simulate_kernel(k, a)
    np.testing.assert_array_equal(out[0], a[:, 0::2])
    np.testing.assert_array_equal(out[1], a[:, 1::2])
    np.testing.assert_array_equal(out[2], a[:, 63:31:-1])


def test_tile_operators_and_inplace():
    def k(a, b):
        out = nl.ndarray((6, 128, 8), nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        nl.store(out[0], x * y - 1.0)
        nl.store(out[1], 2.0 / (x + 1.0))
        nl.store(out[2], -x)
        nl.store(out[3], nl.where(x > y, 1.0, 0.0))
        z = nl.zeros((128, 8), nl.float32)
        z += x
        z *= 3.0
        z -= y
        nl.store(out[4], z)
        w = nl.copy(x)
        w[:, 0:4] = y[:, 0:4]
        nl.store(out[5], w)
        return out

    rng = np.random.default_rng(2)
    a, b = rng.random((128, 8), np.float32), rng.random((128, 8), np.float32)
    out = nki.simulate_kernel(k, a, b)
    np.testing.assert_allclose(out[0], a * b - 1, rtol=1e-6)
    np.testing.assert_allclose(out[1], 2 / (a + 1), rtol=1e-6)
    np.testing.assert_array_equal(out[2], -a)
    np.testing.assert_array_equal(out[3], (a > b).astype(np.float32))
    np.testing.assert_allclose(out[4], a * 3 - b, rtol=1e-6)
    np.testing.assert_array_equal(out[5], np.concatenate([b[:, :4], a[:, 4:]], axis=1))


def test_int_bitwise_and_shift():
    def k(a):
        out = nl.ndarray((4, 128, 8), nl.int32, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(out[0], t & 0xF0)
        nl.store(out[1], t | 1)
        nl.store(out[2], t << 2)
        nl.store(out[3], nl.right_shift(t, 1))
        return out

    a = np.random.default_rng(3).integers(0, 1 << 20, (128, 8)).astype(np.int32)
    out = nki.simulate_kernel(k, a)
    np.testing.assert_array_equal(out[0], a & 0xF0)
    np.testing.assert_array_equal(out[1], a | 1)
    np.testing.assert_array_equal(out[2], a << 2)
    np.testing.assert_array_equal(out[3], a >> 1)


def test_bf16_tile_view_round_trip():
    def k(a):
        out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(nl.load(a)))
        return out

    a = np.random.default_rng(4).random((128, 32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(nki.simulate_kernel(k, a), a)


def test_store_to_a_single_element_with_integer_indices():
    def k(a):
        out = nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        for i in nl.affine_range(4):
            for j in nl.affine_range(4):
                nl.store(out[i, j], t[0:1, 0:1])
        return out

    a = np.full((1, 1), 7.0, np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(k, a), np.full((4, 4), 7.0))
