"""Directly allocated kernels in the public NKI style (through the ``neuronxcc`` compat alias).

They use what the allocated reference kernels of nki-samples rely on: ``ncc.sbuf.mod_alloc``
double buffering, ``ncc.psum.alloc`` with a ``functools.partial`` placement function, PSUM
``+=`` accumulation into a fresh ``nl.ndarray`` (no ``nl.zeros`` in allocated kernels),
instruction results that NKI allocates implicitly, and a bias tile for every activation.
Used by ``test_allocated_kernels.py``.
"""

import functools

from nki_workbench import compat

compat.install()

import neuronxcc.nki.compiler as ncc  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402
import numpy as np  # noqa: E402
from neuronxcc import nki  # noqa: E402
from neuronxcc.nki.language import par_dim  # noqa: E402


def _bank(bank_map, idx, pdim_size, fdim_size):
    return (bank_map[idx], 0, 0)


@nki.jit
def allocated_rmsnorm_matmul(x, w, eps=1e-6):
    """``rmsnorm(x) @ w`` for x [N*128, K] and w [K, 512], K a multiple of 128, fp32 stats."""
    n_rows, k = x.shape
    out = nl.ndarray((n_rows, w.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    kt = k // 128
    ident = nl.ndarray((par_dim(128), 128), dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    ident[...] = nl.load(nl.shared_constant(np.identity(128, dtype=np.int8), dtype=x.dtype))
    bias = nl.ndarray((par_dim(128), 1), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
    bias[...] = 0
    w_sb = nl.ndarray((kt, par_dim(128), 512), dtype=w.dtype,
                      buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(kt,)))
    for m in nl.affine_range(kt):
        w_sb[m] = nl.load(w[m * 128:(m + 1) * 128, :])
    base = 1024 + kt * 2048
    for r in nl.affine_range(n_rows // 128):
        xin = nl.ndarray((2, par_dim(128), k), dtype=x.dtype,
                         buffer=ncc.sbuf.mod_alloc(base_addr=base, num_free_tiles=(2,)))
        sq = nl.ndarray((par_dim(128), k), dtype=np.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=base + 8 * k))
        ss = nl.ndarray((par_dim(128), 1), dtype=np.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=base + 12 * k))
        xn = nl.ndarray((par_dim(128), k), dtype=x.dtype,
                        buffer=ncc.sbuf.mod_alloc(base_addr=base + 12 * k + 4))
        res = nl.ndarray((par_dim(128), 512), dtype=x.dtype,
                         buffer=ncc.sbuf.mod_alloc(base_addr=base + 16 * k + 4))
        xin[r % 2] = nl.load(x[r * 128:(r + 1) * 128, :])
        sq[...] = nisa.activation_reduce(op=nl.square, data=xin[r % 2], reduce_op=np.add,
                                         reduce_res=ss[...], bias=bias[...])
        ss[...] = nisa.tensor_scalar(ss[...], np.multiply, 1.0 / k, op1=np.add, operand1=eps)
        ss[...] = nisa.activation(op=nl.rsqrt, data=ss[...], bias=bias[...])
        xn[...] = nl.multiply(xin[r % 2], ss[...], dtype=x.dtype)
        tp = nl.ndarray((kt, par_dim(128), 128), dtype=np.float32,
                        buffer=ncc.psum.alloc(functools.partial(
                            _bank, bank_map={(m,): m % 4 for m in range(kt)})))
        acc = nl.ndarray((1, par_dim(128), 512), dtype=np.float32,
                         buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
        for m in nl.affine_range(kt):
            tp[m] = nisa.nc_matmul(xn[:, m * 128:(m + 1) * 128], ident[...], is_transpose=True)
            # the transposed block is an instruction result: NKI allocates it implicitly
            acc[0] += nisa.nc_matmul(nl.copy(tp[m], dtype=x.dtype), w_sb[m])
        res[...] = nl.copy(acc[0], dtype=x.dtype)
        nl.store(out[r * 128:(r + 1) * 128, :], value=res)
    return out
