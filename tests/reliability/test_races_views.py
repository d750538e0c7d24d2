"""Races through views and multi-destination instructions.

A write through ``t.reshape(...)``, ``t.view(dtype)`` (same or another width), an ``.ap()``
access pattern (today's API) or a second destination (``reduce_res``) is checked on the tensor
it aliases, on both executors; ``shuffle_affine`` shows each race changes results, and a view
written at separate elements per iteration stays quiet (and compiled; separate halves of each
float32 through a bfloat16 view stay quiet too)."""

import re
import warnings

import numpy as np
import pytest

import nki_workbench.current.isa as cisa
import nki_workbench.current.language as cnl
import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import (
    CompiledFallbackWarning,
    LoopCarriedDependencyWarning,
    NkiError,
    SimParams,
    SpmdRaceWarning,
    UninitializedReadWarning,
    current,
    nki,
)
from nki_workbench._src.sim import jax_exec
from nki_workbench._src.sim.jax_static import why_interpreted
from nki_workbench._src.sim.races import view_writes

EXECUTORS = ("numpy", "jax")
A = np.random.default_rng(11).uniform(-1, 1, (192, 64)).astype(np.float32)


def reshaped_hbm_overlap(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    v = out.reshape((64, 128))
    for i in nl.affine_range(2):
        t = nl.load(a.reshape((96, 128))[i * 48:i * 48 + 48, :])
        nl.store(v[i * 16:i * 16 + 48, :], t)  # view rows 16..47 written by both iterations
    return out


def reshaped_spmd(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    v = out.reshape((64, 128))
    pid = nl.program_id(0)
    nl.store(v, nl.load(a.reshape((96, 128))[pid * 32:pid * 32 + 64, :]))  # all of out, twice
    return out


def reshaped_outer_tile(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    last = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    lv = last.reshape((128, 2, 32))
    for i in nl.affine_range(4):
        lv[:, 0, :] = nl.load(a[0:128, nl.ds(i * 8, 32)])  # every iteration: the same half
        lv[:, 1, :] = nl.load(a[0:128, nl.ds(32, 32)])
    nl.store(out, last)
    return out


def second_destination(a):
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
    rv = red.reshape((128, 1))
    for i in nl.affine_range(4):
        t = nl.load(a[0:128, nl.ds(i * 16, 16)])
        nisa.activation_reduce(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=rv)
    nl.store(out, red)
    return out


@current.jit
def ap_spmd(a):
    out = cnl.ndarray((128, 64), cnl.float32, buffer=cnl.shared_hbm)
    pid = cnl.program_id(0)
    t = cnl.ndarray((128, 64), cnl.float32, buffer=cnl.sbuf)
    cisa.dma_copy(dst=t, src=a[pid * 64:pid * 64 + 128, :])
    cisa.dma_copy(dst=out.ap([[64, 128], [1, 64]], offset=0), src=t)  # both: all of out
    return out


def read_through_a_view(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    av = acc.reshape((128, 2, 32))
    acc[...] = nl.load(a[0:128, :])
    for i in nl.affine_range(2):
        prev = nl.copy(av[:, 0, :])  # reads what the other iteration may have written
        acc[:, 0:32] = nl.add(prev, nl.load(a[0:128, nl.ds(i * 32, 32)]))
    nl.store(out, acc)
    return out


def bitcast_narrow_overlap(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    v = out.view(nl.bfloat16)  # (128, 128): two bf16 per float32
    src = a.view(nl.bfloat16)
    for i in nl.affine_range(2):
        t = nl.load(src[i * 64:i * 64 + 128, 0:96])
        nl.store(v[:, i * 32:i * 32 + 96], t)  # view columns 32..95 written by both iterations
    return out


def bitcast_wide_overlap(a):
    out = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
    w = t.view(nl.float32)  # (128, 64): one float32 per two bf16
    for i in nl.affine_range(2):
        w[:, i * 16:i * 16 + 48] = nl.load(a[i * 64:i * 64 + 128, 0:48])  # 16..47 by both
    nl.store(out, t)
    return out


def read_through_a_bitcast(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    av = acc.view(nl.bfloat16)
    acc[...] = nl.load(a[0:128, :])
    for i in nl.affine_range(2):
        prev = nl.copy(av[:, 0:64])  # reads what the other iteration may have written
        av[:, 0:64] = nl.add(prev, nl.load(a.view(nl.bfloat16)[0:128, nl.ds(i * 64, 64)]))
    nl.store(out, acc)
    return out


CASES = {
    "read_through_a_bitcast": (read_through_a_bitcast, None, LoopCarriedDependencyWarning,
                               r"'acc' \(through view 'av'\) is written in one nl.affine_range "
                               r"iteration and read in another \(loop 'i': written by i=0 at "
                               r"\S+:(\d+), read by i=1\)", "av[:, 0:64] = nl.add"),
    "bitcast_narrow_overlap": (bitcast_narrow_overlap, None, LoopCarriedDependencyWarning,
                               r"'out' \(through view 'v'\) is written at the same elements by "
                               r"iterations i=0 \(at \S+:(\d+)\) and i=1",
                               "nl.store(v[:, i * 32"),
    "bitcast_wide_overlap": (bitcast_wide_overlap, None, LoopCarriedDependencyWarning,
                             r"'t' \(through view 'w'\) is written at the same elements by "
                             r"iterations i=\d \(at \S+:(\d+)\)", "w[:, i * 16:i * 16 + 48]"),
    "reshaped_hbm_overlap": (reshaped_hbm_overlap, None, LoopCarriedDependencyWarning,
                             r"'out' \(through view 'v'\) is written at the same elements by "
                             r"iterations i=0 \(at \S+:(\d+)\) and i=1", "nl.store(v[i * 16"),
    "reshaped_spmd": (reshaped_spmd, 2, SpmdRaceWarning,
                      r"'out' \(through view 'v'\) is written at the same elements by SPMD "
                      r"programs \(0,\) \(at \S+:(\d+)\) and \(1,\)", "nl.store(v, nl.load"),
    "reshaped_outer_tile": (reshaped_outer_tile, None, LoopCarriedDependencyWarning,
                            r"'last' \(through view 'lv'\) is written at the same elements by "
                            r"iterations i=\d \(at \S+:(\d+)\)", "lv[:, 0, :] = nl.load"),
    "second_destination": (second_destination, None, LoopCarriedDependencyWarning,
                           r"'red' \(through view 'rv'\) is written at the same elements by "
                           r"iterations i=\d \(at \S+:(\d+)\)", "reduce_res=rv"),
    "read_through_a_view": (read_through_a_view, None, LoopCarriedDependencyWarning,
                            r"'acc' \(through view 'av'\) is written in one nl.affine_range "
                            r"iteration and read in another \(loop 'i': written by i=0 at "
                            r"\S+:(\d+), read by i=1\)", "acc[:, 0:32] = nl.add"),
    "ap_spmd": (ap_spmd, 2, SpmdRaceWarning,
                r"'out' is written at the same elements by SPMD programs \(0,\) \(at \S+:(\d+)\) "
                r"and \(1,\)", "dst=out.ap("),
}


def custom_second_dst(a):
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        x = nl.load(a[0:128, nl.ds(i * 16, 16)])
        y = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.builtin_custom_op("row_sums", "lib.so", "1.0", "1.0", srcs=[x],
                               dsts=[y, total])  # the second destination: the same every time
    nl.store(out, total)
    return out


@pytest.fixture
def row_sums():
    from nki_workbench._src.isa.custom import CUSTOM_OPS
    nisa.register_custom_op("row_sums", lambda x: (x * 2, x.sum(1, keepdims=True)))
    yield
    CUSTOM_OPS.pop("row_sums")


@pytest.mark.parametrize("backend", EXECUTORS)
def test_a_custom_ops_second_destination_is_checked(row_sums, backend):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = nki.simulate_kernel(custom_second_dst, A, params=SimParams(backend=backend))
    np.testing.assert_allclose(out, A[:128, 48:64].sum(1, keepdims=True), rtol=1e-5)
    races = [str(w.message) for w in rec if issubclass(w.category, LoopCarriedDependencyWarning)]
    at = _line('nisa.builtin_custom_op("row_sums"')  # a call's line is its first line
    assert races and re.search(r"'total' is written at the same elements by iterations i=\d "
                               rf"\(at \S+:{at}\)", races[0]), races
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shuffled = [nki.simulate_kernel(custom_second_dst, A, params=SimParams(
            shuffle_affine=True, seed=s)) for s in range(6)]
    assert any(not np.array_equal(r, out) for r in shuffled)


READ_AT = {"read_through_a_view": "prev = nl.copy(av[:, 0, :])",
           "read_through_a_bitcast": "prev = nl.copy(av[:, 0:64])"}


def _line(snippet):
    src = open(__file__).read().splitlines()
    return next(k + 1 for k, text in enumerate(src) if snippet in text)


def _run(name, params):
    kernel, grid, _, _, _ = CASES[name]
    if name == "ap_spmd":
        return current.simulate(kernel[grid], params=params)(A)
    k = nki.jit(kernel)[grid] if grid else kernel
    return nki.simulate_kernel(k, A, params=params)


@pytest.mark.parametrize("backend", EXECUTORS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_race_through_a_view_warns_with_both_writers_and_the_line(name, backend):
    _, _, category, pattern, line = CASES[name]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        _run(name, SimParams(backend=backend))
    races = [str(w.message) for w in rec if issubclass(w.category, category)]
    assert len(races) >= 1, [str(w.message) for w in rec]
    m = re.search(pattern, races[0])
    assert m, races[0]
    assert int(m.group(1)) == _line(line)
    assert "different values" in races[0] or name.startswith("read_through")
    # a write through a whole view counts as written (no false "never written")
    assert not any(issubclass(w.category, UninitializedReadWarning) for w in rec)


@pytest.mark.parametrize("backend", EXECUTORS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_race_through_a_view_is_an_error_on_request(name, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompiledFallbackWarning)
        with pytest.raises(NkiError) as info:
            _run(name, SimParams(backend=backend, races="error"))
    assert info.value.code == "wb_race"
    where = READ_AT.get(name, CASES[name][4])  # a read-after-write race is reported at the read
    assert info.value.loc.endswith(f"test_races_views.py:{_line(where)}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_shuffled_order_changes_the_result(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        in_order = _run(name, SimParams())
        shuffled = [_run(name, SimParams(shuffle_affine=True, seed=s)) for s in range(8)]
    assert any(not np.array_equal(r, in_order) for r in shuffled)


def test_in_order_results_are_the_sequential_ones():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = A.reshape(96, 128)
        want = np.concatenate([flat[0:16], flat[48:96]]).reshape(128, 64)
        np.testing.assert_array_equal(_run("reshaped_hbm_overlap", SimParams()), want)
        np.testing.assert_array_equal(_run("reshaped_spmd", SimParams()),
                                      flat[32:96].reshape(128, 64))
        np.testing.assert_array_equal(_run("reshaped_outer_tile", SimParams()),
                                      np.concatenate([A[:128, 24:56], A[:128, 32:64]], 1))
        np.testing.assert_allclose(_run("second_destination", SimParams()),
                                   np.exp(A[:128, 48:64]).sum(1, keepdims=True), rtol=1e-5)
        np.testing.assert_array_equal(_run("ap_spmd", SimParams()), A[64:192])
        want = A[0:128].view(np.uint16).copy()
        want[:, 32:128] = A[64:192].view(np.uint16)[:, 0:96]
        np.testing.assert_array_equal(_run("bitcast_narrow_overlap", SimParams()).view(np.uint16),
                                      want)
        want = np.concatenate([A[0:128, 0:16], A[64:192, 0:48]], 1)
        np.testing.assert_array_equal(_run("bitcast_wide_overlap", SimParams()).view(np.uint32),
                                      want.view(np.uint32))
        both = _run("read_through_a_view", SimParams())
        np.testing.assert_allclose(both[:, :32], A[:128, :32] * 2 + A[:128, 32:64], rtol=1e-6)


# ----------------------------------------------------------------------------- no false alarms
def reshaped_tiles(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    v = out.reshape((2, 64, 64))
    for i in nl.affine_range(2):
        t = nl.load(a[i * 64:(i + 1) * 64, :])
        nl.store(v[i], nl.exp(t))  # each iteration its own half, in the view's coordinates
    return out


@pytest.mark.parametrize("backend", EXECUTORS)
def test_separate_writes_through_a_view_are_quiet_and_compiled(backend):
    k = nki.trace_kernel(reshaped_tiles, A).kernel
    assert view_writes(k) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nki.simulate_kernel(reshaped_tiles, A, params=SimParams(
            backend=backend)), np.exp(A[:128]), rtol=1e-5)
    if backend == "jax":
        comp = jax_exec.compiled(k)
        runs = comp.runs
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            jax_exec.run_compiled(k, {k.params[0].name: A})
        assert comp.runs == runs + 1


def test_the_compiled_executor_leaves_view_races_to_the_interpreter():
    k = nki.trace_kernel(reshaped_hbm_overlap, A).kernel
    assert view_writes(k) == ["out"]
    assert "race tracking through views (writes to ['out']" in why_interpreted(k, SimParams())
    assert why_interpreted(k, SimParams(detect_races=False)) is None


def bitcast_halves(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    v = out.view(nl.bfloat16).reshape((128, 64, 2))
    src = a.view(nl.bfloat16)
    for i in nl.affine_range(2):
        nl.store(v[:, :, i], nl.load(src[0:128, nl.ds(i * 64, 64)]))  # one half of each float32
    return out


@pytest.mark.parametrize("backend", EXECUTORS)
def test_iterations_writing_separate_halves_of_each_element_through_a_bitcast_are_quiet(backend):
    with warnings.catch_warnings():
        warnings.simplefilter("error", LoopCarriedDependencyWarning)
        warnings.simplefilter("ignore", CompiledFallbackWarning)
        out = nki.simulate_kernel(bitcast_halves, A, params=SimParams(backend=backend,
                                                                     races="error"))
    halves = A[:128].view(np.uint16)
    want = np.stack([halves[:, 0:64], halves[:, 64:128]], -1).reshape(128, 128)
    np.testing.assert_array_equal(out.view(np.uint16), want)


def test_the_compiled_executor_leaves_bitcast_view_races_to_the_interpreter():
    for kern, name in ((bitcast_narrow_overlap, "out"), (bitcast_wide_overlap, "t")):
        k = nki.trace_kernel(kern, A).kernel
        assert view_writes(k) == [name]
        assert f"race tracking through views (writes to ['{name}']" in why_interpreted(
            k, SimParams())


def bitcast_one_half(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    v = out.view(nl.bfloat16).reshape((128, 64, 2))
    nl.store(v[:, 0:32, 0], nl.load(a.view(nl.bfloat16)[0:128, 0:32]))  # low halves of 0..31
    nl.store(v[:, 0:16, 1], nl.load(a.view(nl.bfloat16)[0:128, 0:16]))  # high halves of 0..15
    return out


@pytest.mark.parametrize("backend", EXECUTORS)
def test_writes_through_a_bitcast_view_count_as_written(backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompiledFallbackWarning)
        nki.simulate_kernel(bitcast_halves, A, params=SimParams(backend=backend,
                                                               uninitialized="error"))
        with pytest.raises(NkiError) as info:
            nki.simulate_kernel(bitcast_one_half, A, params=SimParams(backend=backend,
                                                                     uninitialized="error"))
    # a float32 counts as written once both of its bf16 halves are: 16 of 64 per row
    assert f"{128 * 48} of {128 * 64} elements were never written" in str(info.value)
