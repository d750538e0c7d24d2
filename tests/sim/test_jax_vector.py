"""Vectorised ``affine_range`` loops in the compiled backend (``jax_vector``).

Each kernel runs in both backends: outputs must be bit-identical to the interpreter (or within
the stated ulps where PSUM accumulations are contracted into one dot), warnings identical, and
the lowered program must show whether the loop was batched (no ``while``) or not.
"""


import kernels_public as K
import ml_dtypes
import numpy as np
import pytest
from backends import lowered_text, run_both, warns_alike
from backends import trace_inputs as _trace

import nki_workbench.nki.language as nl
from nki_workbench import LoopCarriedDependencyWarning, SimParams
from nki_workbench._src.sim import jax_exec, jax_lower
from nki_workbench._src.sim.interp import Program

pytest.importorskip("jax")

from nki_workbench._src.sim import jax_static  # noqa: E402
from nki_workbench._src.sim.jax_vector import vector_plan  # noqa: E402

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(23)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


def _both(kernel, *args):
    """Interpreter and compiled outputs (no warning allowed), and the lowered program text."""
    k, inputs, ref, out = run_both(kernel, *args)
    return ref, out, lowered_text(k, inputs)


def _identical(ref, out):
    assert ref.keys() == out.keys()
    for n in ref:
        assert out[n].dtype == ref[n].dtype and out[n].shape == ref[n].shape
        np.testing.assert_array_equal(out[n].view(np.uint8), ref[n].view(np.uint8))


def _plans(kernel, *args):
    """``{loop var: plan or None}`` for the kernel's top-level loops, as the lowering sees them."""
    k, _ = _trace(kernel, *args)

    class Probe:  # the lowering state a plan reads at the start of a top-level loop
        decls = k.decls()
        ranges, origin, outside, views = {}, {}, {}, {}
        races, tracked = True, jax_static.tracked(k)
        bufs = {n: [None, None, None] for n in decls}

        def used_outside(self, loop):
            return jax_lower.Lower.used_outside(self, loop)
    probe = Probe()
    probe.k = k
    from nki_workbench._src.ir import Loop
    return {s.var: vector_plan(s, probe) for s in k.body if isinstance(s, Loop)}


# ----------------------------------------------------------------------------- batched loops
def rows_then_scale(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        t = nl.add(nl.load(a[rows, :]), nl.load(b[rows, :]))
        nl.store(out[rows, :], nl.divide(nl.maximum(t, 0.25), 3.0))
    return out


def test_row_tiled_elementwise_loop_is_one_batched_op():
    ref, out, text = _both(rows_then_scale, rand(1024, 256), rand(1024, 256))
    _identical(ref, out)
    assert "while" not in text
    assert "tensor<8x128x256xf32>" in text  # the 8 row tiles as one batch


def test_tiled_matmul_becomes_one_dot():
    lhs_t, rhs = rand(512, 256, dtype=BF16), rand(512, 1024, dtype=BF16)
    ref, out, text = _both(K.matmul_tiled, lhs_t, rhs)
    assert text.count("stablehlo.dot_general") == 1 and "while" not in text
    want = (lhs_t.astype(np.float32).T @ rhs.astype(np.float32))
    for n in ref:
        # the contracted sum rounds in another order: within 1 bf16 ulp of the interpreter
        diff = np.abs(out[n].astype(np.float32) - ref[n].astype(np.float32))
        assert np.all(diff <= np.abs(ref[n].astype(np.float32)) * 2.0 ** -7 + 1e-6)
        np.testing.assert_allclose(out[n].astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_fp32_psum_accumulation_stays_within_fp32_rounding():
    lhs_t, rhs = rand(384, 128), rand(384, 512)
    ref, out, _ = _both(K.matmul_tiled, lhs_t, rhs)
    for n in ref:
        np.testing.assert_allclose(out[n], ref[n], rtol=1e-5, atol=1e-4)  # sum order


def every_other_tile(a):
    """Odd tiles are never written: the written-mask travels with the blocks."""
    out = nl.ndarray((896, 64), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        nl.store(out[i * 256:i * 256 + 128, :], nl.load(a[i * 256:i * 256 + 128, :]))
    return out


def test_blocks_with_gaps_and_a_short_last_block():
    a = rand(896, 64)
    assert _plans(every_other_tile, a)["i"] is not None
    ref, out = warns_alike(*_trace(every_other_tile, a))
    np.testing.assert_array_equal(out["out"].view(np.uint8), ref["out"].view(np.uint8))
    np.testing.assert_array_equal(out["out"][:128], a[:128])


def read_modify_write(a):
    """Each iteration reads back what it wrote to its own block of the output."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        nl.store(out[rows, :], nl.load(a[rows, :]))
        t = nl.load(out[rows, :])
        nl.store(out[rows, :], nl.multiply(t, 3.0))
    return out


def test_a_block_read_after_its_own_write():
    a = rand(512, 32)
    # race tracking stamps 'out' per iteration: that keeps the loop on the general path
    assert _plans(read_modify_write, a)["i"] is None
    ref, out, _ = _both(read_modify_write, a)
    _identical(ref, out)
    k, inputs = _trace(read_modify_write, a)
    comp = jax_exec.compiled(k)
    quiet = SimParams(detect_races=False)
    _identical(Program(k).run(inputs, quiet, backend="numpy"),
               jax_exec.run_compiled(k, inputs, quiet))
    assert "while" not in lowered_text(k, inputs, races=False)


def nested_columns(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        for j in nl.affine_range(a.shape[1] // 64):
            t = nl.load(a[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64])
            nl.store(out[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64],
                     nl.subtract(t, nl.max(t, axis=1, keepdims=True)))
    return out


def test_nested_loops_batch_both_levels():
    ref, out, text = _both(nested_columns, rand(512, 256))
    _identical(ref, out)
    assert "while" not in text


# ----------------------------------------------------------------------------- general path
def same_place_every_iteration(a):
    out = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, a.shape[1]), a.dtype)
    for i in nl.affine_range(a.shape[0] // 128):
        t[...] = nl.load(a[i * 128:(i + 1) * 128, :])
    nl.store(out, t)
    return out


def carried(a):
    out = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, a.shape[1]), nl.float32)
    for i in nl.affine_range(a.shape[0] // 128):
        acc[...] = nl.add(acc, nl.load(a[i * 128:(i + 1) * 128, :]))
    nl.store(out, acc)
    return out


def test_loops_with_a_dependence_are_not_batched():
    a = rand(512, 64)
    assert _plans(same_place_every_iteration, a)["i"] is None
    assert _plans(carried, a)["i"] is None
    k, inputs = _trace(carried, a)
    with pytest.warns(LoopCarriedDependencyWarning):
        ref = Program(k).run(inputs, backend="numpy")
    with pytest.warns(LoopCarriedDependencyWarning):
        out = jax_exec.run_compiled(k, inputs)
    np.testing.assert_array_equal(out["out"], ref["out"])
    # the last iteration wins: a write-after-write race both executors report alike
    k, inputs = _trace(same_place_every_iteration, a)
    ref, out = warns_alike(k, inputs)
    _identical(ref, out)
    np.testing.assert_array_equal(out["out"], a[384:])
    quiet = SimParams(detect_races=False)  # the general (not batched) path, compiled
    comp = jax_exec.compiled(k)
    runs = comp.runs
    _identical(Program(k).run(inputs, quiet), jax_exec.run_compiled(k, inputs, quiet))
    assert comp.runs == runs + 1


def test_sequential_loops_and_a_disabled_switch_keep_the_loop(monkeypatch):
    def seq(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.sequential_range(a.shape[0] // 128):
            nl.store(out[i * 128:(i + 1) * 128, :], nl.load(a[i * 128:(i + 1) * 128, :]))
        return out
    a = rand(512, 32)
    assert _plans(seq, a)["i"] is None
    monkeypatch.setattr(jax_lower, "VECTORISE", False)
    monkeypatch.setattr(jax_lower, "UNROLL_BUDGET", 0)
    # why: programs traced with batching on
    monkeypatch.setattr(jax_exec, "_CACHE", jax_exec.CompiledCache())
    ref, out, text = _both(rows_then_scale, rand(512, 64), rand(512, 64))
    _identical(ref, out)
    assert "while" in text


def test_uninitialised_read_inside_a_batched_loop_reports_like_the_interpreter():
    def k(a):
        out = nl.ndarray((a.shape[0], 128), nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            t = nl.ndarray((128, 128), nl.float32)
            t[:, 0:64] = nl.load(a[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], nl.transpose(t))
        return out
    a = rand(256, 64)
    assert _plans(k, a)["i"] is not None
    ref, out = warns_alike(*_trace(k, a))
    np.testing.assert_array_equal(out["out"].view(np.uint8), ref["out"].view(np.uint8))


def test_ragged_last_tile_guarded_by_its_mask_is_batched():
    a, b = rand(300, 100), rand(300, 100)
    assert _plans(K.tensor_add_ragged, a, b)["p"] is not None
    ref, out, text = _both(K.tensor_add_ragged, a, b)
    _identical(ref, out)
    np.testing.assert_array_equal(out["c_output"], a + b)
    assert "while" not in text


def isa_matmul(lhs_t, rhs):
    import nki_workbench.nki.isa as nisa
    K_, M = lhs_t.shape
    out = nl.ndarray((M, rhs.shape[1]), nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        acc = nl.zeros((128, rhs.shape[1]), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K_ // 128):
            acc += nisa.nc_matmul(nl.load(lhs_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128]),
                                  nl.load(rhs[k * 128:(k + 1) * 128, :]))
        nl.store(out[m * 128:(m + 1) * 128, :], nl.copy(acc))
    return out


def test_isa_matmul_accumulation_becomes_one_dot():
    lhs_t, rhs = rand(512, 256), rand(512, 384)
    ref, out, text = _both(isa_matmul, lhs_t, rhs)
    assert text.count("stablehlo.dot_general") == 1 and "while" not in text
    np.testing.assert_allclose(out["out"], ref["out"], rtol=1e-5, atol=1e-4)  # sum order
    np.testing.assert_allclose(out["out"], lhs_t.T @ rhs, rtol=1e-4, atol=1e-4)


def ragged_with_negated_mask(a):
    """A mask that bounds nothing for sure (a negation) keeps the ragged loop general."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for p in nl.affine_range((a.shape[0] + 127) // 128):
        i_p = p * 128 + nl.arange(128)[:, None]
        i_f = nl.arange(a.shape[1])[None, :]
        nl.store(out[i_p, i_f], nl.load(a[i_p, i_f], mask=~(i_p >= a.shape[0])),
                 mask=~(i_p >= a.shape[0]))
    return out


def test_only_a_plain_bound_in_the_mask_proves_the_ragged_tile():
    a = rand(300, 40)
    assert _plans(ragged_with_negated_mask, a)["p"] is None
    ref, out, _ = _both(ragged_with_negated_mask, a)
    _identical(ref, out)
    np.testing.assert_array_equal(out["out"], a)
