"""Index grids of different ranks in one kernel (a 3-D nl.mgrid used on 2-D tensors, masks
written with a 2-D grid), lenient shapes (trailing unit dims), and partition-local taint.

These follow patterns that real NKI tutorials rely on (layernorm with bn_stats/bn_aggr over a
ragged last tile)."""

import math
import warnings

import numpy as np

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import nki


def layer_norm_stats(x, eps, gamma):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    P, D = nl.tile_size.pmax, x.shape[1]
    ip, jf, i0 = nl.mgrid[0:P, 0:D, 0:1]                     # a 3-D grid...
    g = nl.load(gamma.reshape((1, D))[i0, jf]).broadcast_to((P, D))   # [1, D, 1] -> [P, D]
    chunk = nl.tile_size.bn_stats_fmax
    n_chunks = math.ceil(D / chunk)
    for t in nl.affine_range(math.ceil(x.shape[0] / P)):
        rows = t * P + ip
        xt = nl.load(x[rows, jf], mask=(rows < x.shape[0]))   # [P, D, 1] tile, ragged rows
        kc, ks = nl.mgrid[0:chunk, 0:6]                      # ...mixed with a 2-D grid
        stats = nl.ndarray((P, 6 * n_chunks), dtype=np.float32)
        for c in nl.affine_range(n_chunks):
            stats[ip, c * 6 + ks] = nisa.bn_stats(xt[ip, c * chunk + kc],
                                                  mask=(c * chunk + kc < D), dtype=np.float32)
        mv = nisa.bn_aggr(stats[ip, nl.arange(6 * n_chunks)[None, :]])
        scale = nl.rsqrt(mv[ip, 1] + eps)
        y = nisa.tensor_scalar(data=xt, op0=np.subtract, operand0=mv[ip, 0],
                               op1=np.multiply, operand1=scale)
        nl.store(out[rows, jf], value=y * g, mask=(rows < x.shape[0]))
    return out


def test_mixed_rank_grids_masks_and_bn_stats_on_a_ragged_tile():
    rng = np.random.default_rng(0)
    x = rng.random((300, 1000), dtype=np.float32)
    gamma = rng.random(1000, dtype=np.float32)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * gamma
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no false "unwritten" report: garbage rows stay unstored
        out = nki.simulate_kernel(layer_norm_stats, x, 1e-5, gamma)
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-3)


def test_mask_follows_the_grid_axis_its_arange_got():
    text = nki.trace_kernel(layer_norm_stats, np.zeros((300, 1000), np.float32), 1e-5,
                            np.zeros(1000, np.float32)).text
    line = next(ln for ln in text.splitlines() if "bn_stats(" in ln)
    assert "mask=(512*c + {512@1/4} < 1000)" in line


def causal_scores(q_t, k_t):
    """Causal-masked q @ k.T for one 128-row tile, straight from PSUM through affine_select."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:128]
    acc = nl.zeros((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
    acc[ip, jf] += nisa.nc_matmul(stationary=nl.load(q_t), moving=nl.load(k_t))
    masked = nisa.affine_select(pred=(ip >= jf), on_true_tile=acc[ip, jf],
                                on_false_value=-9984.0, dtype=nl.float32)
    nl.store(out, masked)
    return out


def test_affine_select_reads_a_psum_matmul_result():
    rng = np.random.default_rng(1)
    q_t, k_t = rng.random((64, 128), np.float32), rng.random((64, 128), np.float32)
    s = q_t.T @ k_t
    ref = np.where(np.tril(np.ones_like(s)) > 0, s, -9984.0)
    np.testing.assert_allclose(nki.simulate_kernel(causal_scores, q_t, k_t), ref, rtol=1e-5)
