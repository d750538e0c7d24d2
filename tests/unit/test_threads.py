"""Tracing from many threads at once: each thread has its own trace context, none leaks."""

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
    failures, results = [], {}
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # why: switch threads often, inside the traces too

    def work(t):
        for r in range(20):
            scale = float(t * 20 + r)
            try:
                results[(t, r)] = (scale, nki.simulate_kernel(_fresh_kernel(scale), a))
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
    for scale, got in results.values():
        np.testing.assert_allclose(got, a * np.float32(scale), rtol=1e-6)
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
