"""Python control flow on loop variables, as NKI gives it a meaning (docs/control_flow.md), and
the ``nki.jit(mode="trace")`` helper kernels that the attention kernels are built from.

A condition of loop variables is evaluated at trace time: decided outright when it has one value
over all iterations, otherwise the loops it names are split into parts (test_loop_split.py), so
each iteration runs its own branch. Conditions on ``nl.arange`` indices keep NKI's error.
"""

import numpy as np
import pytest

from nki_workbench import nki
from nki_workbench._src.errors import NkiError
from nki_workbench._src.ir import Loop
from nki_workbench._src.trace.kernel import Traced
from nki_workbench.nki import isa as nisa
from nki_workbench.nki import language as nl


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@nki.jit(mode="trace")
def scaled_copy(dst, src, scale):
    """A trace-mode helper: inlined wherever a kernel calls it."""
    dst[...] = nl.multiply(src, scale)


@nki.jit
def lower_blocks(a, causal=True):
    """Block (i, j) of a [4*128, 4*128] matrix: copied when on/below the diagonal, else 0;
    the condition mixes a loop predicate with a Python flag (``(i < n) & flag``)."""
    n = a.shape[0] // 128
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        for j in nl.affine_range(n):
            t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
            if (i < n) & (i >= j) & causal:
                scaled_copy(t, nl.load(a[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]), 2.0)
            else:
                t[...] = nl.zeros((128, 128), dtype=a.dtype)
            nl.store(out[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128], value=t)
    return out


def lower_blocks_ref(a, causal=True):
    out = np.zeros_like(a)
    for i in range(4):
        for j in range(4):
            if i >= j and causal:
                out[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = \
                    2 * a[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_if_else_on_loop_predicates_runs_each_iterations_branch(causal):
    a = rand(512, 512)
    np.testing.assert_allclose(nki.simulate_kernel(lower_blocks, a, causal=causal),
                               lower_blocks_ref(a, causal), rtol=1e-6, atol=1e-6)


@nki.jit
def affine_condition(a):
    """``if 128*i + 127 >= 256*k:`` (the backward kernel's form) with an accumulation."""
    out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(4):
        for k in nl.affine_range(2):
            if 128 * i + 127 >= 256 * k:
                acc[:, k * 128:(k + 1) * 128] = nl.add(acc[:, k * 128:(k + 1) * 128],
                                                       nl.load(a[i, :, k * 128:(k + 1) * 128]))
    nl.store(out, value=acc)
    return out


def test_affine_condition_inside_loops_matches_numpy():
    a = rand(4, 128, 256)
    ref = np.zeros((128, 256), np.float32)
    for i in range(4):
        for k in range(2):
            if 128 * i + 127 >= 256 * k:
                ref[:, k * 128:(k + 1) * 128] += a[i, :, k * 128:(k + 1) * 128]
    np.testing.assert_allclose(nki.simulate_kernel(affine_condition, a), ref, rtol=1e-5,
                               atol=1e-5)


@nki.jit
def always_true(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        if i * 128 < a.shape[0]:
            nl.store(out[i * 128:(i + 1) * 128], value=nl.load(a[i * 128:(i + 1) * 128]))
    return out


def test_a_condition_true_in_every_iteration_keeps_the_loop():
    a = rand(512, 64)
    np.testing.assert_array_equal(nki.simulate_kernel(always_true, a), a)
    ir = nki.trace_kernel(always_true, a).kernel
    assert any(isinstance(s, Loop) for s in ir.body)


def test_condition_on_arange_keeps_nki_error():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        if ip < 64:
            nl.store(out, value=nl.load(a))
        return out
    with pytest.raises(NkiError) as e:
        nki.simulate_kernel(k, rand(128, 4))
    assert e.value.code == "err_control_flow_condition_depending_on_arange"
    assert "test_control_flow.py" in str(e.value)


def test_condition_on_program_id_that_varies_keeps_nki_error():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        if nl.program_id(0) == 0:
            nl.store(out, value=nl.load(a))
        return out
    with pytest.raises(NkiError) as e:
        nki.simulate_kernel(k[2], rand(128, 4))
    assert e.value.code == "err_dynamic_control_flow_not_supported"


def test_mask_false_turns_the_instruction_off():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        u = nl.full(a.shape, 3.0, dtype=a.dtype)
        u[...] = nl.multiply(t, 2.0, mask=False)
        nl.store(out, value=u)
        return out
    np.testing.assert_array_equal(nki.simulate_kernel(k, rand(128, 8)), np.full((128, 8), 3.0))


def test_integer_index_of_a_tile_keeps_a_unit_free_dimension():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        col = t[:, 2]
        assert tuple(col.shape) == (128, 1)
        nl.store(out, value=col[:, 0])
        return out
    a = rand(128, 8)
    np.testing.assert_array_equal(nki.simulate_kernel(k, a), a[:, 2:3])


def test_tensor_engine_transpose_feeds_nc_matmul():
    @nki.jit
    def k(x, y):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        xt = nisa.nc_transpose(nl.load(x))             # PSUM, [128, 128]
        nl.store(out, value=nl.copy(nisa.nc_matmul(xt, nl.load(y))))
        return out
    x, y = rand(128, 128), rand(128, 64, seed=1)
    np.testing.assert_allclose(nki.simulate_kernel(k, x, y), x @ y, rtol=1e-4, atol=1e-3)


def test_trace_mode_kernel_alone_returns_its_trace_and_simulates():
    @nki.jit(mode="trace", kernel_return=True, experimental_flags="enable-mutable-parameter")
    def double(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(a), 2.0))
        return out
    a = rand(128, 16)
    traced = double(a)
    assert isinstance(traced, Traced) and traced.kernel.name == "double"
    np.testing.assert_allclose(nki.simulate_kernel(double, a), 2 * a, rtol=1e-6)
    assert double.__test__ is False


def test_loop_reduce_into_a_column_of_a_tile():
    """``acc[:, j] = nl.loop_reduce(row, ...)``: a [P] result into a [P, 1] column (the
    backward kernel's sink gradient)."""
    @nki.jit
    def k(a):
        nk, p, f = a.shape
        out = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((p, f), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(f):
            for kk in nl.affine_range(nk):
                row = nisa.tensor_reduce(np.add, data=nl.load(a[kk, :, j:j + 1]), axis=(1,),
                                         dtype=nl.float32)
                acc[:, j] = nl.loop_reduce(row, op=np.add, loop_indices=(kk,),
                                           dtype=nl.float32)
        nl.store(out, value=acc)
        return out
    a = rand(3, 128, 4)
    np.testing.assert_allclose(nki.simulate_kernel(k, a), a.sum(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("extra", [False, True])
def test_shared_hbm_output_declared_under_a_python_if(extra):
    """A Python ``if`` on a kernel argument runs at trace time and emits no branch, so a
    ``shared_hbm`` output may be declared under it (nki-samples' flash_attn_bwd declares its
    optional sink-gradient output under ``if sinks is not None:``)."""
    @nki.jit
    def k(a, extra):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        if extra:
            out2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out2, value=nl.multiply(nl.load(a), 3.0))
        nl.store(out, value=nl.multiply(nl.load(a), 2.0))
        if extra:
            return out, out2
        return out
    a = rand(128, 32)
    res = nki.simulate_kernel(k, a, extra)
    if extra:
        np.testing.assert_allclose(res[0], 2 * a, rtol=1e-6)
        np.testing.assert_allclose(res[1], 3 * a, rtol=1e-6)
    else:
        np.testing.assert_allclose(res, 2 * a, rtol=1e-6)


@nki.jit
def python_ints_of_loop_vars(a, scales):
    """``int(i)``, ``float(j)`` and a Python tuple indexed by a loop variable."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        for j in nl.affine_range(a.shape[1] // 128):
            r, c = int(i) * 128, int(j) * 128
            t = nl.load(a[r:r + 128, c:c + 128])
            nl.store(out[r:r + 128, c:c + 128], value=nl.multiply(t, scales[i] + float(j)))
    return out


def test_python_int_of_a_loop_variable_is_that_iterations_value():
    a = rand(256, 384)
    scales = (0.5, -2.0)
    ref = a.copy()
    for i in range(2):
        for j in range(3):
            ref[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] *= scales[i] + j
    got = nki.simulate_kernel(python_ints_of_loop_vars, a, scales)
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_python_int_of_an_arange_index_keeps_nki_error():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        nl.store(out[int(i_p), :], value=nl.load(a))
        return out

    with pytest.raises(NkiError, match="err_dynamic_control_flow_not_supported"):
        nki.simulate_kernel(k, rand(128, 64))
