"""The compiled (JAX) simulator backend against the interpreter, the reference.

Equality per kernel: bit-identical where the math is the same (copies, element-wise +-*/,
max/min, compares, fp8/bf16 rounding, gathers); otherwise within the stated number of ulps of
the output dtype, taken at the output's largest magnitude (XLA's transcendental kernels and
its summation order differ from numpy's and BLAS's).
"""

import warnings

import kernels_public as K
import ml_dtypes
import numpy as np
import pytest
from backends import err_in_ulps as _err_in_ulps
from backends import ulps as _ulps

import nki_workbench.nki.language as nl
from nki_workbench import (
    BlockDimensionWarning,
    CompiledFallbackWarning,
    LoopCarriedDependencyWarning,
    NkiError,
    SimParams,
    UninitializedReadWarning,
    nki,
)
from nki_workbench._src import dtypes as D
from nki_workbench._src.options import SIM_BACKEND_ENV
from nki_workbench._src.sim import jax_exec
from nki_workbench._src.sim.interp import Program

pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from nki_workbench._src.semantics import jax_numerics  # noqa: E402

JR = jax_numerics()  # the compiled backend's numerics (its casts are checked against dtypes)

BF16, E4M3, E5M2 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2
RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


# kernel, arguments, allowed ulps of the output dtype (0 = bit-identical) and why
CASES = [
    ("tensor_add", K.tensor_add, lambda: (rand(128, 512), rand(128, 512)), 0),
    ("ragged_masked", K.tensor_add_ragged, lambda: (rand(300, 100), rand(300, 100)), 0),
    ("spmd", K.tensor_add_spmd[2, 3], lambda: (rand(256, 1536), rand(256, 1536)), 0),
    ("matmul_basic_bf16", K.matmul_basic, lambda: (rand(128, 64, dtype=BF16),
                                                   rand(128, 512, dtype=BF16)), 1),
    ("matmul_tiled_bf16", K.matmul_tiled, lambda: (rand(256, 256, dtype=BF16),
                                                   rand(256, 1024, dtype=BF16)), 1),
    ("matmul_hoisted_f32", K.matmul_hoisted, lambda: (rand(256, 256), rand(256, 1024)), 64),
    ("matmul_block_free_bf16", K.matmul_block_free, lambda: (rand(256, 256, dtype=BF16),
                                                             rand(256, 1024, dtype=BF16)), 1),
    ("transpose2d", K.transpose2d, lambda: (rand(128, 24), (6, 4)), 0),
    ("softmax", K.softmax_kernel, lambda: (rand(256, 384, lo=-4, hi=4),), 8),
    ("softmax_nl", K.softmax_builtin, lambda: (rand(256, 384, lo=-4, hi=4),), 8),
    ("layernorm", K.layernorm, lambda: (rand(256, 96), rand(96), rand(96), 1e-5), 64),
    ("rmsnorm_masked", K.rmsnorm, lambda: (rand(200, 64), rand(64)), 8),
    ("rmsnorm_nl", K.rmsnorm_builtin, lambda: (rand(256, 64), rand(64)), 8),
    ("avgpool2d", K.avgpool2d, lambda: (rand(64, 8, 12), 2), 0),
    ("mamba_scan", K.mamba_scan, lambda: (rand(64, 24, lo=0, hi=0.5), rand(64, 24),
                                          rand(64, 1, lo=-1, hi=0)), 16),
    ("flash_attn", K.flash_attn_fwd, lambda: (rand(64, 256), rand(64, 384), rand(384, 64),
                                              0.125), 64),
    ("no_input", K.no_input_kernel, lambda: (), 0),
    ("tuple_outputs", K.tuple_outputs, lambda: (rand(128, 32),), 4),
    ("fp8_e4m3_matmul", K.fp8_matmul, lambda: (rand(128, 64).astype(E4M3),
                                               rand(128, 256).astype(E4M3)), 4),
    ("fp8_e5m2_matmul", K.fp8_matmul, lambda: (rand(128, 64).astype(E5M2),
                                               rand(128, 256).astype(E5M2)), 4),
    ("where_compare", K.where_compare, lambda: (rand(128, 64), rand(128, 64)), 0),
    ("reductions", K.reductions, lambda: (rand(128, 16, lo=0.5, hi=1.5),), 4),
    ("loop_reduce", K.loop_reduce_kernel, lambda: (rand(512, 64),), 0),
    ("indirect_gather", K.indirect_gather,
     lambda: (rand(256, 32), RNG.integers(0, 256, size=(64,)).astype(np.int32)), 0),
    ("identity_transpose", K.identity_transpose, lambda: (rand(128, 96),), 0),
    ("sequential_accumulate", K.sequential_accumulate, lambda: (rand(512, 32),), 0),
    ("gelu_family", K.gelu_family, lambda: (rand(128, 64, lo=-3, hi=3),), 16),
    ("static_unrolled", K.static_unrolled, lambda: (rand(384, 8),), 0),
    ("legacy_exp", K.legacy_exp, lambda: (rand(128, 256), np.zeros((128, 256), np.float32)),
     4),  # XLA's exp
    ("mutable_update", K.mutable_update, lambda: (rand(128, 16), rand(128, 16)), 0),
]


def _run_both(kernel, args):
    traced = nki.trace_kernel(kernel, *args)
    k = traced.kernel
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    inputs = {p.name: a for p, a in zip(k.params, arrays, strict=True)}
    ref = Program(k).run(inputs, backend="numpy")
    comp = jax_exec.compiled(k)
    runs = comp.runs
    out = jax_exec.run_compiled(k, inputs)
    assert comp.runs == runs + 1, "the kernel was not run compiled"
    return ref, out


@pytest.mark.parametrize("name,kernel,make,ulps", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_interpreter(name, kernel, make, ulps):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # two public samples keep SBUF block dims: NKI's deprecation notice, not a simulator one
        warnings.filterwarnings("ignore", category=BlockDimensionWarning)
        ref, out = _run_both(kernel, make())
    assert ref.keys() == out.keys()
    for n in ref:
        assert out[n].dtype == ref[n].dtype and out[n].shape == ref[n].shape
        if ulps == 0:
            assert _ulps(out[n], ref[n]) == 0, (n, _ulps(out[n], ref[n]))
        else:
            err = _err_in_ulps(out[n], ref[n])
            assert err <= ulps, (n, err)


def test_elementwise_chain_is_bit_identical_no_fma_contraction():
    @nki.jit(mode="simulation")
    def k(a, b, c):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        x = nl.add(nl.multiply(nl.load(a), nl.load(b)), nl.load(c))
        y = nl.divide(x, 1.7)
        z = nl.subtract(nl.multiply(y, 3.0), nl.maximum(x, 0.25))
        nl.store(out, nl.reciprocal(nl.sqrt(nl.abs(z))))
        return out

    a, b, c = rand(128, 512, lo=-9, hi=9), rand(128, 512), rand(128, 512)
    ref, out = _run_both(k, (a, b, c))
    assert _ulps(out["out"], ref["out"]) == 0


# ----------------------------------------------------------------------------- dtype emulation
_SPECIAL = np.array([0.0, -0.0, 1.0, -1.5, 0.5, 65504, 65520, 1e-8, 3.4e38, 240, 241,
                     248, 57344, 61440, np.inf, -np.inf, 2.0**31, -2.0**31, 2.0**32 - 256,
                     2.5, 3.5, -2.5, 300.7, -129.9], np.float32)


def _float_samples(n=20000):
    bits = RNG.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    # why: XLA's CPU runtime flushes float32 subnormals to zero (documented difference)
    bits = bits[np.isfinite(bits) & ((bits == 0) | (np.abs(bits) >= np.finfo(np.float32).tiny))]
    return np.concatenate([_SPECIAL, bits, rand(n, lo=-300, hi=300)])


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float8_e4m3", "float8_e5m2",
                                  "tfloat32", "int8", "uint8", "int16", "uint16", "int32",
                                  "uint32", "bool"])
def test_cast_from_float32_matches_numpy_rules(name):
    x = _float_samples()
    want = D.cast(x, name)
    got = np.asarray(JR.cast(jnp.asarray(x), name))
    assert got.dtype == want.dtype
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        assert _ulps(got, want) == 0


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float8_e4m3", "float8_e5m2",
                                  "tfloat32"])
def test_round_on_store_matches_from_f32(name):
    x = _float_samples()
    x = x[np.abs(x) < 1e30]
    assert _ulps(np.asarray(JR.from_f32(jnp.asarray(x), name)), D.from_f32(x, name)) == 0


@pytest.mark.parametrize("src", ["bfloat16", "float16", "float8_e4m3", "float8_e5m2"])
def test_widening_every_bit_pattern(src):
    st = D.storage_dtype(D.from_name(src))
    bits = np.arange(1 << (8 * st.itemsize), dtype=np.uint32).astype(f"u{st.itemsize}")
    x = bits.view(st)
    assert _ulps(np.asarray(JR.f32(jnp.asarray(x))), D.to_f32(x)) == 0
    for dst in ("int32", "int8", "uint16", "bfloat16"):
        want = D.cast(x, dst)
        got = np.asarray(JR.cast(jnp.asarray(x), dst))
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(got, want)
        else:
            assert _ulps(got, want) == 0


def test_int_to_int_saturates():
    x = np.array([-2**31, -70000, -129, -1, 0, 127, 128, 255, 70000, 2**31 - 1], np.int32)
    for dst in ("int8", "uint8", "int16", "uint16", "uint32", "float32", "bfloat16", "bool"):
        np.testing.assert_array_equal(np.asarray(JR.cast(jnp.asarray(x), dst)), D.cast(x, dst))


# ----------------------------------------------------------------------------- checks kept on
def k_partial_tile(a):
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), nl.float32)
    t[:, 0:32] = nl.load(a[:, 0:32])
    nl.store(out, nl.sum(t, axis=1, keepdims=True))
    return out


def _inputs(kernel, *args):
    k = nki.trace_kernel(kernel, *args).kernel
    return k, {p.name: a for p, a in zip(k.params, args, strict=True)}


def test_uninitialised_read_reports_like_the_interpreter():
    a = rand(128, 64)
    k, inputs = _inputs(k_partial_tile, a)
    with pytest.warns(UninitializedReadWarning) as ref_rec:
        ref = Program(k).run(inputs, backend="numpy")
    with pytest.warns(UninitializedReadWarning) as rec:
        out = jax_exec.run_compiled(k, inputs)
    assert [str(w.message) for w in rec] == [str(w.message) for w in ref_rec]
    assert np.isnan(out["out"]).all() and np.isnan(ref["out"]).all()
    with pytest.raises(NkiError) as info:
        jax_exec.run_compiled(k, inputs, SimParams(uninitialized="error"))
    assert info.value.code == "wb_uninitialized_read"


def test_out_of_bounds_indirect_index_raises_like_the_interpreter():
    data = rand(256, 32)
    idx = np.array([0, 5, 300, 7] * 16, np.int32)
    k, inputs = _inputs(K.indirect_gather, data, idx)
    with pytest.raises(NkiError) as info:
        jax_exec.run_compiled(k, inputs)
    assert info.value.code == "err_tensor_access_out_of_bound"


def test_affine_race_is_reported():
    def k(a):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 64), nl.float32)
        for i in nl.affine_range(4):
            acc[...] = nl.add(acc, nl.load(a[i * 128:(i + 1) * 128, :]))
        nl.store(out, acc)
        return out

    k_ir, inputs = _inputs(k, rand(512, 64))
    with pytest.warns(LoopCarriedDependencyWarning):
        out = jax_exec.run_compiled(k_ir, inputs)
    np.testing.assert_allclose(out["out"], inputs["a"].reshape(4, 128, 64).sum(0), atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax_exec.run_compiled(k_ir, inputs, SimParams(detect_races=False))


def test_interpreter_only_opcode_falls_back_with_one_warning(capfd):
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.dropout(nl.load(a), 0.5))
        return out

    a = rand(128, 64)
    k_ir, inputs = _inputs(k, a)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = jax_exec.run_compiled(k_ir, inputs)
        jax_exec.run_compiled(k_ir, inputs)  # once per kernel and reason
    ref = Program(k_ir).run(inputs, backend="numpy")
    np.testing.assert_array_equal(out["out"], ref["out"])
    assert [w.category for w in rec] == [CompiledFallbackWarning]
    msg = str(rec[0].message)
    assert "'dropout'" in msg and f"'{k_ir.name}'" in msg
    assert capfd.readouterr().err == ""  # a warning, not a print


def test_environment_switch_and_cache(monkeypatch):
    a, b = rand(128, 512), rand(128, 512)
    k = nki.trace_kernel(K.tensor_add, a, b).kernel
    comp = jax_exec.compiled(k)
    runs = comp.runs
    monkeypatch.setenv(SIM_BACKEND_ENV, "jax")
    out = nki.simulate_kernel(K.tensor_add, a, b)  # the one run path reads the switch
    np.testing.assert_array_equal(out, a + b)
    assert comp.runs > runs  # (the suite's backend_config round-trip hook may run it again)
    assert jax_exec.compiled(nki.trace_kernel(K.tensor_add, a, b).kernel) is comp
    runs = comp.runs
    monkeypatch.setenv(SIM_BACKEND_ENV, "numpy")
    nki.simulate_kernel(K.tensor_add, a, b)
    assert comp.runs == runs
    monkeypatch.setenv(SIM_BACKEND_ENV, "tpu")
    with pytest.raises(NkiError, match="NKI_WORKBENCH_SIM_BACKEND"):
        nki.simulate_kernel(K.tensor_add, a, b)
    with pytest.raises(NkiError, match="wb_bad_sim_backend"):  # the interpreter is only numpy
        Program(k).run({"a_input": a, "b_input": b}, backend="jax")


def test_input_errors_match_the_interpreter():
    a = rand(128, 512)
    k, _ = _inputs(K.tensor_add, a, a)
    with pytest.raises(NkiError, match="missing input"):
        jax_exec.run_compiled(k, {"a_input": a})
    with pytest.raises(NkiError, match="has shape"):
        jax_exec.run_compiled(k, {"a_input": a, "b_input": a[:64]})


def test_simulate_kernel_backend_argument_selects_the_compiled_program():
    import nki_workbench.nki.language as nl
    from nki_workbench import nki

    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), 3.0))
        return out

    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    from nki_workbench import SimParams
    for backend in ("jax", "numpy"):
        got = nki.simulate_kernel(k, a, params=SimParams(backend=backend))
        np.testing.assert_array_equal(got, 3 * a)
