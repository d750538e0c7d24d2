"""Our own kernels with the structure of the publicly measured NKI kernels (calibration rows).

Each function reproduces the loop nest, tiling, engines and DMA pattern of one kernel whose
device latency is published (see ``docs/calibration.md``); they are written against
``nki_workbench.nki`` and are not copies of the public sources. :data:`BUILDERS` maps a
calibration row's ``kernel`` name to a function ``(row) -> (kernel function, arguments)``
building the inputs the row names (shapes, dtype; values are zeros: latency does not depend on
them, except the resize kernel's gather indices, which the kernel computes itself).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl

P = 128
_DT = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
       "float8_e4m3": ml_dtypes.float8_e4m3}


# ------------------------------------------------------------------ nki-samples: vision
def adaptive_avg_pool2d(x, oh, ow):
    """Adaptive average pooling of ``x [N, C, H, W]`` to ``[N, C, oh, ow]``.

    (N*C) rows on partitions, one DMA per pooling window (at most 128 x 128 per DMA) into one
    staging tile, a free-axis sum per window added to an fp32 accumulator, the mean written
    into an output tile stored once per row tile.
    """
    n, c, h, w = x.shape
    rows = n * c
    out = nl.ndarray((n, c, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    xf = x.reshape((rows, h, w))
    of = out.reshape((rows, oh, ow))
    hs = [(i * h) // oh for i in range(oh)]
    he = [((i + 1) * h + oh - 1) // oh for i in range(oh)]
    ws = [(j * w) // ow for j in range(ow)]
    we = [((j + 1) * w + ow - 1) // ow for j in range(ow)]
    ph = min(max(e - s for s, e in zip(hs, he, strict=True)), P)
    pw = min(max(e - s for s, e in zip(ws, we, strict=True)), P)
    pr = min(rows, P)
    for rt in nl.affine_range((rows + pr - 1) // pr):
        r0 = rt * pr
        stage = nl.ndarray((nl.par_dim(pr), ph, pw), dtype=x.dtype, buffer=nl.sbuf)
        res = nl.ndarray((nl.par_dim(pr), oh, ow), dtype=x.dtype, buffer=nl.sbuf)
        for i in nl.static_range(oh):
            for j in nl.static_range(ow):
                wh, ww = he[i] - hs[i], we[j] - ws[j]
                acc = nl.zeros((pr, 1), dtype=nl.float32, buffer=nl.sbuf)
                for a in nl.static_range((wh + P - 1) // P):
                    th = min(P, wh - a * P)
                    for b in nl.static_range((ww + P - 1) // P):
                        tw = min(P, ww - b * P)
                        h0, w0 = hs[i] + a * P, ws[j] + b * P
                        nisa.dma_copy(dst=stage[:, 0:th, 0:tw],
                                      src=xf[r0:r0 + pr, h0:h0 + th, w0:w0 + tw])
                        part = nl.sum(stage[:, 0:th, 0:tw], axis=[1, 2])
                        acc[:, :] = acc[:, :] + part
                res[:, i, j] = nl.divide(acc, float(wh * ww))
        nl.store(of[r0:r0 + pr, :, :], value=res)
    return out


def resize_nearest(x, out_shape):
    """Nearest-neighbour resize of ``x [B, H, W, C]`` to ``out_shape`` (non-integer scale).

    Output pixels on partitions (128 per tile), channels on the free axis: the source pixel
    index of every partition is computed on-chip (iota, divide/floor, mod, scale, floor) and the
    rows are gathered with one indirect DMA, then stored with a mask for the ragged last tile.
    """
    b_, h, w, c = x.shape
    ob, oh, ow, oc = out_shape
    out = nl.ndarray(out_shape, dtype=x.dtype, buffer=nl.shared_hbm)
    src = x.reshape((b_, h * w, c))
    dst = out.reshape((ob, oh * ow, oc))
    npix = oh * ow
    i_p = nl.arange(P)[:, None]
    i_c = nl.arange(c)[None, :]
    for bi in nl.affine_range(ob):
        for t in nl.affine_range((npix + P - 1) // P):
            pos = nisa.iota(t * P + i_p, dtype=nl.int32)
            row = nl.floor(nl.divide(pos, float(ow)), dtype=nl.int32)
            col = nl.mod(pos, ow, dtype=nl.int32)
            sr = nl.floor(nl.multiply(row, h / oh, dtype=nl.float32), dtype=nl.int32)
            sc = nl.floor(nl.multiply(col, w / ow, dtype=nl.float32), dtype=nl.int32)
            idx = nl.add(nl.multiply(sr, w, dtype=nl.int32), sc, dtype=nl.int32)
            live = t * P + i_p < npix
            tile = nl.load(src[bi, idx[i_p, 0], i_c], mask=live)
            nl.store(dst[bi, t * P + i_p, i_c], value=tile, mask=live)
    return out


# ------------------------------------------------------------------ nki-samples: fused linear
def rmsnorm_matmul(hidden, weights):
    """RMSNorm of ``hidden [B, S, D]`` rows followed by ``@ weights [D, E]``.

    Per 128-row tile: load, square-and-sum on ScalarE, 1/sqrt(mean + eps), scale, TensorE
    transposes of the normalised rows into [D-chunk, 128] tiles, a PSUM accumulation of the
    matmul over the D chunks, copy out and store. Weights are loaded once.
    """
    bsz, s, d = hidden.shape
    e = weights.shape[1]
    kt = d // P
    out = nl.ndarray((bsz, s, e), dtype=hidden.dtype, buffer=nl.shared_hbm)
    wt = nl.ndarray((nl.par_dim(P), kt, e), dtype=weights.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(kt):
        wt[:, k, :] = nl.load(weights[k * P:(k + 1) * P, :])
    for bi in nl.affine_range(bsz):
        for r in nl.affine_range(s // P):
            x = nl.load(hidden[bi, r * P:(r + 1) * P, :])
            sq = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
            ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            sq[...] = nisa.activation_reduce(op=nl.square, data=x, reduce_op=nl.add,
                                             reduce_res=ss)
            inv = nisa.activation(op=nl.rsqrt, data=ss, scale=1.0 / d, bias=None)
            xn = nisa.tensor_scalar(x, nl.multiply, inv, dtype=hidden.dtype)
            xt = nl.ndarray((nl.par_dim(P), kt, P), dtype=hidden.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(kt):
                xt[:, k, :] = nl.copy(nisa.nc_transpose(xn[:, k * P:(k + 1) * P]),
                                      dtype=hidden.dtype)
            ps = nl.zeros((P, e), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(kt):
                ps += nisa.nc_matmul(xt[:, k, :], wt[:, k, :])
            nl.store(out[bi, r * P:(r + 1) * P, :], value=nl.copy(ps, dtype=hidden.dtype))
    return out


# ------------------------------------------------------------------ nki-samples: attention
def sd_attention(q, k, v):
    """Softmax attention with small head size: ``q [B, d, S]``, ``k, v [B, S, d]`` ->
    ``[B, S, d]`` (one batch; the Stable Diffusion kernel's structure).

    V and Q are loaded once (Q pre-scaled, bf16), K with a transposing DMA; per 128-query tile:
    QK^T per 128-key block on TensorE (PSUM -> SBUF copy, negated block max), the row max,
    one exp over the whole row with the max as bias, the row sum, a bf16 copy, TensorE
    transposes of the probabilities, PV accumulated in PSUM, a transpose back, the division by
    the sum and a store.
    """
    _, d, s = q.shape
    nt = s // P
    kdt = q.dtype
    pe = nl.bfloat16
    out = nl.ndarray((1, s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    vt = nl.ndarray((nl.par_dim(P), nt, d), dtype=pe, buffer=nl.sbuf)
    for j in nl.affine_range(nt):
        vt[:, j, :] = nl.load(v[0, j * P:(j + 1) * P, :], dtype=pe)
    ql = nl.ndarray((nt, nl.par_dim(d), P), dtype=pe, buffer=nl.sbuf)
    for i in nl.affine_range(nt):
        ql[i, :, :] = nl.multiply(nl.load(q[0, :, i * P:(i + 1) * P]), 0.125, dtype=pe)
    kl = nl.ndarray((nt, nl.par_dim(d), P), dtype=pe, buffer=nl.sbuf)
    for j in nl.affine_range(nt):
        kl[j, :, :] = nl.load_transpose2d(k[0, j * P:(j + 1) * P, :], dtype=pe)
    for i in nl.affine_range(nt):
        qk = nl.ndarray((nl.par_dim(P), s), dtype=kdt, buffer=nl.sbuf)
        nmax = nl.ndarray((nl.par_dim(P), nt), dtype=kdt, buffer=nl.sbuf)
        for j in nl.affine_range(nt):
            ps = nl.zeros((P, P), nl.float32, buffer=nl.psum)
            ps += nisa.nc_matmul(ql[i, :, :], kl[j, :, :])
            qk[:, j * P:(j + 1) * P] = nl.copy(ps, dtype=kdt)
            nmax[:, j:j + 1] = nisa.tensor_reduce(nl.max, qk[:, j * P:(j + 1) * P], axis=(1,),
                                                  negate=True, keepdims=True)
        bias = nisa.tensor_reduce(nl.min, nmax, axis=(1,), keepdims=True)
        ex = nisa.activation(op=nl.exp, data=qk, bias=bias, scale=1.0)
        tot = nisa.tensor_reduce(nl.add, ex, axis=(1,), keepdims=True)
        prob = nl.copy(ex, dtype=pe)
        recip = nl.copy(nl.divide(1.0, tot).broadcast_to((P, d)), dtype=kdt)
        pt = nl.ndarray((nl.par_dim(P), nt, P), dtype=pe, buffer=nl.sbuf)
        for j in nl.affine_range(nt):
            pt[:, j, :] = nisa.nc_transpose(prob[:, j * P:(j + 1) * P])
        acc = nl.zeros((d, P), nl.float32, buffer=nl.psum)
        for j in nl.affine_range(nt):
            acc += nisa.nc_matmul(vt[:, j, :], pt[:, j, :])
        at = nl.copy(acc, dtype=pe)
        res = nl.multiply(nisa.nc_transpose(at), recip, dtype=kdt)
        nl.store(out[0, i * P:(i + 1) * P, :], value=res)
    return out


# ------------------------------------------------------------------ NKI tutorials: mamba
def mamba(delta, u, a, b, c, version=2, seq_tile=512):
    """The Mamba selective-scan layer (``delta, u [B, C, S]``, ``a [C, N]``, ``b, c [B, N, S]``).

    ``version`` 1: states outermost, channel tiles inside, inputs reloaded per state, one
    accumulator per channel tile; 2: channel tiles outermost, inputs loaded once per tile;
    3: as 2 with the sequence split into ``seq_tile`` chunks, the scan carried across chunks.
    Per (tile, state): exp(delta * A) on ScalarE, delta*u, *B, the scan, *C and the
    accumulation on VectorE.
    """
    bsz, ch, s = delta.shape
    ns = a.shape[1]
    nct = ch // P
    out = nl.ndarray((bsz, ch, s), dtype=delta.dtype, buffer=nl.shared_hbm)

    def step(d_i, u_i, a_i, bi, st, c0, acc, s0, n, init):
        da = nisa.activation(op=nl.exp, data=d_i, scale=a_i)
        b_s = nl.load(b[bi, st:st + 1, s0:s0 + n])
        du = nisa.tensor_tensor(d_i, u_i, op=nl.multiply)
        dbu = nisa.tensor_tensor(du, b_s.broadcast_to((P, n)), op=nl.multiply)
        h = nisa.tensor_tensor_scan(da, dbu, initial=init, op0=np.multiply, op1=np.add)
        c_s = nl.load(c[bi, st:st + 1, s0:s0 + n])
        acc[:, s0:s0 + n] += nisa.tensor_tensor(h, c_s.broadcast_to((P, n)), op=nl.multiply)
        return h

    for bi in nl.affine_range(bsz):
        if version == 1:
            accs = nl.zeros((nct, nl.par_dim(P), s), dtype=delta.dtype)
            for st in nl.affine_range(ns):
                for ct in nl.affine_range(nct):
                    c0 = ct * P
                    d_i = nl.load(delta[bi, c0:c0 + P, :])
                    a_i = nl.load(a[c0:c0 + P, st])
                    u_i = nl.load(u[bi, c0:c0 + P, :])
                    step(d_i, u_i, a_i, bi, st, c0, accs[ct], 0, s, 0)
            for ct in nl.affine_range(nct):
                nl.store(out[bi, ct * P:(ct + 1) * P, :], accs[ct])
            continue
        for ct in nl.affine_range(nct):
            c0 = ct * P
            acc = nl.zeros((nl.par_dim(P), s), dtype=delta.dtype)
            d_i = nl.load(delta[bi, c0:c0 + P, :])
            u_i = nl.load(u[bi, c0:c0 + P, :])
            for st in nl.affine_range(ns):
                a_i = nl.load(a[c0:c0 + P, st])
                if version == 2:
                    step(d_i, u_i, a_i, bi, st, c0, acc, 0, s, 0)
                    continue
                carry = nl.zeros((P, 1), dtype=delta.dtype)
                for t in nl.static_range(s // seq_tile):
                    s0 = t * seq_tile
                    h = step(d_i[:, s0:s0 + seq_tile], u_i[:, s0:s0 + seq_tile], a_i, bi, st,
                             c0, acc, s0, seq_tile, carry)
                    carry[...] = h[:, seq_tile - 1:seq_tile]
            nl.store(out[bi, c0:c0 + P, :], acc)
    return out


# ------------------------------------------------------------------ NKI tutorial: matmul
def matmul_blocked(lhsT, rhs, tm=16, tn=2, tk=8):
    """``lhsT.T @ rhs`` blocked on all three axes (the tutorial's fully optimised structure).

    N blocks outermost with SBUF accumulators for the whole M extent; per K block the rhs rows
    are loaded once (one [128, 512*tn] DMA per K tile), then per M block the lhsT rows (one
    [128, 128*tm] DMA per K tile), the PSUM groups over the K tiles added into the
    accumulators; finally each 128-row strip is packed and stored with one DMA.
    """
    k_, m_ = lhsT.shape
    n_ = rhs.shape[1]
    bm, bn, bk = P * tm, 512 * tn, P * tk
    out = nl.ndarray((m_, n_), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(n_ // bn):
        acc = nl.zeros((m_ // P, nl.par_dim(P), bn), dtype=lhsT.dtype, buffer=nl.sbuf)
        for kb in nl.sequential_range(k_ // bk):
            rt = nl.ndarray((tk, nl.par_dim(P), bn), dtype=rhs.dtype, buffer=nl.sbuf)
            for i in nl.affine_range(tk):
                r0 = (kb * tk + i) * P
                nisa.dma_copy(dst=rt[i], src=rhs[r0:r0 + P, n * bn:(n + 1) * bn])
            for mb in nl.affine_range(m_ // bm):
                lt = nl.ndarray((tk, nl.par_dim(P), bm), dtype=lhsT.dtype, buffer=nl.sbuf)
                for i in nl.affine_range(tk):
                    r0 = (kb * tk + i) * P
                    nisa.dma_copy(dst=lt[i], src=lhsT[r0:r0 + P, mb * bm:(mb + 1) * bm])
                for j in nl.affine_range(tn):
                    for a in nl.affine_range(tm):
                        ps = nl.zeros((P, 512), dtype=nl.float32, buffer=nl.psum)
                        for i in nl.affine_range(tk):
                            ps += nisa.nc_matmul(lt[i][:, a * P:(a + 1) * P],
                                                 rt[i][:, j * 512:(j + 1) * 512])
                        row = mb * tm + a
                        acc[row][:, j * 512:(j + 1) * 512] = nisa.tensor_tensor(
                            acc[row][:, j * 512:(j + 1) * 512], ps, op=nl.add)
        for r in nl.affine_range(m_ // P):
            packed = nl.ndarray((P, bn), dtype=nl.float32, buffer=nl.sbuf)
            packed[...] = nisa.tensor_copy(acc[r])
            nisa.dma_copy(dst=out[r * P:(r + 1) * P, n * bn:(n + 1) * bn], src=packed)
    return out


def fp8_double_row_matmul(lhs, rhs_q, rhs_scale, tm=2, tn=2, tk=16):
    """``lhs [M, K] @ rhs`` with ``rhs`` pre-quantised to fp8 (``rhs_q [K/2, 2N]``: pairs of
    [128, 512] K-tiles side by side) and a column scale ``rhs_scale [128, N]`` (trn2).

    Per M block and K block: each 128-row strip of ``lhs`` is loaded, quantised row-wise to fp8
    (abs, row max, /240, divide), TensorE-transposed into [K, M] tiles; the rhs pairs of the K
    block are loaded; double-row fp8 matmuls (two K tiles per instruction) accumulate in PSUM,
    are added into a block result, dequantised by the row scale and added into the strip result;
    at the end the column scale is applied and the strips are stored.
    """
    m_, k_ = lhs.shape
    n_ = rhs_q.shape[1] // 2
    bm, bk = P * tm, P * tk
    fp8 = nl.float8_e4m3
    out = nl.ndarray((m_, n_), dtype=lhs.dtype, buffer=nl.shared_hbm)
    i_k, i_t, i_n = nl.mgrid[0:P, 0:2, 0:512]
    for mb in nl.affine_range(m_ // bm):
        res = nl.zeros((tm, nl.par_dim(P), n_), dtype=lhs.dtype, buffer=nl.sbuf)
        for kb in nl.sequential_range(k_ // bk):
            lt = nl.ndarray((tm, nl.par_dim(P), tk, P), dtype=fp8, buffer=nl.sbuf)
            scale = nl.ndarray((tm, nl.par_dim(P), 1), dtype=lhs.dtype, buffer=nl.sbuf)
            for a in nl.affine_range(tm):
                r0 = mb * bm + a * P
                x = nl.load(lhs[r0:r0 + P, kb * bk:(kb + 1) * bk])
                scale[a] = nl.divide(nisa.tensor_reduce(nl.max, nl.abs(x), axis=(1,),
                                                        keepdims=True), 240.0)
                xq = nl.divide(x, scale[a], dtype=fp8)
                for i in nl.affine_range(tk):
                    lt[a][:, i, :] = nisa.nc_transpose(xq[:, i * P:(i + 1) * P])
            part = nl.zeros((tm, nl.par_dim(P), n_), dtype=lhs.dtype, buffer=nl.sbuf)
            for nb in nl.affine_range(n_ // (512 * tn)):
                rt = nl.ndarray((tk // 2, nl.par_dim(P), 2 * 512 * tn), dtype=fp8,
                                buffer=nl.sbuf)
                for i in nl.affine_range(tk // 2):
                    r0 = (kb * tk // 2 + i) * P
                    rt[i] = nl.load(rhs_q[r0:r0 + P, nb * 1024 * tn:(nb + 1) * 1024 * tn])
                for a in nl.affine_range(tm):
                    for j in nl.affine_range(tn):
                        ps = nl.zeros((P, 512), dtype=nl.float32, buffer=nl.psum)
                        for i in nl.affine_range(tk // 2):
                            st = lt[a, :, 2 * i:2 * i + 2, :]
                            mv = rt[i, i_k, j * 1024 + i_t * 512 + i_n]
                            ps += nisa.nc_matmul(st, mv, perf_mode="double_row_gen3")
                        c0 = nb * 512 * tn + j * 512
                        part[a][:, c0:c0 + 512] = nl.add(part[a][:, c0:c0 + 512], ps)
            for a in nl.affine_range(tm):
                res[a] = nl.add(res[a], nl.multiply(part[a], scale[a]))
        cs = nl.load(rhs_scale)
        for a in nl.affine_range(tm):
            r0 = mb * bm + a * P
            nl.store(out[r0:r0 + P, :], value=nl.multiply(res[a], cs))
    return out


# ------------------------------------------------------------------ NKI docs: micro kernels
def dependent_chain(x, n):
    """``n`` back-to-back activations on one element per partition, each reading the last."""
    t = nl.load(x)
    for _ in nl.static_range(n):
        t = nisa.activation(op=nl.copy, data=t, scale=1.0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=t)
    return out


def dma_exp(x):
    """Load ``x [4, 4096]`` with one DMA, exp on ScalarE, store (the DMA overview example)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=nl.exp(t))
    return out


# ------------------------------------------------------------------ row -> (kernel, args)
# ------------------------------------------------------------------ NKIBench: streaming
def _on_act(x, scale=1.0, bias=None):
    """``x * scale + bias`` as a ScalarE activation (identity function).

    why: the NKIBench kernels leave tensor_scalar's engine to the compiler; their profiles'
    ScalarE active times (silu 31 %, adamw 62 %) are those of every tensor_scalar on ScalarE,
    which NeuronCore-v2 runs as an activation with scale / bias.
    """
    return nisa.activation(op=nl.copy, data=x, scale=scale, bias=bias)


def silu_stream(x, chunk=1024, half=512):
    """``x * sigmoid(x)`` of ``x [128, R, F]``: one ``[128, chunk]`` load per (row, chunk),
    per ``half``: exp(-x) on ScalarE, +1 (tensor_scalar), reciprocal and the product on VectorE,
    one store per chunk."""
    _, rows, f = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.zeros((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    one = nl.full((P, 1), 1.0, dtype=nl.float32, buffer=nl.sbuf)
    for r in nl.affine_range(rows):
        for c in nl.affine_range(f // chunk):
            f0 = c * chunk
            xt = nl.load(x[:, r, f0:f0 + chunk])
            yt = nl.ndarray((P, chunk), dtype=x.dtype, buffer=nl.sbuf)
            for h in nl.affine_range(chunk // half):
                xs = xt[:, h * half:(h + 1) * half]
                e = nisa.activation(op=nl.exp, data=xs, bias=zero, scale=-1.0)
                d = _on_act(e, bias=one)
                yt[:, h * half:(h + 1) * half] = nl.multiply(xs, nisa.reciprocal(d))
            nl.store(out[:, r, f0:f0 + chunk], value=yt)
    return out


def adamw_stream(theta, grad, m, v, chunk=1024, half=512):
    """One AdamW step over ``[M, N]`` fp32 tensors, 128 rows x ``chunk`` columns per tile.

    Four loads per tile; per ``half`` the update as VectorE tensor_scalar / tensor_tensor ops
    plus one ScalarE sqrt (10 VectorE, 1 ScalarE instructions and a reciprocal), one store.
    The last row tile is partial (``M`` not a multiple of 128).
    """
    rows, cols = theta.shape
    out = nl.ndarray(theta.shape, dtype=theta.dtype, buffer=nl.shared_hbm)
    zero = nl.zeros((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    eps = nl.full((P, 1), 1e-8, dtype=nl.float32, buffer=nl.sbuf)
    for rt in nl.static_range((rows + P - 1) // P):  # why: the last tile's height is static
        r0 = rt * P
        pr = min(P, rows - r0)
        for c in nl.affine_range(cols // chunk):
            c0 = c * chunk
            th = nl.load(theta[r0:r0 + pr, c0:c0 + chunk])
            mt = nl.load(m[r0:r0 + pr, c0:c0 + chunk])
            vt = nl.load(v[r0:r0 + pr, c0:c0 + chunk])
            gt = nl.load(grad[r0:r0 + pr, c0:c0 + chunk])
            res = nl.ndarray((pr, chunk), dtype=theta.dtype, buffer=nl.sbuf)
            for h in nl.affine_range(chunk // half):
                sl = slice(h * half, (h + 1) * half)
                decay = nl.subtract(th[:, sl], _on_act(th[:, sl], 1e-5))
                m1 = nl.add(_on_act(mt[:, sl], 0.9),
                            _on_act(gt[:, sl], 0.1))
                step = _on_act(m1, 0.01)
                g2 = nl.multiply(_on_act(gt[:, sl], 1e-3), gt[:, sl])
                v1 = nl.add(_on_act(vt[:, sl], 0.999), g2)
                den = _on_act(nisa.activation(op=nl.sqrt, data=v1, bias=zero[0:pr],
                                              scale=1000.0), bias=eps[0:pr])
                res[:, sl] = nl.subtract(decay, nl.multiply(step, nisa.reciprocal(den)))
            nl.store(out[r0:r0 + pr, c0:c0 + chunk], value=res)
    return out


def rope_halves(x, cos, sin, tile=512):
    """Rotary embedding of ``x [D, S]`` (first and second halves of the D partitions):
    per ``tile`` columns one load of x and of cos/sin (D/2 partitions each), a copy of the lower
    half to base partition 0, four multiplies and the two combinations on VectorE, one store."""
    d, s = x.shape
    hd = d // 2
    out = nl.ndarray((d, s), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(s // tile):
        s0 = t * tile
        xt = nl.load(x[:, s0:s0 + tile])
        ct = nl.load(cos[:, s0:s0 + tile])
        st = nl.load(sin[:, s0:s0 + tile])
        lo = nl.copy(xt[hd:d, :])
        hi = xt[0:hd, :]
        hc = nisa.tensor_tensor(hi, ct, op=nl.multiply)
        lc = nisa.tensor_tensor(lo, ct, op=nl.multiply)
        hs = nisa.tensor_tensor(hi, st, op=nl.multiply)
        ls = nisa.tensor_tensor(lo, st, op=nl.multiply)
        yt = nl.ndarray((d, tile), dtype=x.dtype, buffer=nl.sbuf)
        yt[0:hd, :] = nisa.tensor_tensor(hc, ls, op=nl.subtract)
        yt[hd:d, :] = nisa.tensor_tensor(lc, hs, op=nl.add)
        nl.store(out[:, s0:s0 + tile], value=yt)
    return out


def _z(shape, dtype):
    return np.zeros(tuple(shape), _DT[dtype])


def _matmul_variants():
    """The tutorial matmul variants of tests/sim/test_timing_matmul.py (one definition)."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "tests" / "sim" / "test_timing_matmul.py"
    spec = importlib.util.spec_from_file_location("timing_matmul_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mamba_args(row):
    p, dt = row["params"], row["dtype"]
    b, c, s, n = p["batch"], p["channels"], p["seq"], p["state"]
    return (_z((b, c, s), dt), _z((b, c, s), dt), _z((c, n), dt), _z((b, n, s), dt),
            _z((b, n, s), dt), p["version"])


def build(row):
    """``(function, args)`` for a calibration row."""
    k, p, dt = row["kernel"], row["params"], row["dtype"]
    if k == "adaptive_avg_pool2d":
        return adaptive_avg_pool2d, (_z(p["x"], dt), p["oh"], p["ow"])
    if k == "resize_nearest":
        return resize_nearest, (_z(p["x"], dt), tuple(p["out_shape"]))
    if k == "rmsnorm_matmul":
        return rmsnorm_matmul, (_z(p["hidden"], dt), _z(p["weights"], dt))
    if k == "sd_attention":
        return sd_attention, (_z(p["q"], dt), _z(p["k"], dt), _z(p["v"], dt))
    if k == "fp8_double_row_matmul":
        m_, k_, n_ = p["M"], p["K"], p["N"]
        return fp8_double_row_matmul, (_z((m_, k_), dt), _z((k_ // 2, 2 * n_), "float8_e4m3"),
                                       _z((P, n_), dt), *p["blocks"])
    if k == "matmul_blocked":
        return matmul_blocked, (_z(p["lhsT"], dt), _z(p["rhs"], dt))
    if k.startswith("mm_"):
        return getattr(_matmul_variants(), k), (_z(p["lhsT"], dt), _z(p["rhs"], dt))
    if k == "mamba":
        return mamba, _mamba_args(row)
    if k == "dependent_chain":
        return dependent_chain, (_z((P, 1), dt), p["n"])
    if k == "dma_exp":
        return dma_exp, (_z(p["x"], dt),)
    if k == "silu_stream":
        return silu_stream, (_z(p["x"], dt),)
    if k == "adamw_stream":
        sh = p["shape"]
        return adamw_stream, tuple(_z(sh, dt) for _ in range(4))
    if k == "rope_halves":
        d, s_ = p["d"], p["s"]
        return rope_halves, (_z((d, s_), dt), _z((d // 2, s_), dt), _z((d // 2, s_), dt))
    raise KeyError(f"no calibration kernel named {k!r}")
