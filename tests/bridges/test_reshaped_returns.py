"""A kernel that returns ``out.reshape(...)`` gets that shape back in every path: simulate,
inspect, the backend_config round trip, the JAX bridge and the PyTorch bridge."""

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import inspect, nki, simulate_backend_config
from nki_workbench._src.errors import NkiError


@nki.jit
def doubled_flat(a):
    """Stores a [128, 8] tile into a [128, 8] output and returns it as [1024] (NKI returns
    the view, as the interpolation kernels and a streaming vector-add do)."""
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(a.reshape((128, 8))), 2.0))
    return out.reshape((1024,))


@nki.jit
def two_views(a):
    out = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    keep = nl.ndarray((128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, value=t)
    nl.store(keep, value=nl.add(t, 1.0))
    return out.reshape((2, 64, 8)).reshape((16, 64)), keep


A = np.arange(1024, dtype=np.float32)


def test_simulate_returns_the_reshaped_view():
    got = nki.simulate_kernel(doubled_flat, A)
    assert got.shape == (1024,)
    np.testing.assert_array_equal(got, 2 * A)


def test_chained_reshape_and_a_plain_output():
    a = A.reshape(128, 8)
    flat, keep = nki.simulate_kernel(two_views, a)
    assert flat.shape == (16, 64) and keep.shape == (128, 8)
    np.testing.assert_array_equal(flat, a.reshape(16, 64))
    np.testing.assert_array_equal(keep, a + 1)


def test_inspect_and_backend_config_round_trip():
    insp = inspect(doubled_flat, A)
    assert np.asarray(insp.outputs).shape == (1024,)
    back = simulate_backend_config(insp.backend_config, A)
    assert back.shape == (1024,)
    np.testing.assert_array_equal(back, 2 * A)


def test_jax_bridge_returns_the_reshaped_view():
    jnp = pytest.importorskip("jax.numpy")
    import jax
    for fn in (doubled_flat, jax.jit(lambda x: doubled_flat(x))):
        got = fn(jnp.asarray(A))
        assert got.shape == (1024,)
        np.testing.assert_array_equal(np.asarray(got), 2 * A)


def test_torch_bridge_returns_the_reshaped_view():
    torch = pytest.importorskip("torch")
    got = doubled_flat(torch.from_numpy(A.copy()))
    assert isinstance(got, torch.Tensor) and tuple(got.shape) == (1024,)
    np.testing.assert_array_equal(got.numpy(), 2 * A)
    fake = doubled_flat(torch.empty(1024, device="meta"))  # the op's fake kernel: shapes only
    assert tuple(fake.shape) == (1024,)


def test_returning_a_bitcast_view_is_refused_by_name():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out.view(nl.int32)
    with pytest.raises(NkiError) as e:
        nki.simulate_kernel(k, A.reshape(128, 8))
    assert e.value.code == "err_unsupported_memory" and "bitcast" in str(e.value)
