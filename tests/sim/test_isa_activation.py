"""nki.isa.activation / activation_reduce: the activation table, scale/bias rules and error
codes, ScalarE accumulator registers (reduce_cmd) and the valid-range warnings."""

import ml_dtypes
import numpy as np
import pytest
from scipy import special

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import ActivationRangeWarning, nki

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@nki.jit(mode="simulation")
def k_doc(a, b):
    # the NKI doc example: square(b * 2 + c) cast to bfloat16
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    data = nl.load(a)
    bias = nl.load(b)
    nl.store(out, nisa.activation(op=np.square, data=data, bias=bias, scale=2.0,
                                  dtype=nl.bfloat16))
    return out


def test_activation_doc_example():
    a, b = rand(128, 512), rand(128, 1)
    out = k_doc(a, b)
    assert out.dtype == ml_dtypes.bfloat16
    ref = np.square(a * 2 + b).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=1e-2)


@nki.jit(mode="simulation")
def k_table(a, s):
    o0 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o4 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    outs = (o0, o1, o2, o3, o4)
    x = nl.load(a)
    sc = nl.load(s)
    nl.store(outs[0], nisa.activation(op=nl.exp, data=x, scale=sc))
    nl.store(outs[1], nisa.activation(op=nl.gelu, data=x))
    nl.store(outs[2], nisa.activation(op=nl.copy, data=x, scale=-1.5))
    nl.store(outs[3], nisa.activation(op=nl.sigmoid, data=x))
    nl.store(outs[4], nisa.activation(op=np.tanh, data=x))
    return outs


def test_activation_table_and_vector_scale():
    a, s = rand(64, 32), rand(64, 1)
    o = k_table(a, s)
    np.testing.assert_allclose(o[0], np.exp(a * s), rtol=1e-5)
    np.testing.assert_allclose(o[1], 0.5 * a * (1 + special.erf(a / np.sqrt(2))), atol=1e-5)
    np.testing.assert_allclose(o[2], -1.5 * a, atol=1e-6)
    np.testing.assert_allclose(o[3], special.expit(a), atol=1e-6)
    np.testing.assert_allclose(o[4], np.tanh(a), atol=1e-6)
    ir = nki.trace_kernel(k_table, a, s).kernel
    assert {i.attr("engine") for i in ir.body if getattr(i, "op", "") == "activation"} == \
        {"scalar"}


@nki.jit(mode="simulation")
def k_reduce_chain(a, b):
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    rr = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    res = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    # first call resets and accumulates, second keeps accumulating and reads out
    nisa.activation(op=nl.exp, data=x, reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    t = nisa.activation(op=nl.exp, data=y, reduce_op=np.add, reduce_res=res,
                        reduce_cmd=nisa.reduce_cmd.reduce)
    nl.store(o, t)
    nl.store(r, res)
    res2 = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(op=np.square, data=x, reduce_op=np.add, reduce_res=res2)
    nl.store(rr, res2)
    return o, r, rr


def test_activation_accumulator_registers_and_activation_reduce():
    a, b = rand(128, 64), rand(128, 64)
    o, r, rr = k_reduce_chain(a, b)
    np.testing.assert_allclose(o, np.exp(b), rtol=1e-5)
    np.testing.assert_allclose(r, np.exp(a).sum(1, keepdims=True) + np.exp(b).sum(1, keepdims=True),
                               rtol=1e-4)
    np.testing.assert_allclose(rr, np.square(a).sum(1, keepdims=True), rtol=1e-4)


@nki.jit(mode="simulation", platform_target="trn2")
def k_reduce_max_masked(a):
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(a.shape[0])[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    x = nl.load(a)
    res = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(op=nl.relu, data=x[i_p, i_f], reduce_op=np.max, reduce_res=res,
                           mask=(i_f < 16))
    nl.store(r, res)
    return r


def test_activation_reduce_max_on_trn2_with_mask():
    a = rand(32, 48)
    np.testing.assert_allclose(k_reduce_max_masked(a),
                               np.maximum(a[:, :16], 0).max(1, keepdims=True))


def _kernel(**kw):
    @nki.jit(mode="simulation")
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        t = nl.load(b)
        bias = kw.get("bias", lambda t: None)(t)
        scale = kw.get("scale", lambda t: 1.0)(t)
        nl.store(out, nisa.activation(op=kw.get("op", nl.exp), data=x, bias=bias, scale=scale))
        return out
    return k


@pytest.mark.parametrize("kw, code, bshape, bdtype", [
    (dict(bias=lambda t: t), "err_activation_bias_invalid_type", (128, 1), np.int32),
    (dict(bias=lambda t: 1.0), "err_activation_bias_invalid_type", (128, 1), np.float32),
    (dict(scale=lambda t: t), "err_activation_scale_invalid_type", (128, 1), np.float16),
    (dict(scale=lambda t: "2"), "err_activation_scale_invalid_type", (128, 1), np.float32),
    (dict(scale=lambda t: t), "err_activation_scale_scalar_or_vector", (1, 128), np.float32),
    (dict(scale=lambda t: t), "err_activation_scale_scalar_or_vector", (128, 128), np.float32),
    (dict(bias=lambda t: t), "err_num_partition_mismatch", (64, 1), np.float32),
])
def test_activation_error_codes(kw, code, bshape, bdtype):
    with pytest.raises(nki.NkiError) as e:
        _kernel(**kw)(rand(128, 8), np.ones(bshape, dtype=bdtype))
    assert e.value.code == code
    assert "test_isa_activation.py" in e.value.loc


def test_activation_reciprocal_bias_refused_on_nc_v2():
    k = _kernel(op=nl.reciprocal, bias=lambda t: t)
    with pytest.raises(nki.NkiError, match="NeuronCore-v2"):
        k(rand(128, 8), np.ones((128, 1), np.float32))


def test_activation_unknown_function():
    with pytest.raises(nki.NkiError, match="not an activation function"):
        _kernel(op=np.add)(rand(128, 8), np.ones((128, 1), np.float32))


def test_activation_reduce_add_only_on_nc_v2():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(op=nl.exp, data=nl.load(a), reduce_op=np.max, reduce_res=res)
        nl.store(out, res)
        return out
    with pytest.raises(nki.NkiError, match="must be add"):
        k(rand(8, 8))


def test_activation_out_of_range_warns():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.activation(op=nl.sin, data=nl.load(a)))
        return out
    a = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_allclose(k(a), np.sin(a), atol=1e-6)  # in range: no warning
    with pytest.warns(ActivationRangeWarning, match=r"sin.*valid range"):
        k(a * 4)


def test_activation_psum_accumulation():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        acc = nl.zeros(a.shape, dtype=nl.float32, buffer=nl.psum)
        for _ in nl.sequential_range(3):
            acc += nisa.activation(op=np.square, data=x)
        nl.store(out, acc)
        return out
    a = rand(16, 32)
    np.testing.assert_allclose(k(a), 3 * a * a, rtol=1e-5)
