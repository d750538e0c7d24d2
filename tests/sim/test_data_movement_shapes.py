"""Data movement between access patterns of equal element count and different rank is a copy
in element order (as NKI's DMA does); any other shape mismatch is an NkiError naming the kernel
line. No raw numpy exception leaves the simulator, for any data-movement instruction."""

import itertools

import numpy as np
import pytest

from nki_workbench import nki
from nki_workbench._src.errors import NkiError
from nki_workbench.nki import isa as nisa
from nki_workbench.nki import language as nl


def _dma_tile_to_vector(a):
    out = nl.ndarray((128,), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    return out


def _dma_1_into_1x1(a):
    out = nl.ndarray((1, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out


def _store_tile_to_vector(a):
    out = nl.ndarray((128,), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out


def _load_vector_into_column(a):
    out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.sbuf)
    t[...] = nl.load(a.reshape((128, 1)))
    nl.store(out, value=t)
    return out


@pytest.mark.parametrize("kernel, shape, want", [
    (_dma_tile_to_vector, (128, 1), (128,)),
    (_dma_tile_to_vector, (128,), (128,)),
    (_dma_1_into_1x1, (1,), (1, 1)),
    (_store_tile_to_vector, (128, 1), (128,)),
    (_load_vector_into_column, (128,), (128, 1)),
])
def test_equal_counts_different_ranks_copy_in_element_order(kernel, shape, want):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    got = nki.simulate_kernel(nki.jit(kernel), a)
    assert got.shape == want
    np.testing.assert_array_equal(got.ravel(), a.ravel())


def _movers():
    """Each data-movement instruction, moving a [p, f] input into a [128, 8] destination."""
    def dma_copy(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    def load_store(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    def assign_tile(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
        t[...] = nl.load(a)
        nl.store(out, value=t)
        return out

    def nl_copy(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
        t[...] = nl.copy(nl.load(a))
        nl.store(out, value=t)
        return out

    def tensor_copy(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.sbuf)
        t[...] = nisa.tensor_copy(nl.load(a))
        nl.store(out, value=t)
        return out

    def load_transpose2d(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load_transpose2d(a))
        return out

    def dma_transpose(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.dma_transpose(nl.load(a)))
        return out

    def broadcast_to(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.broadcast_to(nl.load(a), shape=(128, 8)))
        return out

    def atomic_rmw(a):
        out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.zeros((128, 8), dtype=a.dtype))
        nl.atomic_rmw(out, value=nl.load(a), op=np.add)
        return out

    return [dma_copy, load_store, assign_tile, nl_copy, tensor_copy, load_transpose2d,
            dma_transpose, broadcast_to, atomic_rmw]


SHAPES = [(128, 8), (128, 4), (128, 16), (64, 8), (8, 128), (128, 1), (1, 8), (128, 2, 4),
          (1024,), (32, 32)]


@pytest.mark.parametrize("mover, shape", list(itertools.product(_movers(), SHAPES)),
                         ids=lambda x: getattr(x, "__name__", None) or "x".join(map(str, x)))
def test_mismatched_shapes_never_leak_a_raw_exception(mover, shape):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    try:
        got = nki.simulate_kernel(nki.jit(mover), a)
    except NkiError as e:
        assert "test_data_movement_shapes.py:" in str(e), str(e)  # the kernel's line
        return
    assert got.shape == (128, 8)
    assert np.isfinite(got).all()  # what ran wrote every element
