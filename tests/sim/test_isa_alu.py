"""nki.isa ALU instructions against numpy references written from the documented semantics:
tensor_tensor, tensor_scalar, scalar_tensor_tensor, tensor_tensor_scan, tensor_reduce,
tensor_partition_reduce, tensor_scalar_reduce, reciprocal."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import nki

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def engine_of(kernel, *args, op):
    ir = nki.trace_kernel(kernel, *args).kernel
    found = []

    def walk(body):
        for s in body:
            if hasattr(s, "body"):
                walk(s.body)
            elif getattr(s, "op", None) == op:
                found.append(s.attr("engine"))
    walk(ir.body)
    return found


# ----------------------------------------------------------------------------- tensor_tensor
@nki.jit(mode="simulation")
def k_tensor_tensor(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(out, nisa.tensor_tensor(x, y, op=np.subtract))
    return out


@nki.jit(mode="simulation")
def k_tensor_tensor_ops(a, b):
    o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(o1, nisa.tensor_tensor(x, y, op=nl.maximum))
    nl.store(o2, nisa.tensor_tensor(x, y, op=np.greater, dtype=nl.float32))
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    t = nl.zeros((128, 64), dtype=nl.float32)
    t[...] = nisa.tensor_tensor(x, y, op=np.multiply, mask=(i_p < 64) & (i_f < 64))
    nl.store(o3[i_p, i_f], t, mask=(i_p < 64))
    return o1, o2, o3


def test_tensor_tensor_subtract():
    a, b = rand(128, 512), rand(128, 512)
    np.testing.assert_allclose(k_tensor_tensor(a, b), a - b, atol=1e-5)
    assert engine_of(k_tensor_tensor, a, b, op="tensor_tensor") == ["vector"]


def test_tensor_tensor_ops_and_mask():
    a, b = rand(128, 64), rand(128, 64)
    o1, o2, o3 = k_tensor_tensor_ops(a, b)
    np.testing.assert_allclose(o1, np.maximum(a, b))
    np.testing.assert_array_equal(o2, (a > b).astype(np.float32))
    np.testing.assert_allclose(o3, a[:64] * b[:64], atol=1e-6)


@nki.jit(mode="simulation")
def k_tt_int(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_tensor(nl.load(a), nl.load(b), op=np.add))
    return out


def test_tensor_tensor_int32_add_is_exact_on_gpsimd():
    a = np.full((4, 8), 2**30 + 1, dtype=np.int32)
    b = np.full((4, 8), 2**30 + 3, dtype=np.int32)
    out = k_tt_int(a, b)
    expect = (a.astype(np.int64) + b).astype(np.int32)  # 32-bit wrap-around
    np.testing.assert_array_equal(out, expect)
    assert engine_of(k_tt_int, a, b, op="tensor_tensor") == ["gpsimd"]


@nki.jit(mode="simulation")
def k_tt_bits(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_tensor(nl.load(a), nl.load(b), op=np.bitwise_xor))
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_tensor_tensor_bitvec_is_bit_exact(x, y):
    a = np.full((2, 4), x, dtype=np.int32)
    b = np.full((2, 4), y, dtype=np.int32)
    np.testing.assert_array_equal(k_tt_bits(a, b), a ^ b)


def test_tensor_tensor_partition_mismatch():
    @nki.jit(mode="simulation")
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_tensor(nl.load(a), nl.load(b), op=np.add))
        return out
    with pytest.raises(nki.NkiError) as e:
        k(rand(128, 512), rand(1, 512))
    assert e.value.code == "err_num_partition_mismatch"
    assert "test_isa_alu.py" in e.value.loc


def test_tensor_tensor_both_psum_refused():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        p1 = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        p2 = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        p1[...] = x
        p2[...] = x
        nl.store(out, nisa.tensor_tensor(p1, p2, op=np.add))
        return out
    with pytest.raises(nki.NkiError) as e:
        k(rand(128, 64))
    assert e.value.code == "err_unsupported_memory"


# ----------------------------------------------------------------------------- tensor_scalar
@nki.jit(mode="simulation")
def k_tensor_scalar(a, v):
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o3 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    vec = nl.load(v)
    nl.store(o1, nisa.tensor_scalar(x, np.subtract, 1.0))
    nl.store(o2, nisa.tensor_scalar(x, np.subtract, 1.0, reverse0=True))
    nl.store(o3, nisa.tensor_scalar(x, np.multiply, vec, op1=np.add, operand1=2.0))
    return o1, o2, o3


def test_tensor_scalar_order_reverse_and_vector_operand():
    a, v = rand(128, 256), rand(128, 1)
    o1, o2, o3 = k_tensor_scalar(a, v)
    np.testing.assert_allclose(o1, a - 1, atol=1e-6)
    np.testing.assert_allclose(o2, 1 - a, atol=1e-6)
    np.testing.assert_allclose(o3, a * v + 2.0, atol=1e-5)


@nki.jit(mode="simulation")
def k_tensor_scalar_rsqrt(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_scalar(nl.load(a), op0=nl.rsqrt, operand0=0.0))
    return out


def test_tensor_scalar_rsqrt_runs_on_gpsimd():
    a = np.abs(rand(16, 32)) + 0.5
    np.testing.assert_allclose(k_tensor_scalar_rsqrt(a), 1 / np.sqrt(a), rtol=1e-5)
    assert engine_of(k_tensor_scalar_rsqrt, a, op="tensor_scalar") == ["gpsimd"]


def test_tensor_scalar_scalar_engine_rules():
    @nki.jit(mode="simulation", platform_target="trn2")
    def k2(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_scalar(nl.load(a), np.multiply, 3.0, op1=np.add, operand1=1.0,
                                         engine=nisa.scalar_engine))
        return out
    a = rand(8, 16)
    np.testing.assert_allclose(k2(a), a * 3 + 1, atol=1e-5)
    assert engine_of(k2, a, op="tensor_scalar") == ["scalar"]

    @nki.jit(mode="simulation")
    def k1(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_scalar(nl.load(a), np.multiply, 3.0, engine=nisa.scalar_engine))
        return out
    with pytest.raises(nki.NkiError) as e:
        k1(a)  # trn1: ScalarE has no ALU multiply/add (NeuronCore-v3+)
    assert e.value.code == "wb_isa_engine_unsupported"


def test_tensor_scalar_bitvec_needs_ints_and_op_pairing():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_scalar(nl.load(a), np.bitwise_and, 3))
        return out
    with pytest.raises(nki.NkiError, match="integer"):
        k(rand(4, 8))
    ai = RNG.integers(0, 100, (4, 8)).astype(np.int32)
    np.testing.assert_array_equal(k(ai), ai & 3)


# ----------------------------------------------------------------------------- scalar_tensor_tensor
@nki.jit(mode="simulation")
def k_stt(a, b, v):
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y, vec = nl.load(a), nl.load(b), nl.load(v)
    nl.store(o1, nisa.scalar_tensor_tensor(data=x, op0=np.subtract, operand0=vec,
                                           op1=np.multiply, operand1=y))
    nl.store(o2, nisa.scalar_tensor_tensor(data=x, op0=np.subtract, operand0=2.0,
                                           op1=np.subtract, operand1=y, reverse0=True,
                                           reverse1=True))
    return o1, o2


def test_scalar_tensor_tensor():
    a, b, v = rand(128, 64), rand(128, 64), rand(128, 1)
    o1, o2 = k_stt(a, b, v)
    np.testing.assert_allclose(o1, (a - v) * b, atol=1e-5)
    np.testing.assert_allclose(o2, b - (2.0 - a), atol=1e-5)


# ----------------------------------------------------------------------------- tensor_tensor_scan
@nki.jit(mode="simulation")
def k_scan(a, b):
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(o1, nisa.tensor_tensor_scan(x, y, 0.0, np.multiply, np.add))
    init = nl.full((a.shape[0], 1), 2.0, dtype=nl.float32)
    nl.store(o2, nisa.tensor_tensor_scan(x, y, init, np.subtract, np.add, reverse0=True))
    return o1, o2


def _scan_ref(a, b, init, op0, op1, rev0=False):
    out = np.zeros_like(a)
    prev = np.broadcast_to(np.float32(init), (a.shape[0],)).astype(np.float32)
    for i in range(a.shape[1]):
        t = op0(prev, a[:, i]) if rev0 else op0(a[:, i], prev)
        prev = op1(t, b[:, i]).astype(np.float32)
        out[:, i] = prev
    return out


def test_tensor_tensor_scan():
    a, b = rand(64, 96) * 0.5, rand(64, 96)
    o1, o2 = k_scan(a, b)
    np.testing.assert_allclose(o1, _scan_ref(a, b, 0.0, np.multiply, np.add), atol=1e-4)
    np.testing.assert_allclose(o2, _scan_ref(a, b, 2.0, np.subtract, np.add, rev0=True),
                               atol=1e-3)


# ----------------------------------------------------------------------------- tensor_reduce
@nki.jit(mode="simulation")
def k_reduce(a):
    o1 = nl.ndarray((a.shape[0],), dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray((a.shape[0], 1, a.shape[2]), dtype=a.dtype, buffer=nl.shared_hbm)
    o3 = nl.ndarray((a.shape[0], 1, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o1, nisa.tensor_reduce(np.add, x, axis=(1, 2)))
    nl.store(o2, nisa.tensor_reduce(np.max, x, axis=1, keepdims=True))
    nl.store(o3, nisa.tensor_reduce(nl.minimum, x, axis=(1, 2), negate=True, keepdims=True))
    return o1, o2, o3


def test_tensor_reduce_axes_keepdims_negate():
    a = rand(128, 8, 16)
    o1, o2, o3 = k_reduce(a)
    np.testing.assert_allclose(o1, a.sum(axis=(1, 2)), atol=1e-4)
    np.testing.assert_allclose(o2, a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(o3, -a.min(axis=(1, 2), keepdims=True))


@nki.jit(mode="simulation")
def k_reduce_masked(a):
    out = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(a.shape[0])[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    x = nl.load(a)
    r = nisa.tensor_reduce(np.add, x[i_p, i_f], axis=1, keepdims=True, mask=(i_f < 10))
    nl.store(out, r)
    return out


def test_tensor_reduce_mask_skips_elements():
    a = rand(32, 64)
    np.testing.assert_allclose(k_reduce_masked(a), a[:, :10].sum(axis=1, keepdims=True),
                               atol=1e-5)


@nki.jit(mode="simulation")
def k_reduce_sub_mul(a):
    o1 = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o1, nisa.tensor_reduce(np.subtract, x, axis=1, keepdims=True))
    nl.store(o2, nisa.tensor_reduce(np.multiply, x, axis=1, keepdims=True))
    return o1, o2


def test_tensor_reduce_subtract_and_multiply():
    # subtract: the first element minus the others (docs/semantics.md); multiply: the product
    a = RNG.uniform(0.5, 1.5, (16, 40)).astype(np.float32)
    o1, o2 = k_reduce_sub_mul(a)
    np.testing.assert_allclose(o1, a[:, :1] - a[:, 1:].sum(axis=1, keepdims=True), atol=1e-4)
    np.testing.assert_allclose(o2, a.prod(axis=1, keepdims=True), rtol=1e-5)


def test_tensor_reduce_partition_axis_refused():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray((1, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_reduce(np.add, nl.load(a), axis=0))
        return out
    with pytest.raises(nki.NkiError) as e:
        k(rand(4, 8))
    assert e.value.code == "wb_partition_axis_reduction"


# ----------------------------------------------------------------------------- partition reduce
@nki.jit(mode="simulation")
def k_preduce(a, b):
    o1 = nl.ndarray((1,) + a.shape[1:], dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray((1,) + b.shape[1:], dtype=b.dtype, buffer=nl.shared_hbm)
    nl.store(o1, nisa.tensor_partition_reduce(np.add, nl.load(a)))
    nl.store(o2, nisa.tensor_partition_reduce(np.bitwise_or, nl.load(b)))
    return o1, o2


def test_tensor_partition_reduce():
    a = rand(128, 32, 4)
    b = RNG.integers(0, 1 << 20, (16, 8)).astype(np.int32)
    o1, o2 = k_preduce(a, b)
    np.testing.assert_allclose(o1, a.sum(axis=0, keepdims=True), atol=1e-4)
    np.testing.assert_array_equal(o2, np.bitwise_or.reduce(b, axis=0, keepdims=True))
    assert engine_of(k_preduce, a, b, op="tensor_partition_reduce") == ["gpsimd", "gpsimd"]


# ----------------------------------------------------------------------------- tensor_scalar_reduce
@nki.jit(mode="simulation")
def k_tsr(a):
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nisa.tensor_scalar_reduce(data=x, op0=np.multiply, operand0=2.0, reduce_op=np.add,
                                  reduce_res=r)
    nl.store(o1, y)
    nl.store(o2, r)
    m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(data=x, op0=np.add, operand0=1.0, reduce_op=nl.max, reduce_res=m)
    nl.store(o3, m)
    return o1, o2, o3


def test_tensor_scalar_reduce():
    a = rand(128, 40).astype(np.float16)
    o1, o2, o3 = k_tsr(a)
    af = a.astype(np.float32)
    np.testing.assert_allclose(o1, (af * 2).astype(np.float16), rtol=1e-3)
    # the reduction reads the fp32 result, not the fp16-rounded output
    np.testing.assert_allclose(o2, (af * 2).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(o3, (af + 1).max(axis=1, keepdims=True), atol=1e-6)


def test_tensor_scalar_reduce_reverse_refused():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
        r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(data=nl.load(a), op0=np.add, operand0=1.0, reduce_op=np.add,
                                  reduce_res=r, reverse0=True)
        nl.store(out, r)
        return out
    with pytest.raises(nki.NkiError, match="reverse0"):
        k(rand(4, 8))


# ----------------------------------------------------------------------------- reciprocal
@nki.jit(mode="simulation")
def k_recip(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.reciprocal(nl.load(a), dtype=nl.float32))
    return out


def test_reciprocal_vector_engine():
    a = rand(128, 64) + 3.0
    np.testing.assert_allclose(k_recip(a), 1 / a, rtol=1e-6)
    assert engine_of(k_recip, a, op="reciprocal") == ["vector"]
    b = a.astype(np.float16)
    np.testing.assert_allclose(k_recip(b), 1 / b.astype(np.float32), rtol=1e-6)


@nki.jit(mode="simulation")
def k_shifts(a, u):
    o1 = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    o3 = nl.ndarray(u.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    o4 = nl.ndarray(u.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(u)
    nl.store(o1, nisa.tensor_scalar(x, np.left_shift, 2))
    nl.store(o2, nisa.tensor_scalar(x, np.right_shift, 1))
    nl.store(o3, nisa.tensor_scalar(y, np.left_shift, 4, dtype=nl.uint32))
    nl.store(o4, nisa.tensor_scalar(y, np.invert, 0, dtype=nl.uint32))
    return o1, o2, o3, o4


def test_shifts_and_invert_keep_32_bit_patterns():
    """The ALU is 32 bits wide: shifted-out bits are lost, patterns are kept (no saturation)."""
    a = np.array([[0x40000001, -8, -1, 7]], dtype=np.int32)
    u = np.array([[0xF0000001, 0xFFFFFFFF, 1, 0]], dtype=np.uint32)
    o1, o2, o3, o4 = k_shifts(a, u)
    np.testing.assert_array_equal(o1, (a.astype(np.int64) << 2).astype(np.uint32).view(np.int32))
    np.testing.assert_array_equal(o1[0, 0], 4)
    np.testing.assert_array_equal(o2, (a.view(np.uint32) >> 1).view(np.int32))  # logical
    np.testing.assert_array_equal(o3, u << np.uint32(4))
    np.testing.assert_array_equal(o4, ~u)
