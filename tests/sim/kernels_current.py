"""Kernels written twice: for legacy ``neuronxcc.nki`` and for today's ``import nki`` (NKI 0.2+).

Each ``PAIRS`` entry is ``(name, legacy kernel, current kernel, inputs, reference)``; the two
versions must trace to the same IR (up to source locations and the kernel name) and simulate to
the same outputs. The current-API versions are imported through the ``import nki`` alias.
"""

import numpy as np

from nki_workbench import compat

compat.install()

import neuronxcc.nki.isa as lisa  # noqa: E402
import neuronxcc.nki.language as lnl  # noqa: E402
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from neuronxcc import nki as legacy  # noqa: E402

TARGET = "trn3"


# ----------------------------------------------------------------------------- tensor add
@legacy.jit(platform_target=TARGET)
def add_legacy(a, b):
    out = lnl.ndarray(a.shape, a.dtype, buffer=lnl.shared_hbm)
    for i in lnl.affine_range(a.shape[0] // 128):
        x = lnl.ndarray((128, a.shape[1]), a.dtype, buffer=lnl.sbuf)
        y = lnl.ndarray((128, a.shape[1]), a.dtype, buffer=lnl.sbuf)
        lisa.dma_copy(dst=x, src=a[i * 128:(i + 1) * 128, :])
        lisa.dma_copy(dst=y, src=b[i * 128:(i + 1) * 128, :])
        z = lisa.tensor_tensor(x, y, lnl.add)
        lisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=z)
    return out


@nki.jit
def add_current(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=y, src=b[i * 128:(i + 1) * 128, :])
        z = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=z)
    return out


# ----------------------------------------------------------------------------- tiled matmul
@legacy.jit(platform_target=TARGET)
def matmul_legacy(lhsT, rhs):
    k_dim, m_dim = lhsT.shape
    n_dim = rhs.shape[1]
    out = lnl.ndarray((m_dim, n_dim), lnl.float32, buffer=lnl.shared_hbm)
    for m in lnl.affine_range(m_dim // 128):
        for n in lnl.affine_range(n_dim // 512):
            res = lnl.zeros((128, 512), lnl.float32, buffer=lnl.psum)
            for k in lnl.affine_range(k_dim // 128):
                a = lnl.ndarray((128, 128), lhsT.dtype, buffer=lnl.sbuf)
                b = lnl.ndarray((128, 512), rhs.dtype, buffer=lnl.sbuf)
                lisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                lisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                res += lisa.nc_matmul(a, b)
            o = lisa.tensor_copy(res, dtype=lnl.float32)
            lisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=o)
    return out


@nki.jit
def matmul_current(lhsT, rhs):
    k_dim, m_dim = lhsT.shape
    n_dim = rhs.shape[1]
    out = nl.ndarray((m_dim, n_dim), nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // 128):
        for n in nl.affine_range(n_dim // 512):
            res = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // 128):
                a = nl.ndarray((128, 128), lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 512), rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                nisa.nc_matmul(dst=res, stationary=a, moving=b)  # accumulate=None: inferred
            o = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=o, src=res)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=o)
    return out


# ----------------------------------------------------------------------------- softmax rows
@legacy.jit(platform_target=TARGET)
def softmax_legacy(x):
    out = lnl.ndarray(x.shape, x.dtype, buffer=lnl.shared_hbm)
    t = lnl.ndarray((128, x.shape[1]), x.dtype, buffer=lnl.sbuf)
    lisa.dma_copy(dst=t, src=x)
    mx = lisa.tensor_reduce(lnl.maximum, t, axis=1, negate=True, keepdims=True)
    s = lnl.ndarray((128, 1), lnl.float32, buffer=lnl.sbuf)
    e = lisa.activation(lnl.exp, t, bias=mx, scale=1.0, reduce_op=lnl.add, reduce_res=s,
                        reduce_cmd=lisa.reduce_cmd.reset_reduce, dtype=x.dtype)
    r = lisa.reciprocal(s, dtype=lnl.float32)
    y = lisa.tensor_scalar(e, lnl.multiply, r, dtype=x.dtype)
    lisa.dma_copy(dst=out, src=y)
    return out


@nki.jit
def softmax_current(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    mx = nl.ndarray((128, 1), x.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=mx, op=nl.maximum, data=t, axis=1, negate=True)
    s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
    e = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t, bias=mx, scale=1.0, reduce_op=nl.add,
                    reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    r = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=r, data=s)
    y = nl.ndarray((128, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=r)
    nisa.dma_copy(dst=out, src=y)
    return out


# ----------------------------------------------------------------------------- causal mask
@legacy.jit(platform_target=TARGET)
def causal_legacy(x):
    out = lnl.ndarray(x.shape, x.dtype, buffer=lnl.shared_hbm)
    t = lnl.ndarray((128, 128), x.dtype, buffer=lnl.sbuf)
    lisa.dma_copy(dst=t, src=x)
    i_p, i_f = lnl.mgrid[0:128, 0:128]
    m = lisa.affine_select(i_p - i_f >= 0, t, -9984.0, dtype=x.dtype)
    idx = lisa.iota(2 * i_p + i_f, dtype=lnl.float32)
    y = lisa.tensor_tensor(m, idx, lnl.add, dtype=x.dtype)
    lisa.dma_copy(dst=out, src=y)
    return out


@nki.jit
def causal_current(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    m = nl.ndarray((128, 128), x.dtype, buffer=nl.sbuf)
    nisa.affine_select(dst=m, pattern=[[-1, 128]], channel_multiplier=1, on_true_tile=t,
                       on_false_value=-9984.0, cmp_op=nl.greater_equal)
    idx = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=idx, pattern=[[1, 128]], offset=0, channel_multiplier=2)
    y = nl.ndarray((128, 128), x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=y, data1=m, data2=idx, op=nl.add)
    nisa.dma_copy(dst=out, src=y)
    return out


# ----------------------------------------------------------------------------- transpose
@legacy.jit(platform_target=TARGET)
def transpose_legacy(x):
    out = lnl.ndarray((x.shape[1], x.shape[0]), x.dtype, buffer=lnl.shared_hbm)
    t = lnl.ndarray(x.shape, x.dtype, buffer=lnl.sbuf)
    lisa.dma_copy(dst=t, src=x)
    p = lisa.nc_transpose(t, engine=lisa.tensor_engine)
    y = lisa.tensor_copy(p, dtype=x.dtype)
    lisa.dma_copy(dst=out, src=y)
    return out


@nki.jit
def transpose_current(x):
    out = nl.ndarray((x.shape[1], x.shape[0]), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    p = nl.ndarray((x.shape[1], x.shape[0]), x.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=p, data=t)
    y = nl.ndarray((x.shape[1], x.shape[0]), x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=p)
    nisa.dma_copy(dst=out, src=y)
    return out


# ----------------------------------------------------------------------------- LNC / SPMD
@legacy.jit(platform_target=TARGET)
def scale_legacy(a):
    out = lnl.ndarray(a.shape, a.dtype, buffer=lnl.shared_hbm)
    pid = lnl.program_id(0)
    t = lnl.ndarray((128, a.shape[1]), a.dtype, buffer=lnl.sbuf)
    lisa.dma_copy(dst=t, src=a[pid * 128:(pid + 1) * 128, :])
    y = lisa.tensor_scalar(t, lnl.multiply, 3.0, op1=lnl.add, operand1=1.0)
    lisa.dma_copy(dst=out[pid * 128:(pid + 1) * 128, :], src=y)
    return out


@nki.jit
def scale_current(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    t = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[pid * 128:(pid + 1) * 128, :])
    y = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=3.0, op1=nl.add, operand1=1.0)
    nisa.dma_copy(dst=out[pid * 128:(pid + 1) * 128, :], src=y)
    return out


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _causal(x):
    p, f = np.mgrid[0:128, 0:128]
    return np.where(p >= f, x, -9984.0) + (2 * p + f)


_RNG = np.random.default_rng(7)
_A, _B = (_RNG.standard_normal((256, 512)).astype(np.float32) for _ in range(2))
_L, _R = (_RNG.standard_normal((256, 256)).astype(np.float32),
          _RNG.standard_normal((256, 1024)).astype(np.float32))
_X = _RNG.standard_normal((128, 256)).astype(np.float32)
_S = _RNG.standard_normal((128, 128)).astype(np.float32)
_T = _RNG.standard_normal((96, 128)).astype(np.float32)

PAIRS = [
    ("add", add_legacy, add_current, (_A, _B), lambda a, b: a + b, ()),
    ("matmul", matmul_legacy, matmul_current, (_L, _R), lambda a, b: a.T @ b, ()),
    ("softmax", softmax_legacy, softmax_current, (_X,), _softmax, ()),
    ("causal", causal_legacy, causal_current, (_S,), _causal, ()),
    ("transpose", transpose_legacy, transpose_current, (_T,), lambda x: x.T, ()),
    ("lnc2", scale_legacy, scale_current, (_A,), lambda a: a * 3.0 + 1.0, (2,)),
]
