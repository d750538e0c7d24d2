"""``nl.loop_reduce`` with NKI's semantics: the destination is the accumulator (dst = op(dst, x)),
reduced only over the named loops; every other enclosing loop keeps its own accumulator."""

import numpy as np
import pytest
from backends import run_both

from nki_workbench import nki
from nki_workbench._src.errors import NkiError
from nki_workbench.nki import language as nl


@nki.jit
def blocked_sum(a):
    """out[m] = sum over k2 of the k2-th column block of a[m]; the reduced loop is outermost."""
    nm, p, f = a.shape
    nk = f // 64
    out = nl.ndarray((nm, p, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    z = nl.zeros((nm, nl.par_dim(p), 64), dtype=nl.float32, buffer=nl.sbuf)
    for k2 in nl.affine_range(nk):
        for m1 in nl.affine_range(nm):
            t = nl.load(a[m1, :, k2 * 64:(k2 + 1) * 64])
            z[m1, :, :] = nl.loop_reduce(t, op=np.add, loop_indices=[k2], dtype=nl.float32)
    for m1 in nl.affine_range(nm):
        nl.store(out[m1], value=z[m1])
    return out


@nki.jit
def between_max(a):
    """The reduced loop between two loops that are not reduced over; op = maximum."""
    nb, nk, nh, p, f = a.shape
    out = nl.ndarray((nb, nh, p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    for b in nl.affine_range(nb):
        z = nl.full((nh, nl.par_dim(p), f), -np.inf, dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(nk):
            for h in nl.affine_range(nh):
                t = nl.load(a[b, k, h])
                z[h, :, :] = nl.loop_reduce(t, op=np.maximum, loop_indices=[k],
                                            dtype=nl.float32)
        for h in nl.affine_range(nh):
            nl.store(out[b, h], value=z[h])
    return out


@nki.jit
def into_named_tile(a):
    """The documented form: ``b = nl.zeros(...)`` then ``b = nl.loop_reduce(a, ...)``."""
    nk, p, f = a.shape
    out = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    b = nl.full((p, f), 1.0, dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(nk):
        t = nl.load(a[k])
        b = nl.loop_reduce(t, op=np.add, loop_indices=[k], dtype=nl.float32)
    nl.store(out, value=b)
    return out


def _both(kernel, a, ref):
    _, _, interp, compiled = run_both(kernel, a)
    for got in (interp, compiled):
        (got,) = got.values()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_outer_reduced_loop_keeps_one_accumulator_per_inner_iteration():
    a = np.random.default_rng(0).random((4, 128, 192), dtype=np.float32)
    ref = a.reshape(4, 128, 3, 64).sum(axis=2)
    _both(blocked_sum, a, ref)
    got = nki.simulate_kernel(blocked_sum, a)
    for m in range(4):  # every outer iteration equals numpy (the bug gave 1x, 2x, 3x, 4x)
        np.testing.assert_allclose(got[m], ref[m], rtol=1e-5, atol=1e-4)


def test_reduced_loop_between_other_loops():
    a = np.random.default_rng(1).standard_normal((2, 3, 2, 128, 32)).astype(np.float32)
    ref = a.max(axis=1)
    _both(between_max, a, ref)


def test_named_tile_is_the_accumulator():
    a = np.random.default_rng(2).random((5, 128, 16), dtype=np.float32)
    _both(into_named_tile, a, 1.0 + a.sum(axis=0))


def test_new_accumulator_shared_by_an_unreduced_loop_is_an_error():
    @nki.jit
    def shared(a):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        for k in nl.affine_range(2):
            for m in nl.affine_range(2):
                t = nl.load(a[m, k])
                r = nl.loop_reduce(t, op=np.add, loop_indices=[k], dtype=nl.float32)
                nl.store(out, value=r)
        return out
    with pytest.raises(NkiError, match="shared by every iteration of loop 'm'") as info:
        nki.simulate_kernel(shared, np.zeros((2, 2, 128, 64), np.float32))
    assert "test_loop_reduce.py:" in str(info.value)


def test_destination_of_another_shape_is_an_error():
    @nki.jit
    def wide(a):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        z = nl.zeros((nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(2):
            t = nl.load(a[k, :, 0:1])
            z[:, :] = nl.loop_reduce(t, op=np.add, loop_indices=[k], dtype=nl.float32)
        nl.store(out, value=z)
        return out
    with pytest.raises(NkiError, match="destination is the accumulator"):
        nki.simulate_kernel(wide, np.zeros((2, 128, 64), np.float32))
