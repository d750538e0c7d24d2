"""Simulator and tracer speed, measured side by side with numpy in one run.

Prints, for each workload, the best-of-N wall time of the simulator (trace cached) and of the
equivalent numpy code, and their ratio; then the trace time of the same kernel with a loop of 16
vs 1024 iterations (loops stay loops, so it should be flat).

Targets (issue 2): matmul <= 2x numpy, softmax/rmsnorm <= 3x numpy.
"""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np

import nki_workbench
import nki_workbench.nki.language as nl
from nki_workbench import nki

BF16 = ml_dtypes.bfloat16


@nki.jit(mode="simulation")
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                b = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nl.matmul(a, b, transpose_x=True)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512],
                     value=nl.copy(acc, dtype=result.dtype))
    return result


@nki.jit(mode="simulation")
def softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        e = nl.exp(nl.subtract(t, nl.max(t, axis=1, keepdims=True)))
        nl.store(out[i * 128:(i + 1) * 128, :],
                 value=nl.divide(e, nl.sum(e, axis=1, keepdims=True)))
    return out


@nki.jit(mode="simulation")
def rmsnorm(a, g):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    d = a.shape[1]
    gt = nl.load(g.reshape((1, d))).broadcast_to((128, d))
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        ms = nl.sum(nl.square(t), axis=1, keepdims=True)
        r = nl.rsqrt(nl.multiply(ms, 1.0 / d))
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(nl.multiply(t, r), gt))
    return out


def best(fn, reps=15):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def loop_kernel(n):
    def k(a):
        out = nl.ndarray((128, 4 * n), dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(n):
            t = nl.load(a[:, nl.ds(i * 4, 4)])
            nl.store(out[:, nl.ds(i * 4, 4)], value=nl.exp(t))
        return out
    return k


def main():
    nki_workbench.tune_malloc()  # why: benchmarks measure the tuned heap (opt-in)
    rng = np.random.default_rng(0)
    rows = []
    a = rng.standard_normal((1024, 1024)).astype(BF16)
    b = rng.standard_normal((1024, 1024)).astype(BF16)
    sim = best(lambda: matmul_tiled(a, b))
    ref = best(lambda: (a.astype(np.float32).T @ b.astype(np.float32)).astype(BF16))
    rows.append(("bf16 1024^3 tiled matmul (128x128x512 tiles)", sim, ref, 2.0))
    x = rng.standard_normal((1024, 1024)).astype(np.float32)
    g = rng.standard_normal(1024).astype(np.float32)

    def np_softmax():
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    rows.append(("softmax 1024x1024 fp32", best(lambda: softmax(x)), best(np_softmax), 3.0))
    rows.append(("rmsnorm 1024x1024 fp32", best(lambda: rmsnorm(x, g)),
                 best(lambda: x / np.sqrt((x * x).mean(1, keepdims=True)) * g), 3.0))
    print(f"{'workload':48s} {'sim ms':>8s} {'numpy ms':>9s} {'ratio':>6s} {'target':>7s}")
    for name, s, r, target in rows:
        print(f"{name:48s} {s * 1e3:8.2f} {r * 1e3:9.2f} {s / r:6.2f} {target:6.1f}x")
    a16 = np.zeros((128, 64), np.float32)
    a1k = np.zeros((128, 4096), np.float32)
    t16 = best(lambda: nki.trace_kernel(loop_kernel(16), a16), reps=5)
    t1k = best(lambda: nki.trace_kernel(loop_kernel(1024), a1k), reps=5)
    print(f"trace time, loop of 16 iterations:   {t16 * 1e3:7.2f} ms")
    print(f"trace time, loop of 1024 iterations: {t1k * 1e3:7.2f} ms  (ratio {t1k / t16:.2f})")


if __name__ == "__main__":
    main()
