"""The off-Neuron policy: an @nki.jit kernel (mode auto) called with jax values inside a jitted
JAX program on CPU runs in the simulator through the JAX bridge."""

import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import nki_workbench.nki.language as nl  # noqa: E402
from nki_workbench import nki  # noqa: E402
from nki_workbench._src.dispatch import _native_mode_map, compute_mode  # noqa: E402


@nki.jit
def add_one(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), 1.0))
    return out


def test_compute_mode_stays_exact_off_neuron():
    x = jnp.ones((128, 4), jnp.float32)
    assert compute_mode((x,), {}, "auto") is _native_mode_map["baremetal"]


def test_auto_kernel_inside_jax_jit_on_cpu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the documented "Unable to read MLA target" fallback
        f = jax.jit(lambda x: add_one(x * 2.0) + 1.0)
        x = jnp.arange(512, dtype=jnp.float32).reshape(128, 4)
        np.testing.assert_allclose(np.asarray(f(x)), np.asarray(x) * 2 + 2)
