"""The nki.isa value rules (semantics/isa_*.py) on both executors: compiled against interpreted.

Every case runs one kernel in both backends, asserts the compiled run really was compiled and
compares each output: bit-identical (0) or within the stated ulps of the output dtype at the
output's largest magnitude, with the reason. Kernels come from the test_isa_* files (their own
numpy references live there) plus a few here that sweep operators, dtypes and special values.
The equality table these cases check is docs/semantics.md's nki.isa section.

``nisa.activation`` is a special instruction of the interpreter (its register variants); its
plain form compiles (``semantics.isa_props.COMPILED_SPECIAL``).
"""

import warnings

import kernels_public as KP
import ml_dtypes
import numpy as np
import pytest
from backends import err_in_ulps as _err_in_ulps
from backends import pairwise_reference, trace_inputs
from backends import ulps as _ulps

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import ActivationRangeWarning, CompiledFallbackWarning, IsaHintWarning, nki
from nki_workbench._src.semantics import NUMPY, isa_alu, jax_numerics
from nki_workbench._src.sim import jax_exec, jax_lower
from nki_workbench._src.sim.interp import Program

pytest.importorskip("jax")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from test_index_grids import causal_scores, layer_norm_stats  # noqa: E402
from test_isa_activation import k_doc, k_table  # noqa: E402
from test_isa_alu import (  # noqa: E402
    k_preduce,
    k_recip,
    k_reduce,
    k_reduce_masked,
    k_scan,
    k_stt,
    k_tensor_scalar,
    k_tensor_scalar_rsqrt,
    k_tensor_tensor_ops,
    k_tt_bits,
    k_tt_int,
)
from test_isa_copy import _copy_kernel, k_dma_t, k_dyn_dst, k_dyn_src0, k_dyn_src1, k_pred  # noqa: E402
from test_isa_matmul import _transpose_kernel, k_double_row, k_matmul, k_mm_dtype, k_tiled  # noqa: E402
from test_isa_select import k_affine_offset, k_bounds, k_causal, k_iota, k_memset  # noqa: E402
from test_isa_stats import k_bcast, k_bn, k_shuffle  # noqa: E402

BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3
RNG = np.random.default_rng(23)


def rand(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def ints(*shape, dtype=np.int32, lo=None, hi=None):
    info = np.iinfo(dtype)
    return RNG.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1,
                        size=shape, dtype=np.int64).astype(dtype)


def specials(*shape):
    """Random floats over 12 decades with NaN, +-inf and -0.0 sprinkled in (no subnormals)."""
    x = (RNG.standard_normal(shape) * 10.0 ** RNG.uniform(-6, 6, shape)).astype(np.float32)
    flat = x.reshape(-1)
    pos = RNG.choice(flat.size, size=4 * max(1, flat.size // 64), replace=False)
    q = len(pos) // 4
    flat[pos[:q]], flat[pos[q:2 * q]] = np.nan, np.inf
    flat[pos[2 * q:3 * q]], flat[pos[3 * q:]] = -np.inf, -0.0
    return x


# ----------------------------------------------------------------------------- harness
def _trace(kernel, args):
    return trace_inputs(kernel, *args)


def _run_both(kernel, args, compiled=True):
    """(interpreter outputs, compiled-backend outputs); ``compiled``: it must not fall back."""
    k, inputs = _trace(kernel, args)
    ref = Program(k).run(inputs, backend="numpy")
    comp = jax_exec.compiled(k)
    runs = comp.runs
    out = jax_exec.run_compiled(k, inputs)
    assert (comp.runs == runs + 1) == compiled, "ran interpreted" if compiled else "ran compiled"
    assert ref.keys() == out.keys()
    return ref, out


def _check(ref, out, ulps):
    """``ulps``: 0 (bit-identical), a number, or {output name: number} (default 0)."""
    for n in ref:
        want = ulps.get(n, 0) if isinstance(ulps, dict) else ulps
        assert out[n].dtype == ref[n].dtype and out[n].shape == ref[n].shape, n
        if want == 0:
            assert _ulps(out[n], ref[n]) == 0, (n, _ulps(out[n], ref[n]))
        else:
            assert _err_in_ulps(out[n], ref[n]) <= want, (n, _err_in_ulps(out[n], ref[n]))


# ----------------------------------------------------------------------------- kernels here
def _tt_ops(ops, dtype=None):
    """``out[k] = tensor_tensor(x, y, ops[k])``."""
    def kernel(a, b):
        out = nl.ndarray((len(ops),) + a.shape, dtype=dtype or a.dtype, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        for k, op in enumerate(ops):
            nl.store(out[k], nisa.tensor_tensor(x, y, op=op, dtype=dtype))
        return out
    return kernel


_FLOAT_OPS = [np.add, np.subtract, np.multiply, np.divide, np.maximum, np.minimum, np.mod,
              np.fmod, np.equal, np.not_equal, np.greater, np.greater_equal, np.less,
              np.less_equal, np.logical_and, np.logical_or, np.logical_xor, np.abs,
              np.reciprocal, "rsqrt", np.logical_not]
_BIT_OPS = [np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.right_shift, np.left_shift]


def k_ts_bits(a, v):
    # (data & 0xFFFF) >> v, ~data, data >> 3 on integer tiles (uint32 with a nonneg constant)
    o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(o1, nisa.tensor_scalar(x, np.bitwise_and, 0xFFFF, op1=np.right_shift,
                                    operand1=nl.load(v)))
    nl.store(o2, nisa.tensor_scalar(x, np.right_shift, 3, op1=np.bitwise_xor, operand1=5,
                                    dtype=nl.int32))
    return o1, o2


def k_ts_chain(a, v):
    # FMA bait: (x * v) + c, (c - x) / v, x mod v, int results of float data
    o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    o3 = nl.ndarray(a.shape, dtype=nl.int16, buffer=nl.shared_hbm)
    x, vec = nl.load(a), nl.load(v)
    nl.store(o1, nisa.tensor_scalar(x, np.multiply, vec, op1=np.add, operand1=0.3))
    nl.store(o2, nisa.tensor_scalar(x, np.subtract, 1.7, reverse0=True, op1=np.divide,
                                    operand1=vec, dtype=nl.bfloat16))
    nl.store(o3, nisa.tensor_scalar(x, np.mod, vec, op1=np.multiply, operand1=100.0,
                                    dtype=nl.int16))
    return o1, o2, o3


def k_reduce_ops(a, b):
    # middle-axis sums (numpy accumulates sequentially there), all float/logical/bitwise ops
    of = nl.ndarray((5, a.shape[0], a.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    oi = nl.ndarray((b.shape[0], 1), dtype=b.dtype, buffer=nl.shared_hbm)
    oj = nl.ndarray((b.shape[0], 1), dtype=b.dtype, buffer=nl.shared_hbm)
    ol = nl.ndarray((a.shape[0], 1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    for k, op in enumerate([np.add, np.subtract, np.multiply, np.maximum, np.minimum]):
        nl.store(of[k], nisa.tensor_reduce(op, x, axis=1, dtype=nl.float32))
    nl.store(oi, nisa.tensor_reduce(np.bitwise_xor, y, axis=1, keepdims=True))
    nl.store(oj, nisa.tensor_reduce(np.bitwise_and, y, axis=1, keepdims=True))
    nl.store(ol, nisa.tensor_reduce(np.logical_xor, x, axis=(2, 1), keepdims=True,
                                    dtype=nl.float32, negate=True))
    return of, oi, oj, ol


def k_reduce_long(a):
    # a long row: numpy's pairwise recursion below 128-element blocks
    o = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(o, nisa.tensor_reduce(np.add, nl.load(a), axis=1, keepdims=True))
    return o


def k_preduce_masked(a):
    out = nl.ndarray((1, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(a.shape[0])[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    t = nl.zeros((1, a.shape[1]), dtype=nl.float32)
    t[...] = nisa.tensor_partition_reduce(np.add, nl.load(a)[i_p, i_f], mask=(i_p < 100))
    nl.store(out, t)
    return out


def k_scan_max_div(a, b):
    # the scan with a reversed divide: (data1 / max(data0, prev)), rounded at every step
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_tensor_scan(nl.load(a), nl.load(b), 7.0, np.maximum, np.divide,
                                          reverse1=True, dtype=nl.float32))
    return out


def k_act_exact(a, s, b):
    o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    o3 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x, sc, bias = nl.load(a), nl.load(s), nl.load(b)
    nl.store(o1, nisa.activation(op=nl.relu, data=x, scale=sc, bias=bias))
    nl.store(o2, nisa.activation(op=nl.copy, data=x, scale=0.7, bias=bias, dtype=nl.bfloat16))
    nl.store(o3, nisa.activation(op=np.abs, data=x, scale=sc))
    return o1, o2, o3


def k_act_psum(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    acc = nl.zeros(a.shape, dtype=nl.float32, buffer=nl.psum)
    for _ in nl.sequential_range(3):
        acc += nisa.activation(op=np.square, data=x, scale=1.3)
    nl.store(out, acc)
    return out


def k_act_sin(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.activation(op=nl.sin, data=nl.load(a)))
    return out


def k_pred_scalar(b, p):
    # a scalar src into bf16 and int16 destinations
    o1 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray(b.shape, dtype=nl.int16, buffer=nl.shared_hbm)
    pred = nl.load(p)
    d1 = nl.load(b)
    nisa.tensor_copy_predicated(src=-2.5, dst=d1, predicate=pred)
    nl.store(o1, d1)
    d2 = nisa.tensor_copy(nl.load(b), dtype=nl.int16)
    nisa.tensor_copy_predicated(src=9.75, dst=d2, predicate=pred, reverse_pred=True)
    nl.store(o2, d2)
    return o1, o2


def _nan_rows():
    """Rows of NaNs only and rows with 5 numbers then NaNs: max8 fills its slots with NaN."""
    x = specials(64, 16)
    x[:4] = np.nan
    x[4::2, 5:] = np.nan
    return x


def k_max8_masked(a):
    out = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(a.shape[0])[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    x = nl.load(a)
    nl.store(out, nisa.max8(src=x[i_p, i_f], mask=(i_f < 40)))
    return out


def k_max8(a):
    out = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.max8(src=nl.load(a)))
    return out


def k_bn_small(a):
    out = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.ndarray((a.shape[0], 6), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nisa.bn_stats(nl.load(a), dtype=nl.float32)
    nl.store(st, s)
    nl.store(out, nisa.bn_aggr(s))
    return out, st


def k_left_shift(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_scalar(nl.load(a), np.left_shift, 3))
    return out


def k_onezero(a_t, b):
    out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.nc_matmul(nl.load(a_t), nl.load(b), is_moving_onezero=True))
    return out


_MM = 16  # float32 matmul: XLA's dot and BLAS sum the products in different orders (<= 4 seen)

# name, kernel, arguments, ulps (0 / number / per-output dict)
CASES = [
    # -- ALU
    ("tensor_tensor_ops", k_tensor_tensor_ops, lambda: (rand(128, 64), rand(128, 64)), 0),
    ("tensor_tensor_float_ops", _tt_ops(_FLOAT_OPS),
     lambda: (specials(64, 96), specials(64, 96)), 0),
    ("tensor_tensor_bf16_to_f32", _tt_ops([np.add, np.multiply, np.divide], nl.float32),
     lambda: (rand(32, 48, dtype=BF16), rand(32, 48, dtype=BF16)), 0),
    ("tensor_tensor_power", _tt_ops([np.power]),
     lambda: ((10.0 ** RNG.uniform(-2, 2, (64, 64))).astype(np.float32),
              RNG.uniform(-4, 4, (64, 64)).astype(np.float32)),
     2),  # XLA's pow, not libm's powf (identical on CPU in practice; other backends may not be)
    ("tensor_tensor_int32_gpsimd_wraps", k_tt_int,
     lambda: (ints(64, 32), ints(64, 32)), 0),
    ("tensor_tensor_bits_int32", _tt_ops(_BIT_OPS),
     lambda: (ints(32, 64), ints(32, 64, lo=-40, hi=40)), 0),
    ("tensor_tensor_bits_uint32", _tt_ops(_BIT_OPS),
     lambda: (ints(32, 64, dtype=np.uint32), ints(32, 64, dtype=np.uint32, hi=40)), 0),
    ("tensor_tensor_bits_uint16", _tt_ops(_BIT_OPS + [np.invert]),
     lambda: (ints(32, 64, dtype=np.uint16), ints(32, 64, dtype=np.uint16, hi=20)), 0),
    ("tensor_tensor_xor_bits", k_tt_bits, lambda: (ints(2, 4), ints(2, 4)), 0),
    ("tensor_scalar", k_tensor_scalar, lambda: (rand(128, 256), rand(128, 1)), 0),
    ("tensor_scalar_chain", k_ts_chain, lambda: (specials(128, 80), rand(128, 1) + 2.0), 0),
    ("tensor_scalar_rsqrt_gpsimd", k_tensor_scalar_rsqrt,
     lambda: (np.abs(rand(16, 32)) + 0.5,), 0),
    ("tensor_scalar_bits_uint32", k_ts_bits,
     lambda: (ints(64, 32, dtype=np.uint32), ints(64, 1, dtype=np.uint32, hi=35)), 0),
    ("scalar_tensor_tensor", k_stt, lambda: (rand(128, 64), rand(128, 64), rand(128, 1)), 0),
    ("tensor_tensor_scan", k_scan, lambda: (rand(64, 96) * 0.5, rand(64, 96)), 0),
    ("tensor_tensor_scan_max_div", k_scan_max_div, lambda: (rand(32, 40), rand(32, 40) + 3), 0),
    ("tensor_reduce", k_reduce, lambda: (rand(128, 8, 16, scale=100),), 0),
    ("tensor_reduce_masked", k_reduce_masked, lambda: (rand(32, 64, scale=1e3),), 0),
    ("tensor_reduce_ops", k_reduce_ops,
     lambda: (RNG.uniform(0.5, 1.5, (64, 24, 5)).astype(np.float32), ints(64, 20)), 0),
    ("tensor_reduce_long_row", k_reduce_long, lambda: (specials(8, 3000),), 0),
    ("tensor_partition_reduce", k_preduce,
     lambda: (rand(128, 32, 4), ints(16, 8, lo=0, hi=1 << 20)), 0),
    ("tensor_partition_reduce_masked", k_preduce_masked, lambda: (rand(128, 48),), 0),
    ("reciprocal", k_recip, lambda: (rand(128, 64) + 3.0,), 0),
    # -- activation (ScalarE): bit-exact for copy/square/relu/abs, XLA's kernels otherwise
    ("activation_exact", k_act_exact, lambda: (specials(64, 32), rand(64, 1), rand(64, 1)), 0),
    ("activation_doc_bf16", k_doc, lambda: (rand(128, 512), rand(128, 1)), 0),
    ("activation_psum_acc", k_act_psum, lambda: (rand(16, 32),), 0),
    ("activation_table", k_table, lambda: (rand(64, 32), rand(64, 1)),
     {"o0": 2, "o1": 4, "o3": 4, "o4": 4}),  # XLA's exp, erf (gelu), sigmoid, tanh
    ("mamba_isa", KP.mamba_isa,
     lambda: (RNG.uniform(0, 0.5, (1, 128, 32)).astype(np.float32), rand(1, 128, 32),
              -np.abs(rand(128, 4)), rand(1, 4, 32), rand(1, 4, 32)), 8),  # XLA's exp
    # -- TensorE
    ("nc_matmul_k_accumulate", k_matmul, lambda: (rand(256, 128), rand(256, 512)), _MM),
    ("nc_matmul_bf16", k_mm_dtype, lambda: (rand(128, 64, dtype=BF16),
                                            rand(128, 96, dtype=BF16)), _MM),
    ("nc_matmul_fp8", k_mm_dtype, lambda: (rand(128, 64).astype(E4M3),
                                           rand(128, 96).astype(E4M3)), _MM),
    ("nc_matmul_tile_position", k_tiled, lambda: (rand(64, 128), rand(64, 128)), _MM),
    ("nc_matmul_double_row", k_double_row, lambda: (rand(128, 2, 64).astype(E4M3),
                                                    rand(128, 2, 256).astype(E4M3)), _MM),
    ("nc_transpose_tensor", _transpose_kernel("trn1", nisa.unknown_engine),
     lambda: (rand(128, 4, 16),), 0),
    ("nc_transpose_vector", _transpose_kernel("trn1", nisa.vector_engine),
     lambda: (rand(32, 16, dtype=BF16),), 0),
    ("nc_transpose_nan_nc_v2", _transpose_kernel("trn1", nisa.tensor_engine),
     lambda: (specials(64, 48),), 0),
    ("nc_transpose_nan_nc_v3", _transpose_kernel("trn2", nisa.tensor_engine),
     lambda: (specials(64, 48),), 0),
    # -- copies
    ("tensor_copy_vector", _copy_kernel(nisa.vector_engine), lambda: (specials(64, 32),), 0),
    ("tensor_copy_to_f16", _copy_kernel(nisa.unknown_engine, nl.float16),
     lambda: (specials(64, 32),), 0),
    ("tensor_copy_scalar_nc_v2_int", _copy_kernel(nisa.scalar_engine),
     lambda: (ints(4, 16),), 0),
    ("tensor_copy_scalar_nc_v3_int", _copy_kernel(nisa.scalar_engine, target="trn2"),
     lambda: (ints(4, 16),), 0),
    ("tensor_copy_gpsimd_to_fp8", _copy_kernel(nisa.gpsimd_engine, nl.float8_e4m3),
     lambda: (rand(16, 64, scale=50),), 0),
    ("tensor_copy_dynamic_src", k_dyn_src0,
     lambda: (rand(128, 512), (4 + np.arange(64, dtype=np.int32))[None, :]), 0),
    ("tensor_copy_dynamic_src_3d", k_dyn_src1,
     lambda: (rand(128, 512, 4), (7 + 3 * np.arange(8, dtype=np.int32))[None, :]), 0),
    ("tensor_copy_dynamic_dst", k_dyn_dst,
     lambda: (rand(32, 4), np.array([[9, 2, 15, 0]], np.int32)), 0),
    ("tensor_copy_predicated", k_pred,
     lambda: (rand(128, 64), rand(128, 64), RNG.random((128, 64)) > 0.5), 0),
    ("tensor_copy_predicated_bf16", k_pred,
     lambda: (rand(64, 64, dtype=BF16), rand(64, 64, dtype=BF16),
              (RNG.random((64, 64)) > 0.5).astype(np.uint8)), 0),
    ("tensor_copy_predicated_scalar", k_pred_scalar,
     lambda: (rand(64, 32, dtype=BF16, scale=10), RNG.integers(0, 3, (64, 32)).astype(np.int32)),
     0),
    ("dma_transpose_2d", k_dma_t, lambda: (rand(32, 64),), 0),
    ("dma_transpose_3d", k_dma_t, lambda: (rand(4, 8, 16),), 0),
    ("dma_transpose_4d", k_dma_t, lambda: (rand(2, 3, 4, 5),), 0),
    # -- selections and generated tiles
    ("affine_select_causal", k_causal, lambda: (rand(128, 128),), 0),
    ("affine_select_int16", k_affine_offset, lambda: (ints(16, 32, dtype=np.int16),), 0),
    ("iota", k_iota, lambda: (), 0),
    ("memset", k_memset, lambda: (), 0),
    ("sequence_bounds_int", k_bounds,
     lambda: (np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3, 0, 0, 5]], np.int32),), 0),
    ("sequence_bounds_float", k_bounds,
     lambda: (RNG.integers(0, 4, (1, 300)).astype(np.float32),), 0),
    # -- statistics and moves
    ("bn_stats_aggr", k_bn, lambda: (rand(128, 1024, scale=3) + 1,), 0),
    ("bn_stats_odd", k_bn_small, lambda: (rand(16, 7, scale=1e3) + 5,), 0),
    ("max8", k_max8, lambda: (specials(64, 200),), 0),
    ("max8_nan_rows", k_max8, lambda: (_nan_rows(),), 0),
    ("max8_bf16", k_max8, lambda: (rand(32, 64, dtype=BF16),), 0),
    ("max8_masked", k_max8_masked, lambda: (rand(32, 64),), 0),
    ("nc_stream_shuffle", k_shuffle, lambda: (rand(128, 16),), 0),
    ("nc_stream_shuffle_broadcast", k_bcast, lambda: (rand(1, 8),), 0),
    # -- tutorial patterns: bn_stats/bn_aggr layernorm over a ragged tile, PSUM affine_select
    ("layernorm_bn_stats_ragged", layer_norm_stats,
     lambda: (RNG.random((300, 1000), dtype=np.float32), 1e-5,
              RNG.random(1000, dtype=np.float32)), 0),
    ("causal_scores_psum", causal_scores,
     lambda: (RNG.random((64, 128), np.float32), RNG.random((64, 128), np.float32)), _MM),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compiled_isa_matches_interpreter(case):
    name, kernel, make, ulps = case
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref, out = _run_both(kernel, make())
    _check(ref, out, ulps)


# ----------------------------------------------------------------------------- under jax.vmap
def k_row_tiles(a, v):
    # independent row tiles: the compiled backend batches the affine loop with jax.vmap
    P, F = 128, a.shape[1]
    o1 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    o4 = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.shared_hbm)
    o5 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    o6 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        x = nl.load(a[i * P:(i + 1) * P, 0:F])
        vec = nl.load(v[i * P:(i + 1) * P, 0:1])
        nl.store(o1[i * P:(i + 1) * P, 0:F], nisa.tensor_scalar(x, np.divide, vec,
                                                                op1=np.subtract, operand1=0.5))
        nl.store(o2[i * P:(i + 1) * P, 0:1], nisa.tensor_reduce(np.add, x, axis=1,
                                                                keepdims=True))
        nl.store(o3[i * P:(i + 1) * P, 0:2], nisa.bn_aggr(nisa.bn_stats(x, dtype=nl.float32)))
        nl.store(o4[i * P:(i + 1) * P, 0:8], nisa.max8(src=x))
        nl.store(o5[i * P:(i + 1) * P, 0:F], nisa.tensor_tensor_scan(x, x, 0.0, np.multiply,
                                                                     np.add))
        nl.store(o6[i * P:(i + 1) * P, 0:F], nisa.activation(op=nl.relu, data=x, scale=vec))
    return o1, o2, o3, o4, o5, o6


def test_rules_under_vmap_are_bit_identical(monkeypatch):
    calls = []

    def counting(lw, loop, plan):
        calls.append(loop.var)
        return vectorise(lw, loop, plan)
    vectorise = jax_lower.vectorise
    monkeypatch.setattr(jax_lower, "vectorise", counting)
    a, v = rand(512, 96, scale=10), rand(512, 1) + 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref, out = _run_both(k_row_tiles, (a, v))
    assert calls, "the row-tile loop was not vectorised"
    _check(ref, out, 0)


# ----------------------------------------------------------------------------- fallbacks
def _falls_back(kernel, args, reason):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ref, out = _run_both(kernel, args, compiled=False)
    for n in ref:
        np.testing.assert_array_equal(out[n], ref[n])
    notes = [str(w.message) for w in rec if w.category is CompiledFallbackWarning]
    assert len(notes) == 1 and reason in notes[0], notes


def k_act_regs(a, b):
    # the accumulator chain of test_isa_activation without activation_reduce
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    res = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(op=nl.exp, data=x, reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    t = nisa.activation(op=nl.exp, data=y, reduce_op=np.add, reduce_res=res,
                        reduce_cmd=nisa.reduce_cmd.reduce)
    nl.store(o, t)
    nl.store(r, res)
    return o, r


def test_activation_registers_fall_back():
    _falls_back(k_act_regs, (rand(128, 64), rand(128, 64)), "reduce_cmd=reduce")


def k_act_reduce(a, v):
    # activation_reduce (a fresh register chain each time) over row tiles, one masked
    n, f = a.shape
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((n, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:f]
    i_q, i_r = nl.mgrid[0:128, 0:2]
    for t in nl.affine_range(n // 128):
        x = nl.load(a[t * 128 + i_p, i_f])
        r = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        y = nisa.activation_reduce(op=nl.relu, data=x, reduce_op=np.add, reduce_res=r[:, 0:1],
                                   bias=nl.load(v[t * 128:(t + 1) * 128, 0:1]), scale=2.0)
        nisa.activation_reduce(op=nl.copy, data=x[i_p, i_f], reduce_op=np.add,
                               reduce_res=r[:, 1:2], mask=i_f < f - 3)
        nl.store(o[t * 128 + i_p, i_f], y)
        nl.store(s[t * 128 + i_q, i_r], r)
    return o, s


def test_activation_reduce_compiles_and_matches_the_interpreter():
    a, v = rand(384, 96, scale=4), rand(384, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref, out = _run_both(k_act_reduce, (a, v))
    _check(ref, out, 0)
    y = np.maximum(a.astype(np.float64) * 2 + v, 0)
    np.testing.assert_allclose(out["o"], y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["s"][:, 0], y.sum(1), rtol=1e-5)
    np.testing.assert_allclose(out["s"][:, 1], a[:, :93].astype(np.float64).sum(1), rtol=1e-5,
                               atol=1e-4)


def k_act_log_masked(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:a.shape[0], 0:a.shape[1]]
    y = nl.zeros(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    y[i_p, i_f] = nisa.activation(op=nl.log, data=nl.load(a), mask=i_f < 5)
    nl.store(out, y)
    return out


def test_activation_range_checked_op_compiles_and_flags_out_of_range_data():
    # why: the valid-range check is a run-time flag of the compiled program (P.flagged): data
    # in range runs compiled and quiet; data out of range re-runs in the interpreter, which warns
    a = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref, out = _run_both(k_act_sin, (a,))
    _check(ref, out, 4)
    np.testing.assert_allclose(out["out"], np.sin(a), rtol=1e-6, atol=1e-7)
    k, inputs = _trace(k_act_sin, (a * 4,))
    with pytest.warns(ActivationRangeWarning):
        ref = Program(k).run(inputs, backend="numpy")
    comp = jax_exec.compiled(k)
    runs = comp.runs
    with pytest.warns(ActivationRangeWarning, match="sin: 14 input value"):
        out = jax_exec.run_compiled(k, inputs)
    assert comp.runs == runs + 1  # why: the compiled program ran and raised the flag
    np.testing.assert_array_equal(out["out"], ref["out"])


def test_activation_range_check_ignores_masked_off_elements_when_compiled():
    a = np.abs(rand(16, 8)) + 0.5
    a[:, 5:] = -1.0  # out of log's range, but masked off
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref, out = _run_both(k_act_log_masked, (a,))
    _check(ref, out, 4)
    np.testing.assert_allclose(out["out"][:, :5], np.log(a[:, :5]), rtol=1e-6)
    np.testing.assert_array_equal(out["out"][:, 5:], 0)


def test_matmul_hint_falls_back_and_warns():
    a_t = rand(16, 8)
    b = (RNG.random((16, 8)) > 0.5).astype(np.float32)
    _falls_back(k_onezero, (a_t, b), "is_moving_onezero")
    k, inputs = _trace(k_onezero, (a_t, b + 0.5))
    with pytest.warns(IsaHintWarning, match="is_moving_onezero"):
        jax_exec.run_compiled(k, inputs)


def test_left_shift_keeps_the_32_bit_pattern():
    x = ints(8, 16, lo=-(1 << 30), hi=1 << 30)
    ref, out = _run_both(k_left_shift, (x,))
    _check(ref, out, 0)
    np.testing.assert_array_equal(out["out"], (x.astype(np.int64) << 3).astype(np.uint32)
                                  .view(np.int32))


def test_mixed_signed_uint32_bitvec_compiles_bit_identical():
    # int32 | uint32: both executors OR the 32-bit patterns and read the result as uint32
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_tensor(nl.load(a), nl.load(b), op=np.bitwise_or,
                                         dtype=nl.uint32))
        return out
    a, b = ints(8, 16), ints(8, 16, dtype=np.uint32)
    ref, out = _run_both(k, (a, b))
    _check(ref, out, 0)
    np.testing.assert_array_equal(out["out"], a.view(np.uint32) | b)


def test_predicated_scalar_is_an_fp32_immediate():
    # 1 + 2**-11 + 2**-40 is 1 + 2**-11 as an fp32 immediate, a tie that float16 rounds to 1.0
    def k(b, p):
        out = nl.ndarray(b.shape, dtype=nl.float16, buffer=nl.shared_hbm)
        d = nisa.tensor_copy(nl.load(b), dtype=nl.float16)
        nisa.tensor_copy_predicated(src=1.0 + 2.0 ** -11 + 2.0 ** -40, dst=d,
                                    predicate=nl.load(p))
        nl.store(out, d)
        return out
    b, p = rand(16, 8), RNG.integers(0, 2, (16, 8)).astype(np.uint8)
    ref, out = _run_both(k, (b, p))
    _check(ref, out, 0)
    np.testing.assert_array_equal(out["out"], np.where(p != 0, np.float16(1.0),
                                                       b.astype(np.float16)))


def test_shuffle_reading_outside_src_raises_the_interpreters_error():
    def k(a):
        out = nl.ndarray((64, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        d = nl.ndarray((64, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(src=nl.load(a), dst=d, shuffle_mask=[0] * 32)
        nl.store(out, d)
        return out
    k_ir, inputs = _trace(k, (rand(32, 8),))
    with pytest.raises(nki.NkiError) as ref_err:
        Program(k_ir).run(inputs, backend="numpy")
    comp = jax_exec.compiled(k_ir)
    runs = comp.runs
    with pytest.raises(nki.NkiError) as err:
        jax_exec.run_compiled(k_ir, inputs)
    assert comp.runs == runs and str(err.value) == str(ref_err.value)


def test_unwritten_input_reruns_the_interpreter_with_its_warnings():
    def k(a):
        out = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=nl.float32)
        t[:, 0:8] = nl.load(a[:, 0:8])
        nl.store(out, nisa.tensor_reduce(np.add, t, axis=1, keepdims=True))
        return out
    k_ir, inputs = _trace(k, (rand(16, 32),))
    with pytest.warns(Warning) as ref_rec:
        ref = Program(k_ir).run(inputs, backend="numpy")
    comp = jax_exec.compiled(k_ir)
    runs = comp.runs
    with pytest.warns(Warning) as rec:
        out = jax_exec.run_compiled(k_ir, inputs)
    assert comp.runs == runs + 1  # compiled, flagged, then re-run by the interpreter
    assert [str(w.message) for w in rec] == [str(w.message) for w in ref_rec]
    assert "never written" in str(rec[0].message)
    np.testing.assert_array_equal(out["out"], ref["out"])


# ----------------------------------------------------------------------------- the one order
@pytest.mark.parametrize("n", [0, 1, 3, 7, 8, 9, 15, 16, 17, 127, 128, 129, 200, 255, 256, 257,
                               1000, 1024, 4099])
def test_sum_is_the_documented_order_on_both_executors(n):
    x = (RNG.standard_normal((6, n)) * 10.0 ** RNG.uniform(-4, 4, (6, n))).astype(np.float32)
    x[0] = -0.0
    got = jax.jit(lambda v, z: jax_numerics(z).sum(v, 1))(x, np.int32(0))
    ref = NUMPY.sum(x, 1)
    assert np.asarray(got).tobytes() == ref.tobytes()
    with np.errstate(all="ignore"):
        assert ref.tobytes() == np.array([pairwise_reference(r) for r in x]).tobytes()
    assert ref.tobytes() == np.sum(x, axis=1).tobytes()  # numpy's own sum, bit for bit


@pytest.mark.parametrize("shape, axes", [((16, 5, 12), (1,)), ((16, 5, 12), (2,)),
                                         ((16, 5, 12), (1, 2)), ((16, 5, 12), (2, 1)),
                                         ((8, 3, 4, 20), (1, 3)), ((8, 3, 4, 20), (2,)),
                                         ((128, 40), (0,)), ((128, 1), (0,)),
                                         ((4, 1, 300), (2,)), ((4, 300, 1), (1,))])
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "maximum"])
def test_alu_reduce_is_bit_identical_across_executors(shape, axes, op):
    x = (RNG.standard_normal(shape) * 10.0 ** RNG.uniform(-4, 4, shape)).astype(np.float32)
    if op == "multiply":
        x = RNG.uniform(0.5, 2.0, shape).astype(np.float32)
    got = jax.jit(lambda v, z: isa_alu.alu_reduce(jax_numerics(z), op, v, axes))(x, np.int32(0))
    with np.errstate(all="ignore"):
        ref = isa_alu.alu_reduce(NUMPY, op, x, axes)
    assert np.asarray(got).tobytes() == np.asarray(ref).tobytes()


def test_alu_integer_semantics():
    PJ = jax_numerics(jnp.int32(0))
    a = jnp.asarray(np.array([-7, 2**31 - 1, -2**31, 5], np.int32))
    u = jnp.asarray(np.array([0xFFFFFFFF, 3, 2**31, 0], np.uint32))
    shifts = jnp.asarray(np.array([0, 31, 32, -1], np.int32))
    for P, (x, y, c) in ((PJ, (a, u, shifts)), (NUMPY, (np.asarray(a), np.asarray(u),
                                                         np.asarray(shifts)))):
        np.testing.assert_array_equal(  # the logical shift's pattern, read as int32
            isa_alu.alu(P, "right_shift", x, c),
            ((np.asarray(a).astype(np.int64) & 0xFFFFFFFF) >> [0, 31, 64, 64]).astype(np.uint32)
            .view(np.int32))
        np.testing.assert_array_equal(isa_alu.alu(P, "left_shift", y, c),
                                      (np.asarray(u, np.int64) << [0, 31, 64, 64]) & 0xFFFFFFFF)
        np.testing.assert_array_equal(isa_alu.alu(P, "invert", y), ~np.asarray(u))
        np.testing.assert_array_equal(isa_alu.alu(P, "bitwise_and", y, np.int32(0xFF)),
                                      np.asarray(u) & 0xFF)
        np.testing.assert_array_equal(isa_alu.alu(P, "add", x, x, exact_int=True),
                                      (np.asarray(a, np.int64) * 2).astype(np.int32))
        np.testing.assert_array_equal(isa_alu.alu(P, "bitwise_and", y, x),  # mixed: uint32
                                      np.asarray(u) & np.asarray(a).view(np.uint32))
