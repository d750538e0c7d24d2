"""The compiled program's results reach the caller uncopied and as the caller's own arrays.

On CPU each output of a steady compiled (or ``backend="auto"``) call is XLA's fresh result
buffer handed over writable (``sim/jax_host.py``): these tests pin that the arrays are the
interpreter's values bit for bit, that no call's outputs alias another call's or the inputs, that
they outlive the program's references, and that ``auto`` runs the compiled program from its
second call on.
"""

import gc

import ml_dtypes
import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import SimParams, nki
from nki_workbench._src import execution
from nki_workbench._src.sim.interp import Program

jax = pytest.importorskip("jax")

from nki_workbench._src.sim import jax_exec, jax_host  # noqa: E402

P = 128
COMPILED, AUTO, INTERP = (SimParams(backend=b) for b in ("jax", "auto", "numpy"))


def add_tiles(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        s = slice(i * P, (i + 1) * P)
        nl.store(out[s, :], value=nl.add(nl.load(a[s, :]), nl.load(b[s, :])))
    return out


def add_and_scale(a, b):
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        r = slice(i * P, (i + 1) * P)
        x, y = nl.load(a[r, :]), nl.load(b[r, :])
        nl.store(s[r, :], value=nl.add(x, y))
        nl.store(d[r, :], value=nl.multiply(x, 3.0))
    return s, d


def _inputs(*shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape, dtype=np.float32).astype(dtype) for _ in range(2))


def _interpreted(fn, *arrays):
    tr = nki.trace_kernel(fn, *arrays).kernel
    outs = Program(tr).run({p.name: a for p, a in zip(tr.params, arrays, strict=True)})
    return [outs[n] for n in tr.outputs]


@pytest.mark.parametrize("params", [COMPILED, AUTO], ids=["jax", "auto"])
def test_steady_outputs_are_fresh_writable_and_the_interpreters(params, monkeypatch):
    monkeypatch.setattr(execution, "_COMPILE_S_PER_INST", 1e-9)  # auto: compiles on call 2
    monkeypatch.setattr(execution, "_COMPILE_RATIOS", [])  # (its calibration stays here)
    a, b = _inputs(512, 256)
    a0, b0 = a.copy(), b.copy()
    (ref,) = _interpreted(add_tiles, a, b)
    k = nki.jit(add_tiles)
    outs = [nki.simulate_kernel(k, a, b, params=params) for _ in range(4)]
    for out in outs:
        np.testing.assert_array_equal(out, ref)
        assert out.flags.writeable and out.dtype == np.float32
        assert not np.may_share_memory(out, a) and not np.may_share_memory(out, b)
    for x, y in zip(outs, outs[1:], strict=False):
        assert not np.may_share_memory(x, y)  # no call's result is another call's
    assert any(jax_host.handed(o) for o in outs[1:])  # the steady calls' buffers, uncopied
    outs[1][...] = -1.0  # writing one result changes nothing else
    np.testing.assert_array_equal(outs[2], ref)
    np.testing.assert_array_equal(nki.simulate_kernel(k, a, b, params=params), ref)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_results_outlive_the_program_and_later_calls():
    a, b = _inputs(256, 128, seed=1)
    (ref,) = _interpreted(add_tiles, a, b)
    k = nki.jit(add_tiles)
    nki.simulate_kernel(k, a, b, params=COMPILED)
    kept = nki.simulate_kernel(k, a, b, params=COMPILED)
    assert jax_host.handed(kept)
    gc.collect()
    for _ in range(3):  # freed buffers are reused by later results, never a held one
        other = nki.simulate_kernel(k, b, a, params=COMPILED)
        other[...] = 7.0
    np.testing.assert_array_equal(kept, ref)


def test_two_outputs_and_bf16_are_handed_over_with_their_dtype():
    a, b = _inputs(256, 128, dtype=ml_dtypes.bfloat16, seed=2)
    refs = _interpreted(add_and_scale, a, b)
    k = nki.jit(add_and_scale)
    nki.simulate_kernel(k, a, b, params=COMPILED)
    s, d = nki.simulate_kernel(k, a, b, params=COMPILED)
    for got, ref in zip((s, d), refs, strict=True):
        assert got.dtype == ml_dtypes.bfloat16 and got.flags.writeable
        np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))
    assert not np.may_share_memory(s, d)


def test_auto_runs_the_compiled_program_once_compiling_pays(monkeypatch):
    monkeypatch.setattr(execution, "_COMPILE_S_PER_INST", 1e-9)  # so: from the second call
    monkeypatch.setattr(execution, "_COMPILE_RATIOS", [])
    a, b = _inputs(256, 128, seed=3)
    k = nki.jit(add_tiles)
    first = nki.simulate_kernel(k, a, b, params=AUTO)  # a cheap kernel: interpreted first
    comp = jax_exec.compiled(nki.trace_kernel(add_tiles, a, b).kernel)
    runs = comp.runs
    for n in range(1, 4):
        out = nki.simulate_kernel(k, a, b, params=AUTO)
        assert comp.runs == runs + n
        np.testing.assert_array_equal(out, first)


def test_a_result_overlapping_an_argument_or_another_result_stays_read_only():
    x = jax.numpy.arange(4096, dtype=jax.numpy.float32)
    view = np.asarray(x)
    got = jax_host.host_results([x], [view])  # as if XLA had returned an input's buffer
    assert not got[0].flags.writeable and not jax_host.handed(got[0])
    first, again = jax_host.host_results([x, x], [])
    assert jax_host.handed(first) and not again.flags.writeable
    # the run path copies what it cannot hand over
    out = execution._handed_out(again, set())
    assert out.flags.writeable and not np.may_share_memory(out, again)
    np.testing.assert_array_equal(out, np.arange(4096, dtype=np.float32))


def test_a_steady_call_binds_its_arguments_once(monkeypatch):
    from nki_workbench._src import runtime
    a, b = _inputs(256, 128, seed=4)
    (ref,) = _interpreted(add_tiles, a, b)
    k = nki.jit(add_tiles)
    nki.simulate_kernel(k, a, b, params=COMPILED)
    calls = []
    real = runtime.flatten_args

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(runtime, "flatten_args", counting)
    np.testing.assert_array_equal(nki.simulate_kernel(k, a, b=b, params=COMPILED), ref)
    assert len(calls) == 1  # the trace-cache key and the inputs share one binding
    swapped = nki.simulate_kernel(k, b, a, params=COMPILED)  # new leaves are bound, not stale
    np.testing.assert_array_equal(swapped, _interpreted(add_tiles, b, a)[0])
    assert len(calls) == 2


def test_an_input_refilled_in_place_with_subnormals_still_runs_in_the_interpreter(monkeypatch):
    a, b = (np.ones((256, 128), np.float32) for _ in range(2))
    k = nki.jit(add_tiles)
    for _ in range(2):
        nki.simulate_kernel(k, a, b, params=COMPILED)
    a[0, 0] = b[0, 0] = np.float32(1e-39)  # same arrays: the repeat path
    calls = []
    real = jax_exec._Compiled.call
    monkeypatch.setattr(jax_exec._Compiled, "call",
                        lambda self, *args: calls.append(1) or real(self, *args))
    out = nki.simulate_kernel(k, a, b, params=COMPILED)
    assert out[0, 0] == _interpreted(add_tiles, a, b)[0][0, 0] != 0
    assert not calls  # the hit the repeat path found does not run the program a second time


def test_new_arrays_with_subnormals_for_a_compiled_program_still_run_in_the_interpreter():
    """The scan of a warm program's inputs runs after the program starts: a hit drops its
    result and the interpreter's bits come back, as when the scan ran first."""
    k = nki.jit(add_tiles)
    for _ in range(2):  # new arrays each call: the full path, the program compiled
        nki.simulate_kernel(k, *(np.ones((256, 128), np.float32) for _ in range(2)),
                            params=COMPILED)
    for sign in (1, -1):
        a, b = (np.ones((256, 128), np.float32) for _ in range(2))
        a[255, 127] = b[255, 127] = sign * np.float32(1e-39)
        out = nki.simulate_kernel(k, a, b, params=COMPILED)
        assert out[255, 127] == np.float32(sign * 2e-39) != 0
        np.testing.assert_array_equal(out, _interpreted(add_tiles, a, b)[0])


def test_a_changed_default_argument_is_seen_by_the_next_call():
    def scaled(a, k=2.0):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(a), k))
        return out
    a = _inputs(128, 64, seed=5)[0]
    kern = nki.jit(scaled)
    np.testing.assert_array_equal(nki.simulate_kernel(kern, a, params=COMPILED), a * 2.0)
    scaled.__defaults__ = (3.0,)  # the cached signature must not keep the old default
    np.testing.assert_array_equal(nki.simulate_kernel(kern, a, params=COMPILED), a * 3.0)
