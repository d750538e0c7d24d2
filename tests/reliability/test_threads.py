"""Tracing from many threads at once: each thread has its own trace context, none leaks.

Every entry point (``simulate_kernel``, ``inspect``, ``simulate_backend_config``, the torch op,
the JAX bridge inline and through its callback) runs 8 threads x 20 cold calls.
"""

import sys
import threading

import numpy as np
import pytest

from nki_workbench import nki
from nki_workbench._src.errors import NkiError
from nki_workbench._src.trace import context as C
from nki_workbench.nki import language as nl


def _fresh_kernel(scale):
    # a new function object each time: no trace cache is shared between calls
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            t = nl.load(a[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(t, scale))
        return out
    return nki.jit(k)


def test_eight_threads_trace_and_simulate_cold_kernels():
    a = np.random.default_rng(0).random((256, 32), dtype=np.float32)

    def call(t, r):
        return nki.simulate_kernel(_fresh_kernel(float(t * 20 + r)), a)

    def check(t, r, got):
        np.testing.assert_allclose(got, a * np.float32(t * 20 + r), rtol=1e-6)

    _hammer(call, check)
    # nothing leaked: this thread has no trace context, and a plain call works
    assert C.current() is None
    np.testing.assert_allclose(nki.simulate_kernel(_fresh_kernel(3.0), a), a * 3, rtol=1e-6)


def test_a_failed_trace_leaves_no_context_behind():
    @nki.jit
    def bad(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a[0:200, :]))  # more partitions than the hardware has
        return out
    with pytest.raises(NkiError):
        nki.simulate_kernel(bad, np.zeros((256, 8), np.float32))
    assert C.current() is None
    with pytest.raises(NkiError, match="err_nki_api_outside_of_nki_kernel"):
        nl.load(np.zeros((2, 2), np.float32))


# ----------------------------------------------------------------------------- other entry points
def _hammer(call, check):
    """8 threads x 20 cold calls of ``call(t, r)``; ``check(t, r, result)`` asserts each result;
    a plain call in this thread afterwards must still work (nothing leaked)."""
    failures, results = [], {}
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # why: switch threads often, inside the traces too

    def work(t):
        for r in range(20):
            try:
                results[(t, r)] = call(t, r)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                failures.append(f"thread {t} round {r}: {type(exc).__name__}: {exc}")
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=300)
        assert not any(th.is_alive() for th in threads), "a thread hung"
    finally:
        sys.setswitchinterval(old)
    assert failures == []
    assert len(results) == 160
    for (t, r), res in results.items():
        check(t, r, res)
    assert C.current() is None
    check(0, 0, call(0, 0))


A = np.random.default_rng(1).random((128, 8), dtype=np.float32)


def _scale(t, r):
    return float(t * 20 + r + 1)


def test_inspect_from_eight_threads():
    from nki_workbench import inspect

    def call(t, r):
        return inspect(_fresh_kernel(_scale(t, r)), A).outputs

    def check(t, r, out):
        np.testing.assert_allclose(out, A * np.float32(_scale(t, r)), rtol=1e-6)
    _hammer(call, check)


def test_simulate_backend_config_from_eight_threads():
    from nki_workbench import inspect, simulate_backend_config

    # one config per (thread, round): every call parses and compiles a new IR
    configs = {(t, r): inspect(_fresh_kernel(_scale(t, r)), A, simulate=False).backend_config
               for t in range(8) for r in range(20)}

    def call(t, r):
        return simulate_backend_config(configs[(t, r)], A)

    def check(t, r, out):
        out = out[0] if isinstance(out, (tuple, list)) else out
        np.testing.assert_allclose(out, A * np.float32(_scale(t, r)), rtol=1e-6)
    _hammer(call, check)


def test_torch_op_from_eight_threads():
    torch = pytest.importorskip("torch")
    from nki_workbench.torch import PyTorchXLAKernel

    a = torch.from_numpy(A)

    def call(t, r):
        k = _fresh_kernel(_scale(t, r)).func
        cfg = PyTorchXLAKernel(k, platform_target="trn1").dump_config(a).backend_config
        (out,) = torch.ops.nki_workbench.kernel_call(cfg, [a])
        return out.numpy()

    def check(t, r, out):
        np.testing.assert_allclose(out, A * np.float32(_scale(t, r)), rtol=1e-6)
    _hammer(call, check)


@pytest.mark.parametrize("backend", [None, "numpy"], ids=["inline", "callback"])
def test_jax_bridge_from_eight_threads(backend):
    jax = pytest.importorskip("jax")
    from nki_workbench import SimParams

    params = SimParams(backend=backend) if backend else None
    a = jax.numpy.asarray(A)

    def call(t, r):
        # a new kernel and a new jax.jit per call: every call traces, lowers and compiles
        k = nki.jit(_fresh_kernel(_scale(t, r)).func, mode="jax", sim_params=params)
        return np.asarray(jax.jit(lambda x: k(x))(a))

    def check(t, r, out):
        np.testing.assert_allclose(out, A * np.float32(_scale(t, r)), rtol=1e-6)
    _hammer(call, check)
