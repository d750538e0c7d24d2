"""The compiled backend's fast paths keep the interpreter's results and diagnostics.

Covered here: the static proof that an output is written whole (no written-mask in the
program), the assembly of such an output from its blocks with one concatenate, the zero-copy
adoption of host inputs (aligned windows), and loops kept rolled inside rolled loops.
"""


import kernels_public as K
import numpy as np
import pytest
from backends import lowered_text as _hlo
from backends import run_both, warns_alike
from backends import trace_inputs as _trace

import nki_workbench.nki.language as nl
from nki_workbench._src.sim import jax_exec, jax_lower
from nki_workbench._src.sim.interp import Program

pytest.importorskip("jax")
import jax  # noqa: E402

from nki_workbench._src.sim import jax_static  # noqa: E402
from nki_workbench._src.sim.jax_static import fully_written_outputs  # noqa: E402

RNG = np.random.default_rng(11)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


def _same(kernel, *args):
    """Run both backends without warnings; assert bit-identical outputs; return the IR."""
    k, inputs, ref, out = run_both(kernel, *args)
    for n in ref:
        assert out[n].dtype == ref[n].dtype
        np.testing.assert_array_equal(out[n].view(np.uint8), ref[n].view(np.uint8))
    return k, inputs


def row_tiles(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        nl.store(out[rows, :], nl.add(nl.load(a[rows, :]), nl.load(b[rows, :])))
    return out


def half_written(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], nl.load(a[0:128, :]))
    return out


def read_back(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    t = nl.load(out)
    nl.store(out, nl.multiply(t, 2.0))
    return out


def overwritten(a, b):
    out = nl.ndarray((256, 64), a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], nl.load(a[0:128, :]))
    nl.store(out[0:128, :], nl.load(b[0:128, :]))
    nl.store(out[128:256, :], nl.load(a[128:256, :]))
    return out


def column_tiles(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(a.shape[1] // 32):
        cols = slice(j * 32, (j + 1) * 32)
        nl.store(out[:, cols], nl.multiply(nl.load(a[:, cols]), 3.0))
    return out


def test_coverage_proof_accepts_exact_tilings_and_rejects_the_rest():
    a, b = rand(512, 64), rand(512, 64)
    assert fully_written_outputs(_trace(row_tiles, a, b)[0]) == {"out"}
    assert fully_written_outputs(_trace(K.tensor_add_spmd[2, 3], rand(256, 1536),
                                        rand(256, 1536))[0]) == {"c_output"}
    assert fully_written_outputs(_trace(half_written, a)[0]) == frozenset()
    assert fully_written_outputs(_trace(read_back, rand(128, 64))[0]) == frozenset()
    ragged = _trace(K.tensor_add_ragged, rand(300, 100), rand(300, 100))[0]
    assert fully_written_outputs(ragged) == frozenset()  # masked stores


def test_row_tiled_output_is_one_concatenate_without_written_mask():
    k, inputs = _same(row_tiles, rand(512, 64), rand(512, 64))
    text = _hlo(k, inputs)
    assert "concatenate" in text
    assert "dynamic_update_slice" not in text and "tensor<512x64xi1>" not in text


def test_column_tiles_and_overwrites_match_the_interpreter():
    k, inputs = _same(column_tiles, rand(128, 128))
    assert "concatenate" in _hlo(k, inputs)
    a, b = rand(256, 64), rand(256, 64)
    k, _ = _same(overwritten, a, b)
    out = jax_exec.run_compiled(k, {"a": a, "b": b})["out"]
    np.testing.assert_array_equal(out, np.concatenate([b[:128], a[128:]]))


def test_partially_written_output_still_warns_like_the_interpreter():
    a = rand(256, 64)
    ref, out = warns_alike(*_trace(half_written, a))
    np.testing.assert_array_equal(out["out"], ref["out"])


def test_tainted_value_into_a_proven_output_reports_like_the_interpreter():
    def k(a):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), nl.float32)
        t[:, 0:32] = nl.load(a[:, 0:32])
        nl.store(out, nl.add(t, 1.0))
        return out

    k_ir, inputs = _trace(k, rand(128, 64))
    assert fully_written_outputs(k_ir) == {"out"}
    ref, out = warns_alike(k_ir, inputs)  # the interpreter reports the unwritten elements
    np.testing.assert_array_equal(out["out"], ref["out"])
    assert np.isnan(out["out"][:, 32:]).all()
    np.testing.assert_array_equal(out["out"][:, :32], inputs["a"][:, :32] + 1.0)


def test_blocks_before_a_rolled_loop_are_kept(monkeypatch):
    monkeypatch.setattr(jax_lower, "UNROLL_BUDGET", 0)
    monkeypatch.setattr(jax_lower, "VECTORISE", False)
    # why: programs traced under other budgets
    monkeypatch.setattr(jax_exec, "_CACHE", jax_exec.CompiledCache())

    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out[0:128, :], nl.negative(nl.load(a[0:128, :])))
        for i in nl.affine_range(1, a.shape[0] // 128):
            rows = slice(i * 128, (i + 1) * 128)
            nl.store(out[rows, :], nl.load(a[rows, :]))
        return out

    a = rand(512, 32)
    k_ir, inputs = _same(k, a)
    assert "while" in _hlo(k_ir, inputs)
    np.testing.assert_array_equal(jax_exec.run_compiled(k_ir, inputs)["out"],
                                  np.concatenate([-a[:128], a[128:]]))


def _at_offset(x, lead):
    """A copy of ``x`` whose data starts ``lead`` bytes past a 64-byte boundary."""
    buf = np.empty(x.nbytes + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + lead
    y = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    y[...] = x
    return y


@pytest.mark.parametrize("lead", [0, 16, 48])
def test_inputs_are_adopted_without_a_copy(lead):
    x = _at_offset(rand(256, 128), lead)
    win, off = jax_static.window(x)
    assert (off is None) == (lead == 0)
    assert win.ctypes.data % jax_static.ZERO_COPY_ALIGN == 0
    assert win is x if lead == 0 else not win.flags.writeable
    dev = jax.device_put(win)
    if jax.devices()[0].platform == "cpu":
        assert dev.unsafe_buffer_pointer() == x.ctypes.data - lead
    flat = np.asarray(dev).reshape(-1)
    np.testing.assert_array_equal(flat[off or 0:(off or 0) + x.size].reshape(x.shape), x)
    y = _at_offset(rand(256, 128), 32)
    _same(row_tiles, np.ascontiguousarray(np.concatenate([x, x])), np.concatenate([y, y]))


def test_unadoptable_inputs_are_copied_and_still_exact():
    x = rand(512, 128)
    odd = _at_offset(x, 2)  # not a whole number of elements past the boundary
    assert jax_static.window(odd)[1] is None
    strided = rand(512, 128)[:, ::2]
    assert jax_static.window(strided)[1] is None
    _same(row_tiles, odd[:, :64].copy(), strided)
    _same(row_tiles, strided, np.asarray(odd[:, :64]))


def test_loops_inside_a_rolled_loop_stay_rolled(monkeypatch):
    """Unrolled static tiles inside a ``fori_loop`` become hoisted loop state (copies)."""
    monkeypatch.setattr(jax_lower, "UNROLL_BUDGET", 8)
    monkeypatch.setattr(jax_lower, "VECTORISE", False)
    # why: programs traced under other budgets
    monkeypatch.setattr(jax_exec, "_CACHE", jax_exec.CompiledCache())
    args = (rand(256, 256).astype(np.float32), rand(256, 1024).astype(np.float32))
    k, inputs = _trace(K.matmul_tiled, *args)
    text = _hlo(k, inputs)
    assert text.count("stablehlo.dot_general") == 1 and text.count("stablehlo.while") >= 2
    ref = Program(k).run(inputs, backend="numpy")
    out = jax_exec.run_compiled(k, inputs)
    for n in ref:
        np.testing.assert_allclose(out[n], ref[n], rtol=1e-5, atol=1e-4)


def test_windows_are_reused_for_the_same_array_and_forgotten_with_it():
    x = _at_offset(rand(256, 128), 16)
    win, off = jax_static.window(x)
    again, off2 = jax_static.window(x)
    assert again is win and off2 == off == 4
    key = id(x)
    assert key in jax_static._WINDOWS
    y = x.copy()  # another array: its own window
    assert jax_static.window(y)[0] is not win or y.ctypes.data % 64 == 0
    del x, win, again
    assert key not in jax_static._WINDOWS  # the cache keeps no array alive


def test_threads_tracing_one_kernel_at_once_get_the_same_results():
    """``simulate_ranks`` calls one compiled kernel from several threads at once."""
    import threading

    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), 2.0))
        return out
    k_ir, inputs = _trace(k, rand(128, 64))
    jax_exec._CACHE.pop(k_ir, None)
    results, errors = [], []

    def run():
        try:
            results.append(jax_exec.run_compiled(k_ir, inputs)["out"])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4
    for r in results:
        np.testing.assert_array_equal(r, inputs["a"] * 2.0)


def test_a_program_without_checks_skips_its_flag_and_one_with_checks_reads_it():
    k, inputs = _same(row_tiles, rand(512, 64), rand(512, 64))
    comp = jax_exec.compiled(k)
    args, offsets, _ = comp.args(jax_static.checked_inputs(k, inputs))
    assert id(comp.fn(False, True, offsets)) in comp.clean
    ragged = (rand(300, 100), rand(300, 100))
    k2, inputs2 = _same(K.tensor_add_ragged, *ragged)
    comp2 = jax_exec.compiled(k2)
    args2, offsets2, _ = comp2.args(jax_static.checked_inputs(k2, inputs2))
    assert id(comp2.fn(False, True, offsets2)) not in comp2.clean  # the written-mask check


def test_a_repeat_call_on_the_same_arrays_sees_their_new_contents_and_keeps_none_alive():
    import gc
    import weakref

    k, inputs = _trace(row_tiles, _at_offset(rand(512, 64), 16), rand(512, 64))
    comp = jax_exec.compiled(k)
    first = jax_exec.run_compiled(k, inputs)["out"].copy()
    assert comp.repeat(inputs, jax_exec._DEFAULT_PARAMS) is not None
    inputs["a"][...] *= 2.0  # in place: the next call must read the new values
    again = jax_exec.run_compiled(k, inputs)["out"]
    np.testing.assert_array_equal(again, inputs["a"] + inputs["b"])
    assert not np.array_equal(again, first)
    other = {"a": inputs["a"].copy(), "b": inputs["b"]}  # another array: the general path
    assert comp.repeat(other, jax_exec._DEFAULT_PARAMS) is None
    np.testing.assert_array_equal(jax_exec.run_compiled(k, other)["out"], again)
    as_f64 = {"a": inputs["a"].astype(np.float64), "b": inputs["b"]}  # converted every call
    np.testing.assert_array_equal(jax_exec.run_compiled(k, as_f64)["out"], again)
    assert comp.last is None
    jax_exec.run_compiled(k, other)
    ref = weakref.ref(other["a"])
    del other
    gc.collect()
    assert ref() is None  # nothing of the caller's data is kept for the next call


def nested_one_trip_loops(a):
    """One-trip loops nested in a rolled loop (the shape the tracer's unrolled conditions and
    the flash-attention kernels' ``affine_range(d_head_n_tiles)`` leave behind)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        for j in nl.affine_range(1):
            for k in nl.affine_range(1):
                for m in nl.affine_range(1):
                    t = nl.load(a[i * 128:(i + 1) * 128, j * 64:(j + 1) * 64])
                    nl.store(out[i * 128:(i + 1) * 128, k * 64:(k + 1) * 64 + m * 0],
                             value=nl.exp(t))
    return out


def test_one_trip_loops_are_inlined_and_each_instruction_is_traced_once(monkeypatch):
    """Before: a ``fori_loop`` per one-trip loop, each traced again by an ``eval_shape``
    (2^depth traces of the innermost body; the nki-samples flash backward took 171 s)."""
    monkeypatch.setattr(jax_lower, "UNROLL_BUDGET", 4)
    monkeypatch.setattr(jax_lower, "VECTORISE", False)
    monkeypatch.setattr(jax_exec, "_CACHE", jax_exec.CompiledCache())
    traced = []
    real = jax_lower.Lower.inst

    def counting(self, s, *rest):
        traced.append(id(s))
        return real(self, s, *rest)

    monkeypatch.setattr(jax_lower.Lower, "inst", counting)
    a = rand(512, 64)
    k, inputs = _trace(nested_one_trip_loops, a)
    text = _hlo(k, inputs)
    assert text.count("stablehlo.while") == 1  # only the 4-trip loop
    assert traced and max(traced.count(t) for t in set(traced)) == 1
    k, inputs, ref, out = run_both(nested_one_trip_loops, a)
    for n in ref:  # exp: XLA's and numpy's differ in the last ulp (docs/semantics.md)
        np.testing.assert_allclose(out[n], ref[n], rtol=1e-6)
        np.testing.assert_allclose(out[n], np.exp(a), rtol=1e-6)


def _scaled(k):
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(a), k))
        return out
    return kernel


def test_the_compiled_cache_drops_the_least_recently_used_beyond_its_bounds(monkeypatch):
    # why: every cached executable keeps its memory; unbounded, a process running many
    # specialisations grows without limit (the nki-samples flash bwd file reached 24 GB)
    cache = jax_exec.CompiledCache(size=2, weight=10**6)
    monkeypatch.setattr(jax_exec, "_CACHE", cache)
    a = rand(128, 64)
    irs = []
    for k in (2.0, 3.0, 4.0):
        ir, inputs = _trace(_scaled(k), a)
        np.testing.assert_array_equal(jax_exec.run_compiled(ir, inputs)["out"], a * k)
        irs.append(ir)
    assert len(cache) == 2 and cache.get(irs[0]) is None and cache.get(irs[2]) is not None
    again = jax_exec.compiled(irs[1])  # refreshed: now the newest
    assert jax_exec.compiled(irs[1]) is again and cache.get(irs[1]) is again
    twin, inputs = _trace(_scaled(3.0), a)  # an equal IR, another object: one entry
    assert twin is not irs[1] and jax_exec.compiled(twin) is again
    ir0, inputs = _trace(_scaled(2.0), a)  # dropped kernels compile again, same results
    np.testing.assert_array_equal(jax_exec.run_compiled(ir0, inputs)["out"], a * 2.0)
    assert cache.get(irs[2]) is None and len(cache) == 2  # the least recently used went


def test_the_compiled_cache_weighs_kernels_by_their_lowered_size(monkeypatch):
    a = rand(128, 64)
    ir2, _ = _trace(_scaled(2.0), a)
    w = jax_lower.lowered_size(ir2)
    assert w >= 2  # a load, a multiply, a store
    cache = jax_exec.CompiledCache(size=100, weight=2 * w)
    monkeypatch.setattr(jax_exec, "_CACHE", cache)
    irs = [_trace(_scaled(k), a)[0] for k in (2.0, 3.0, 4.0)]
    entries = [jax_exec.compiled(ir) for ir in irs]
    assert len(cache) == 2 and cache.get(irs[0]) is None
    assert cache.pop(irs[1]) is entries[1] and len(cache) == 1
    heavy = jax_exec.CompiledCache(size=100, weight=w - 1)  # heavier than the bound: kept alone
    monkeypatch.setattr(jax_exec, "_CACHE", heavy)
    assert jax_exec.compiled(irs[0]) is jax_exec.compiled(irs[0]) and len(heavy) == 1
    jax_exec.compiled(irs[1])
    assert len(heavy) == 1 and heavy.get(irs[1]) is not None
    heavy.clear()
    assert len(heavy) == 0 and heavy.get(irs[1]) is None
