"""The calibration kernels (bench/calibration_kernels.py) compute what they claim (numpy refs)."""

import importlib.util
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

from nki_workbench._src.hw import get_target
from nki_workbench._src.runtime import simulate

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _ck():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("calibration_kernels",
                                                  ROOT / "bench" / "calibration_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CK = _ck()


def _pool_ref(x, oh, ow):
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            h0, h1 = (i * h) // oh, ((i + 1) * h + oh - 1) // oh
            w0, w1 = (j * w) // ow, ((j + 1) * w + ow - 1) // ow
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("shape, oh, ow", [((1, 64, 14, 14), 7, 7), ((2, 128, 9, 11), 3, 4),
                                           ((1, 32, 130, 6), 1, 1)])
def test_adaptive_avg_pool2d(shape, oh, ow):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = simulate(CK.adaptive_avg_pool2d, (x, oh, ow))
    np.testing.assert_allclose(got, _pool_ref(x, oh, ow), rtol=1e-4, atol=1e-4)


def test_resize_nearest():
    x = np.random.default_rng(1).standard_normal((2, 6, 5, 16)).astype(np.float32)
    got = simulate(CK.resize_nearest, (x, (2, 11, 9, 16)))
    rows = np.floor(np.arange(11) * (6 / 11)).astype(int)
    cols = np.floor(np.arange(9) * (5 / 9)).astype(int)
    np.testing.assert_array_equal(got, x[:, rows][:, :, cols])


def test_rmsnorm_matmul():
    rng = np.random.default_rng(2)
    h = rng.standard_normal((1, 256, 256)).astype(np.float32)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    got = simulate(CK.rmsnorm_matmul, (h, w))
    ref = (h / np.sqrt((h * h).mean(axis=-1, keepdims=True))) @ w
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)


def test_sd_attention():
    rng = np.random.default_rng(3)
    d, s = 32, 256
    q = rng.standard_normal((1, d, s)).astype(np.float32)
    k = rng.standard_normal((1, s, d)).astype(np.float32)
    v = rng.standard_normal((1, s, d)).astype(np.float32)
    got = simulate(CK.sd_attention, (q, k, v))
    sc = (q[0].T * 0.125) @ k[0].T
    p = np.exp(sc - sc.max(axis=1, keepdims=True))
    ref = (p / p.sum(axis=1, keepdims=True)) @ v[0]
    np.testing.assert_allclose(got[0], ref, rtol=2e-2, atol=2e-2)  # bf16 TensorE operands


def _mamba_ref(delta, u, a, b, c):
    bsz, ch, s = delta.shape
    out = np.zeros_like(delta)
    for n in range(a.shape[1]):
        da = np.exp(delta * a[None, :, n, None])
        dbu = delta * u * b[:, None, n, :]
        h = np.zeros((bsz, ch), np.float32)
        for t in range(s):
            h = da[:, :, t] * h + dbu[:, :, t]
            out[:, :, t] += h * c[:, n, t][:, None]
    return out


@pytest.mark.parametrize("version", [1, 2, 3])
def test_mamba_versions(version):
    rng = np.random.default_rng(4)
    ch, s, n = 128, 64, 3
    delta = rng.random((1, ch, s), dtype=np.float32) * 0.1
    u = rng.standard_normal((1, ch, s)).astype(np.float32)
    a = -rng.random((ch, n), dtype=np.float32)
    b = rng.standard_normal((1, n, s)).astype(np.float32)
    c = rng.standard_normal((1, n, s)).astype(np.float32)
    got = simulate(CK.mamba, (delta, u, a, b, c, version, 32))
    np.testing.assert_allclose(got, _mamba_ref(delta, u, a, b, c), rtol=1e-4, atol=1e-4)


def test_matmul_blocked():
    rng = np.random.default_rng(5)
    lhs_t = rng.random((512, 256), dtype=np.float32).astype(ml_dtypes.bfloat16)
    rhs = rng.random((512, 1024), dtype=np.float32).astype(ml_dtypes.bfloat16)
    got = simulate(CK.matmul_blocked, (lhs_t, rhs, 2, 1, 2)).astype(np.float32)
    ref = lhs_t.astype(np.float32).T @ rhs.astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-1)  # bf16 accumulators


def test_micro_kernels():
    x = np.linspace(-1, 1, 128, dtype=np.float32).reshape(128, 1)
    np.testing.assert_allclose(simulate(CK.dependent_chain, (x, 5)), x, rtol=1e-6)
    y = np.linspace(-2, 2, 4 * 4096, dtype=np.float32).reshape(4, 4096)
    np.testing.assert_allclose(simulate(CK.dma_exp, (y,)), np.exp(y), rtol=1e-5)


def test_fp8_double_row_matmul():
    rng = np.random.default_rng(6)
    m, k, n = 256, 1024, 1024
    lhs = rng.random((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    rhs = rng.random((k, n), dtype=np.float32)
    cscale = np.abs(rhs).max(axis=0, keepdims=True) / 240
    rq = (rhs / cscale).astype(ml_dtypes.float8_e4m3)
    pairs = np.zeros((k // 2, 2 * n), ml_dtypes.float8_e4m3)
    for t in range(k // 256):
        for j in range(n // 512):
            rows = slice(t * 128, (t + 1) * 128)
            pairs[rows, j * 1024:j * 1024 + 512] = rq[2 * t * 128:(2 * t + 1) * 128,
                                                      j * 512:(j + 1) * 512]
            pairs[rows, j * 1024 + 512:(j + 1) * 1024] = rq[(2 * t + 1) * 128:(2 * t + 2) * 128,
                                                            j * 512:(j + 1) * 512]
    scale = np.broadcast_to(cscale, (128, n)).astype(ml_dtypes.bfloat16)
    got = simulate(CK.fp8_double_row_matmul, (lhs, pairs, scale, 2, 2, 4),
                   target=get_target("trn2")).astype(np.float32)
    ref = lhs.astype(np.float32) @ rhs
    np.testing.assert_allclose(got, ref, rtol=0.08, atol=0.08 * np.abs(ref).max())  # fp8


def test_silu_stream():
    x = np.random.default_rng(7).standard_normal((128, 2, 2048)).astype(np.float32)
    got = simulate(CK.silu_stream, (x,))
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)), rtol=1e-4, atol=1e-5)


def test_adamw_stream():
    rng = np.random.default_rng(8)
    th, g, m = (rng.standard_normal((200, 2048)).astype(np.float32) for _ in range(3))
    v = rng.random((200, 2048)).astype(np.float32)
    got = simulate(CK.adamw_stream, (th, g, m, v))
    m1 = 0.9 * m + 0.1 * g
    v1 = 0.999 * v + 1e-3 * g * g
    want = th - 1e-5 * th - 0.01 * m1 / (np.sqrt(1000.0 * v1) + 1e-8)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_rope_halves():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((128, 1024)).astype(np.float32)
    cos, sin = (rng.standard_normal((64, 1024)).astype(np.float32) for _ in range(2))
    got = simulate(CK.rope_halves, (x, cos, sin))
    want = np.concatenate([x[:64] * cos - x[64:] * sin, x[64:] * cos + x[:64] * sin])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
