"""``nisa.dma_copy`` in the compiled backend (``sim/jax_dma.py``) against the interpreter.

The static form (indices known at trace time, no mask, no ``dst_rmw_op``) compiles and must be
bit-identical to the interpreter; indirect gathers and scatter-adds hand the kernel to the
interpreter with a reason (``jax_static.why_interpreted``).
"""

import warnings

import kernels_current as KC
import ml_dtypes
import numpy as np
import pytest
from backends import err_in_ulps as _err_in_ulps
from backends import trace_inputs
from backends import ulps as _ulps
from test_isa_copy import _gather_kernel, k_dma, k_scatter_add

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import CompiledFallbackWarning, nki
from nki_workbench._src.sim import jax_exec, jax_static
from nki_workbench._src.sim.interp import Program
from nki_workbench.nki.isa import oob_mode

pytest.importorskip("jax")

RNG = np.random.default_rng(5)
BF16 = ml_dtypes.bfloat16


def _run_both(kernel, args, compiled=True, ulps=0):
    """Both executors' outputs agree: bit-identical, or within ``ulps`` of the largest output
    (XLA's dot against BLAS, docs/semantics.md)."""
    k, inputs = trace_inputs(kernel, *args)
    ref = Program(k).run(inputs, backend="numpy")
    comp = jax_exec.compiled(k)
    runs = comp.runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompiledFallbackWarning)
        out = jax_exec.run_compiled(k, inputs)
    assert (comp.runs == runs + 1) == compiled, "ran interpreted" if compiled else "ran compiled"
    assert ref.keys() == out.keys()
    for n in ref:
        assert out[n].dtype == ref[n].dtype and out[n].shape == ref[n].shape, n
        if ulps:
            assert _err_in_ulps(out[n], ref[n]) <= ulps, (n, _err_in_ulps(out[n], ref[n]))
        else:
            assert _ulps(out[n], ref[n]) == 0, (n, _ulps(out[n], ref[n]))
    return k, ref


# softmax uses activation reduce_res (ScalarE registers): interpreter-only whatever the DMA
@pytest.mark.parametrize("name", ["add", "matmul", "causal", "transpose"])
def test_todays_nki_kernels_compile(name):
    _, _, current, args, reference, _ = next(p for p in KC.PAIRS if p[0] == name)
    # why: the k loop of a matmul contracts into one dot (summation order: docs/semantics.md)
    _, ref = _run_both(current, args, ulps=64 if name == "matmul" else 0)
    np.testing.assert_allclose(next(iter(ref.values())), reference(*args), rtol=2e-2, atol=2e-2)


def test_doc_example_reshapes_like_the_interpreter():
    a = RNG.random((256, 1)).astype(np.float32)
    _, ref = _run_both(k_dma, (a,))
    np.testing.assert_array_equal(next(iter(ref.values())), a)


@nki.jit(mode="simulation")
def k_cast_rows(a):
    out = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, a.shape[1]), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[128:256, :])  # fp32 -> bf16 on the way in
    u = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=t)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_casting_copies_round_as_the_interpreter():
    a = (RNG.standard_normal((256, 64)) * 3).astype(np.float32)
    _, ref = _run_both(k_cast_rows, (a,))
    np.testing.assert_array_equal(next(iter(ref.values())),
                                  a[128:].astype(BF16).astype(np.float32))


def test_indirect_gather_and_scatter_add_stay_interpreted():
    a = RNG.random((128, 64)).astype(np.float32)
    idx = np.array([[3], [0], [127], [40]], dtype=np.int32)
    k, _ = _run_both(_gather_kernel(oob_mode.error), (a, idx), compiled=False)
    assert "run-time (indirect) indices" in jax_static.why_interpreted(k, jax_exec.SimParams())
    acc = RNG.random((8, 16)).astype(np.float32)
    src = RNG.random((4, 16)).astype(np.float32)
    ids = np.array([[1], [1], [7], [0]], dtype=np.int32)
    k, ref = _run_both(k_scatter_add, (acc, src, ids), compiled=False)
    assert "dst_rmw_op" in jax_static.why_interpreted(k, jax_exec.SimParams())
