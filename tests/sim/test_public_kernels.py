"""Public-style NKI kernels (through the compat alias) against numpy, with NKI's tolerances."""

import io
import warnings
from contextlib import redirect_stdout

import kernels_public as K
import ml_dtypes
import numpy as np
import pytest

from nki_workbench import BlockDimensionWarning, CompiledFallbackWarning, nki

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def tol(dtype):
    # NKI's own tests: fp32 atol 1e-4..1e-5, bf16 samples 1e-2
    return dict(atol=1e-4, rtol=1e-4) if dtype == np.float32 else dict(atol=2e-2, rtol=2e-2)


@pytest.fixture(autouse=True)
def _no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # @nki.jit kernels called with numpy run the simulator on this machine (one notice)
        warnings.filterwarnings("ignore", message=".*no `neuronx-cc` compiler")
        # under NKI_WORKBENCH_SIM_BACKEND=jax a kernel with an interpreter-only opcode
        # (device_print) runs in the interpreter: a documented notice, once per kernel
        warnings.filterwarnings("ignore", category=CompiledFallbackWarning)
        yield


def test_tensor_add():
    a, b = rand(128, 512), rand(128, 512)
    np.testing.assert_allclose(K.tensor_add(a, b), a + b, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 127, 300])
def test_tensor_add_ragged_masked(rows):
    a, b = rand(rows, 100), rand(rows, 100)
    np.testing.assert_allclose(K.tensor_add_ragged(a, b), a + b, atol=1e-6)


def test_tensor_add_spmd_2d_grid():
    a, b = rand(256, 1536), rand(256, 1536)
    np.testing.assert_allclose(K.tensor_add_spmd[2, 3](a, b), a + b, atol=1e-6)
    # through simulate_kernel too
    np.testing.assert_allclose(nki.simulate_kernel(K.tensor_add_spmd[2, 3], a, b), a + b)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_matmul_basic(dtype):
    lhsT, rhs = rand(128, 64, dtype=dtype), rand(128, 512, dtype=dtype)
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    out = K.matmul_basic(lhsT, rhs)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.astype(np.float32), ref, **tol(dtype))


@pytest.mark.parametrize("kernel", [K.matmul_tiled, K.matmul_hoisted, K.matmul_block_free],
                         ids=["tiled", "hoisted", "block_free"])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_matmul_variants(kernel, dtype):
    lhsT, rhs = rand(256, 256, dtype=dtype), rand(256, 1024, dtype=dtype)
    a32, b32 = lhsT.astype(np.float32), rhs.astype(np.float32)
    ref = a32.T @ b32
    if kernel is K.matmul_block_free:
        # this variant accumulates K tiles in an SBUF tile of the input dtype: round per step
        ref = np.zeros_like(ref).astype(dtype)
        for k in range(2):
            part = a32[k * 128:(k + 1) * 128].T @ b32[k * 128:(k + 1) * 128]
            ref = (ref.astype(np.float32) + part).astype(dtype)
        ref = ref.astype(np.float32)
    if kernel is not K.matmul_tiled:
        # these samples keep SBUF tiles with block dims: deprecated since NKI 2.23, a warning
        # when first traced (tests/reliability/test_rejections.py pins it)
        warnings.filterwarnings("ignore", category=BlockDimensionWarning)
    out = kernel(lhsT, rhs)
    np.testing.assert_allclose(out.astype(np.float32), ref, **tol(dtype))


def test_transpose2d():
    a = rand(128, 6 * 4)
    out = K.transpose2d(a, (6, 4))
    ref = a.reshape(128, 6, 4).transpose(0, 2, 1).reshape(128, 24)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("kernel", [K.softmax_kernel, K.softmax_builtin], ids=["manual", "nl"])
def test_softmax(kernel):
    x = rand(256, 384, lo=-4, hi=4)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(kernel(x), e / e.sum(axis=1, keepdims=True), atol=1e-5)


def test_layernorm():
    x, g, b = rand(256, 96), rand(96), rand(96)
    eps = 1e-5
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    ref = (x - mu) / np.sqrt(var + eps) * g + b
    np.testing.assert_allclose(K.layernorm(x, g, b, eps), ref, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("rows", [256, 200])
def test_rmsnorm(rows):
    a, g = rand(rows, 64), rand(64)
    ref = a / np.sqrt((a * a).mean(axis=1, keepdims=True)) * g
    np.testing.assert_allclose(K.rmsnorm(a, g), ref, atol=1e-4, rtol=1e-2)


def test_rmsnorm_builtin():
    a, g = rand(256, 64), rand(64)
    ref = a / np.sqrt((a * a).mean(axis=1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(K.rmsnorm_builtin(a, g), ref, atol=1e-4, rtol=1e-3)


def test_average_pool2d():
    x = rand(64, 8, 12)
    ref = x.reshape(64, 4, 2, 6, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(K.avgpool2d(x, 2), ref, atol=1e-6)


def test_mamba_scan_sequential():
    c, s = 64, 24
    delta, u, A = rand(c, s, lo=0, hi=0.5), rand(c, s), rand(c, 1, lo=-1, hi=0)
    h = np.zeros((c, 1), np.float32)
    ref = np.zeros((c, s), np.float32)
    for t in range(s):
        h = np.exp(delta[:, t:t + 1] * A) * h + delta[:, t:t + 1] * u[:, t:t + 1]
        ref[:, t:t + 1] = h
    np.testing.assert_allclose(K.mamba_scan(delta, u, A), ref, atol=1e-5, rtol=1e-4)


def test_flash_attention_online_softmax():
    d, sq, sk = 64, 256, 384
    q, k, v = rand(d, sq), rand(d, sk), rand(sk, d)
    scale = 1 / np.sqrt(d)
    s = (q.T @ k) * scale
    p = np.exp(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v
    np.testing.assert_allclose(K.flash_attn_fwd(q, k, v, scale), ref, atol=1e-4, rtol=1e-3)


def test_legacy_calling_convention_fills_output():
    a = rand(128, 256)
    b = np.zeros_like(a)
    assert nki.simulate_kernel(K.legacy_exp, a, b) is None
    np.testing.assert_allclose(b, np.exp(a), rtol=1e-6)
    c = np.zeros_like(a)
    nki.simulate_kernel(nki.trace(K.legacy_exp), a, c)
    np.testing.assert_allclose(c, np.exp(a), rtol=1e-6)


def test_no_input_kernel():
    np.testing.assert_array_equal(K.no_input_kernel(), np.full((128, 64), 10.0, np.float32))


def test_tuple_outputs():
    a = rand(128, 32)
    s, m = K.tuple_outputs(a)
    np.testing.assert_allclose(s, 1 / (1 + np.exp(-a)), atol=1e-6)
    np.testing.assert_allclose(m, a.max(1, keepdims=True))


@pytest.mark.parametrize("fp8", [ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2])
def test_fp8_inputs(fp8):
    lhsT, rhs = rand(128, 64).astype(fp8), rand(128, 256).astype(fp8)
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    np.testing.assert_allclose(K.fp8_matmul(lhsT, rhs), ref, atol=1e-4, rtol=1e-4)


def test_where_and_compare():
    a, b = rand(128, 64), rand(128, 64)
    np.testing.assert_allclose(K.where_compare(a, b), np.where(a > b, a, b * 2))


def test_reductions():
    a = rand(128, 16, lo=0.5, hi=1.5)
    ref = np.stack([a.max(1), a.min(1), a.prod(1), a.mean(1)], axis=1)
    np.testing.assert_allclose(K.reductions(a), ref, rtol=1e-5)


def test_loop_reduce():
    a = rand(512, 64)
    np.testing.assert_allclose(K.loop_reduce_kernel(a), a.reshape(4, 128, 64).sum(0),
                               atol=1e-5)


def test_indirect_gather():
    data = rand(256, 32)
    idx = RNG.integers(0, 256, size=(64,)).astype(np.int32)
    np.testing.assert_array_equal(K.indirect_gather(data, idx), data[idx])


def test_dict_args_and_constant_scalar():
    x, w = rand(128, 16), rand(128, 16)
    np.testing.assert_allclose(K.dict_args({"x": x, "w": w}, 3.0), (x + w) * 3.0, rtol=1e-6)


def test_identity_transpose():
    a = rand(128, 96)
    np.testing.assert_allclose(K.identity_transpose(a), a.T, atol=1e-6)


def test_sequential_accumulate():
    a = rand(512, 32)
    np.testing.assert_allclose(K.sequential_accumulate(a), a.reshape(4, 128, 32).sum(0),
                               atol=1e-5)


def test_gelu_family():
    from scipy.special import erf
    a = rand(128, 64, lo=-3, hi=3)
    out = K.gelu_family(a)
    np.testing.assert_allclose(out[0], 0.5 * a * (1 + erf(a / np.sqrt(2))), atol=1e-5)
    np.testing.assert_allclose(out[1], a / (1 + np.exp(-a)), atol=1e-5)
    np.testing.assert_allclose(out[2], np.log1p(np.exp(a)), atol=1e-5)
    np.testing.assert_allclose(out[3], erf(a), atol=1e-5)


def test_mutable_parameter_updated_in_place_and_returned():
    a, b = rand(128, 16), rand(128, 16)
    out = K.mutable_update(a.copy(), b)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_static_range_unrolls():
    a = rand(384, 8)
    ref = a * np.repeat(np.arange(1, 4, dtype=np.float32), 128)[:, None]
    np.testing.assert_allclose(K.static_unrolled(a), ref, rtol=1e-6)
    ir = nki.trace_kernel(K.static_unrolled, a).text
    assert "for " not in ir and ir.count("= load(") == 3


def test_device_print_goes_to_stdout():
    @nki.jit(mode="simulation")
    def k(a):
        import neuronxcc.nki.language as nl
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.device_print("value of t:", t)
        nl.store(out, t)
        return out

    buf = io.StringIO()
    with redirect_stdout(buf):
        k(np.arange(4, dtype=np.float32).reshape(2, 2))
    assert "value of t:" in buf.getvalue() and "3." in buf.getvalue()


def test_mamba_with_isa_instructions():
    """activation(scale=per-partition vector), tensor_tensor, tensor_tensor_scan, block dims."""
    b_, ch, seq, n = 2, 256, 64, 4
    delta, u = rand(b_, ch, seq, lo=0, hi=0.1), rand(b_, ch, seq)
    A, B, C = -rand(ch, n, lo=0.5, hi=1), rand(b_, n, seq), rand(b_, n, seq)
    ref = np.zeros((b_, ch, seq), np.float32)
    for b in range(b_):
        for s in range(n):
            dA = np.exp(delta[b] * A[:, s:s + 1])
            dBu = delta[b] * u[b] * B[b, s]
            h = np.zeros(ch, np.float32)
            for t in range(seq):
                h = dA[:, t] * h + dBu[:, t]
                ref[b, :, t] += h * C[b, s, t]
    np.testing.assert_allclose(K.mamba_isa(delta, u, A, B, C), ref, atol=1e-5, rtol=1e-4)
