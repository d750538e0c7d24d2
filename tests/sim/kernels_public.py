"""Kernels written in the public NKI style, imported through the ``neuronxcc`` compat alias.

They follow the shapes of the NKI tutorials and samples (tensor add, the matmul variants,
transpose2d, softmax, layernorm, rmsnorm, average_pool2d, a mamba-style scan, flash-attention
style online softmax...) and are used by ``test_public_kernels.py``.
"""

from nki_workbench import compat

compat.install()

import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402
import numpy as np  # noqa: E402
from neuronxcc import nki  # noqa: E402


@nki.jit
def tensor_add(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(512)[None, :]
    a_tile = nl.load(a_input[ix, iy])
    b_tile = nl.load(b_input[ix, iy])
    c_tile = a_tile + b_tile
    nl.store(c_output[ix, iy], value=c_tile)
    return c_output


@nki.jit
def tensor_add_ragged(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    sz_p, sz_f = a_input.shape
    i_f = nl.arange(sz_f)[None, :]
    for p in nl.affine_range((sz_p + 127) // 128):
        i_p = p * 128 + nl.arange(128)[:, None]
        a_tile = nl.load(a_input[i_p, i_f], mask=(i_p < sz_p))
        b_tile = nl.load(b_input[i_p, i_f], mask=(i_p < sz_p))
        c_tile = nl.add(a_tile, b_tile, mask=(i_p < sz_p))
        nl.store(c_output[i_p, i_f], value=c_tile, mask=(i_p < sz_p))
    return c_output


@nki.jit
def tensor_add_spmd(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    a_tile = nl.load(a_input[ix, iy])
    b_tile = nl.load(b_input[ix, iy])
    nl.store(c_output[ix, iy], value=a_tile + b_tile)
    return c_output


@nki.jit
def matmul_basic(lhsT, rhs):
    result = nl.ndarray((64, 512), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_lhsT_p, i_lhsT_f = nl.mgrid[0:128, 0:64]
    i_rhs_p, i_rhs_f = nl.mgrid[0:128, 0:512]
    i_out_p, i_out_f = nl.mgrid[0:64, 0:512]
    lhs_tile = nl.load(lhsT[i_lhsT_p, i_lhsT_f])
    rhs_tile = nl.load(rhs[i_rhs_p, i_rhs_f])
    result_psum = nl.matmul(lhs_tile, rhs_tile, transpose_x=True)
    result_sbuf = nl.copy(result_psum, dtype=result.dtype)
    nl.store(result[i_out_p, i_out_f], value=result_sbuf)
    return result


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M = nl.tile_size.gemm_stationary_fmax
    TILE_K = nl.tile_size.pmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                lhsT_tile[...] = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K,
                                              m * TILE_M:(m + 1) * TILE_M])
                rhs_tile[...] = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K,
                                            n * TILE_N:(n + 1) * TILE_N])
                res_psum += nl.matmul(lhsT_tile[...], rhs_tile[...], transpose_x=True)
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N],
                     value=res_sb)
    return result


@nki.jit
def matmul_hoisted(lhsT, rhs):
    K, M = lhsT.shape
    K_, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = 128, 128, 512
    i_lhsT = nl.mgrid[0:TILE_K, 0:TILE_M]
    i_rhs = nl.mgrid[0:TILE_K, 0:TILE_N]
    i_res = nl.mgrid[0:TILE_M, 0:TILE_N]
    for m in nl.affine_range(M // TILE_M):
        lhsT_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), TILE_M), dtype=lhsT.dtype,
                                buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            lhsT_tiles[k, i_lhsT.p, i_lhsT.x] = nl.load(
                lhsT[k * TILE_K + i_lhsT.p, m * TILE_M + i_lhsT.x])
        for n in nl.affine_range(N // TILE_N):
            rhs_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), TILE_N), dtype=rhs.dtype,
                                   buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                rhs_tiles[k, i_rhs.p, i_rhs.x] = nl.load(
                    rhs[k * TILE_K + i_rhs.p, n * TILE_N + i_rhs.x])
            res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                res_psum[...] += nl.matmul(lhsT_tiles[k, i_lhsT.p, i_lhsT.x],
                                           rhs_tiles[k, i_rhs.p, i_rhs.x], transpose_x=True)
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * TILE_M + i_res.p, n * TILE_N + i_res.x], value=res_sb)
    return result


@nki.jit
def matmul_block_free(lhsT, rhs):
    K, M = lhsT.shape
    K_, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_K, TILE_M, TILE_N = 128, 128, 512
    NUM_BLOCK_M = M // TILE_M if M // TILE_M < 2 else 2
    BLOCK_M = TILE_M * (M // TILE_M // NUM_BLOCK_M)
    BLOCK_N = TILE_N
    for m2 in nl.affine_range(M // BLOCK_M):
        for n2 in nl.affine_range(N // BLOCK_N):
            result_tiles = nl.zeros((BLOCK_M // TILE_M, nl.par_dim(TILE_M), BLOCK_N),
                                    dtype=lhsT.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TILE_K):
                lhsT_tile = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K,
                                         m2 * BLOCK_M:(m2 + 1) * BLOCK_M])
                rhs_tile = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K,
                                       n2 * BLOCK_N:(n2 + 1) * BLOCK_N])
                for m in nl.affine_range(BLOCK_M // TILE_M):
                    res_tile = nl.matmul(lhsT_tile[:, m * TILE_M:(m + 1) * TILE_M], rhs_tile,
                                         transpose_x=True)
                    result_tiles[m] += res_tile
            for m in nl.affine_range(BLOCK_M // TILE_M):
                nl.store(result[m2 * BLOCK_M + m * TILE_M:m2 * BLOCK_M + (m + 1) * TILE_M,
                                n2 * BLOCK_N:(n2 + 1) * BLOCK_N], value=result_tiles[m])
    return result


@nki.jit
def transpose2d(in_tensor, shape2D):
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, sz_f = in_tensor.shape
    sz_f1, sz_f2 = shape2D
    i_p0 = nl.arange(sz_p)[:, None, None]
    i_f1 = nl.arange(sz_f1)[None, :, None]
    i_f2 = nl.arange(sz_f2)[None, None, :]
    in_tile = nl.ndarray(shape=in_tensor.shape, dtype=in_tensor.dtype)
    in_tile[:] = nl.load(in_tensor)
    out_tile = nl.ndarray(shape=(sz_p, sz_f2 * sz_f1), dtype=out_tensor.dtype)
    out_tile[i_p0, i_f2 * sz_f1 + i_f1] = nl.copy(in_tile[i_p0, i_f1 * sz_f2 + i_f2])
    nl.store(out_tensor, value=out_tile)
    return out_tensor


@nki.jit
def softmax_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, d = x.shape
    for i in nl.affine_range(n // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        mx = nl.max(t, axis=1, keepdims=True)
        e = nl.exp(nl.subtract(t, mx))
        s = nl.sum(e, axis=1, keepdims=True)
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.divide(e, s))
    return out


@nki.jit
def softmax_builtin(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.softmax(t, axis=1))
    return out


@nki.jit
def layernorm(x, gamma, beta, eps):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, d = x.shape
    i_f = nl.arange(d)[None, :]
    g = nl.load(gamma.reshape((1, d))[nl.arange(1)[:, None], i_f])
    b = nl.load(beta.reshape((1, d))[nl.arange(1)[:, None], i_f])
    g_b = g.broadcast_to((128, d))
    b_b = b.broadcast_to((128, d))
    for i in nl.affine_range(n // 128):
        i_p = i * 128 + nl.arange(128)[:, None]
        t = nl.load(x[i_p, i_f])
        mean = nl.mean(t, axis=[1], keepdims=True)
        var = nl.var(t, axis=[1])
        shifted = nl.subtract(t, mean)
        inv = nl.rsqrt(nl.add(var, eps))
        y = nl.multiply(shifted, inv.reshape((128, 1)))
        nl.store(out[i_p, i_f], value=y * g_b + b_b)
    return out


@nki.jit
def rmsnorm(a_tensor, g_tensor):
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    assert a_tensor.shape[1] == g_tensor.shape[0]
    ix = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(a_tensor.shape[1])[None, :]
    num_rows = a_tensor.shape[0]
    g_tile = nl.load(g_tensor.reshape((1, g_tensor.shape[0]))[iw, iy])
    for i in nl.affine_range((num_rows + 127) // 128):
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=(i * 128 + ix < num_rows))
        in_square = nl.square(a_tile)
        square_sum = nl.sum(in_square, axis=[1])
        mean = square_sum / a_tensor.shape[1]
        rms_reciprocal = nl.rsqrt(mean)
        out_tile = nl.multiply(a_tile, rms_reciprocal)
        g_bcast = g_tile.broadcast_to((128, g_tensor.shape[0]))
        out_tile[...] = nl.multiply(out_tile, g_bcast, mask=(i * 128 + ix < num_rows))
        nl.store(out_tensor[i * 128 + ix, iy], value=out_tile, mask=(i * 128 + ix < num_rows))
    return out_tensor


@nki.jit
def rmsnorm_builtin(a, w):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    d = a.shape[1]
    wt = nl.load(w.reshape((1, d))).broadcast_to((128, d))
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[nl.ds(i * 128, 128), :])
        nl.store(out[nl.ds(i * 128, 128), :], nl.rms_norm(t, wt, axis=1, n=d, epsilon=1e-6))
    return out


@nki.jit
def avgpool2d(in_tensor, pool_size):
    sz_cin, sz_hin, sz_win = in_tensor.shape
    sz_hout, sz_wout = sz_hin // pool_size, sz_win // pool_size
    out_tensor = nl.ndarray((sz_cin, sz_hout, sz_wout), dtype=in_tensor.dtype,
                            buffer=nl.shared_hbm)
    sz_p = sz_cin
    sz_pool = pool_size
    i0, i1, i2, i3, i4 = nl.mgrid[0:sz_p, 0:sz_hin // sz_pool, 0:sz_pool, 0:sz_win // sz_pool,
                                  0:sz_pool]
    in_tile = nl.ndarray([sz_p, sz_hin, sz_win], dtype=in_tensor.dtype)
    in_tile[:] = nl.load(in_tensor)
    out_tile = nl.sum(in_tile[i0, sz_pool * i1 + i2, sz_pool * i3 + i4], axis=[2, 4]) / (
        pool_size * pool_size)
    nl.store(out_tensor, value=out_tile)
    return out_tensor


@nki.jit
def mamba_scan(delta, u, A):
    """h[t] = exp(delta[t] * A) * h[t-1] + delta[t] * u[t] along time; out = h (per channel)."""
    channels, seq = delta.shape
    out = nl.ndarray((channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    a_tile = nl.load(A)
    h = nl.zeros((channels, 1), dtype=nl.float32)
    for t in nl.sequential_range(seq):
        d_t = nl.load(delta[:, t:t + 1])
        u_t = nl.load(u[:, t:t + 1])
        decay = nl.exp(nl.multiply(d_t, a_tile))
        h[...] = nl.add(nl.multiply(decay, h), nl.multiply(d_t, u_t))
        nl.store(out[:, t:t + 1], value=h)
    return out


@nki.jit
def flash_attn_fwd(q, k, v, softmax_scale):
    """Online-softmax attention for one head: q [d, Sq], k [d, Sk], v [Sk, d] -> o [Sq, d]."""
    d, seqlen_q = q.shape
    _, seqlen_k = k.shape
    B_KV = 128
    out = nl.ndarray((seqlen_q, d), dtype=q.dtype, buffer=nl.shared_hbm)
    for qi in nl.affine_range(seqlen_q // 128):
        q_tile = nl.load(q[:, nl.ds(qi * 128, 128)])
        m_run = nl.full((128, 1), -1e30, dtype=nl.float32)
        l_run = nl.zeros((128, 1), dtype=nl.float32)
        o_run = nl.zeros((128, d), dtype=nl.float32)
        for j in nl.sequential_range(seqlen_k // B_KV):
            k_tile = nl.load(k[:, nl.ds(j * B_KV, B_KV)])
            v_tile = nl.load(v[nl.ds(j * B_KV, B_KV), :])
            s_psum = nl.matmul(q_tile, k_tile, transpose_x=True)
            s = nl.multiply(s_psum, softmax_scale)
            m_new = nl.maximum(m_run, nl.max(s, axis=1, keepdims=True))
            p = nl.exp(nl.subtract(s, m_new))
            alpha = nl.exp(nl.subtract(m_run, m_new))
            l_run[...] = nl.add(nl.multiply(l_run, alpha), nl.sum(p, axis=1, keepdims=True))
            pT = nl.transpose(p)
            pv = nl.matmul(pT, v_tile, transpose_x=True)
            o_run[...] = nl.add(nl.multiply(o_run, alpha), pv)
            m_run[...] = m_new
        nl.store(out[nl.ds(qi * 128, 128), :], value=nl.divide(o_run, l_run))
    return out


def legacy_exp(a_tensor, b_tensor):
    """Old calling convention: the output is an argument, nothing is returned."""
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(256)[None, :]
    nl.store(b_tensor[i_p, i_f], value=nl.exp(nl.load(a_tensor[i_p, i_f])))


@nki.jit
def no_input_kernel():
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ones = nl.full((128, 64), 2.5, dtype=nl.float32)
    nl.store(out, value=nl.multiply(ones, 4.0))
    return out


@nki.jit
def tuple_outputs(a):
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(s, value=nl.sigmoid(t))
    nl.store(m, value=nl.max(t, axis=1, keepdims=True))
    return s, m


@nki.jit
def fp8_matmul(lhsT, rhs):
    out = nl.ndarray((lhsT.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhsT)
    b = nl.load(rhs)
    nl.store(out, value=nl.matmul(a, b, transpose_x=True))
    return out


@nki.jit
def where_compare(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    nl.store(out, value=nl.where(nl.greater(ta, tb), ta, tb * 2.0))
    return out


@nki.jit
def reductions(a):
    out = nl.ndarray((a.shape[0], 4), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    res = nl.ndarray((a.shape[0], 4), dtype=nl.float32)
    res[:, 0:1] = nl.max(t, axis=1, keepdims=True)
    res[:, 1:2] = nl.min(t, axis=1, keepdims=True)
    res[:, 2:3] = nl.prod(t, axis=1, keepdims=True)
    res[:, 3:4] = nl.mean(t, axis=1, keepdims=True)
    nl.store(out, value=res)
    return out


@nki.jit
def loop_reduce_kernel(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for k in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[k * 128:(k + 1) * 128, :])
        acc = nl.loop_reduce(t, op=np.add, loop_indices=[k], dtype=nl.float32)
    nl.store(out, value=acc)
    return out


@nki.jit
def indirect_gather(data, idx):
    out = nl.ndarray((idx.shape[0], data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(idx.shape[0])[:, None]
    i_f = nl.arange(data.shape[1])[None, :]
    idx_tile = nl.load(idx[i_p])
    rows = nl.load(data[idx_tile[i_p, 0], i_f])
    nl.store(out[i_p, i_f], value=rows)
    return out


@nki.jit
def dict_args(params, scale):
    out = nl.ndarray(params["x"].shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(params["x"])
    w = nl.load(params["w"])
    nl.store(out, value=nl.multiply(nl.add(x, w), scale))
    return out


@nki.jit
def identity_transpose(a):
    """Transpose via matmul against nl.shared_identity_matrix (a TensorE transpose)."""
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    ident = nl.load(nl.shared_identity_matrix(n=a.shape[0], dtype=nl.float32))
    t = nl.load(a)
    nl.store(out, value=nl.matmul(t, ident, transpose_x=True))
    return out


@nki.jit
def sequential_accumulate(a):
    out = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, a.shape[1]), dtype=nl.float32)
    for i in nl.sequential_range(a.shape[0] // 128):
        acc[...] = nl.add(acc, nl.load(a[i * 128:(i + 1) * 128, :]))
    nl.store(out, value=acc)
    return out


@nki.jit
def gelu_family(a):
    out = nl.ndarray((4,) + a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out[0], value=nl.gelu(t))
    nl.store(out[1], value=nl.silu(t))
    nl.store(out[2], value=nl.softplus(t))
    nl.store(out[3], value=nl.erf(t))
    return out


@nki.jit
def mutable_update(a: nki.typing.mutable_tensor, b):
    t = nl.load(a)
    nl.store(a, value=nl.add(t, nl.load(b)))
    return a


@nki.jit
def static_unrolled(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(t, float(i + 1)))
    return out


@nki.jit
def mamba_isa(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    _, nstate = A.shape
    P = nl.tile_size.pmax
    for b in nl.affine_range(batch):
        for ct in nl.affine_range(channels // P):
            c0 = ct * P
            acc = nl.zeros((nl.par_dim(P), seq), dtype=delta.dtype)
            d = nl.load(delta[b, c0:c0 + P, 0:seq])
            x = nl.load(u[b, c0:c0 + P, 0:seq])
            for s in nl.affine_range(nstate):
                a_s = nl.load(A[c0:c0 + P, s])
                dA = nisa.activation(op=nl.exp, data=d, scale=a_s)
                b_s = nl.load(B[b, s:s + 1, 0:seq])
                dBu = nisa.tensor_tensor(nisa.tensor_tensor(d, x, op=nl.multiply),
                                         b_s.broadcast_to((P, seq)), op=nl.multiply)
                h = nisa.tensor_tensor_scan(dA, dBu, initial=0, op0=np.multiply, op1=np.add)
                c_s = nl.load(C[b, s:s + 1, 0:seq])
                acc[0:P, 0:seq] += nisa.tensor_tensor(h, c_s.broadcast_to((P, seq)), op=nl.multiply)
            nl.store(out[b, c0:c0 + P, 0:seq], acc[0:P, 0:seq])
    return out
