"""Races the simulator reports: both executors warn alike, ``races="error"`` raises, and
``shuffle_affine`` shows each one really changes results. Race-free kernels stay quiet (and
compiled)."""

import re
import warnings

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import (
    CompiledFallbackWarning,
    LoopCarriedDependencyWarning,
    NkiError,
    SimParams,
    SpmdRaceWarning,
    nki,
)
from nki_workbench._src.sim import jax_exec
from nki_workbench._src.sim.analysis import overlapping_writes, shared_overlaps

EXECUTORS = ("numpy", "jax")
A = np.random.default_rng(7).uniform(-1, 1, (192, 64)).astype(np.float32)


def overlapping_stores(a):
    out = nl.ndarray((192, 64), nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.load(a[i * 32:i * 32 + 128, :])
        nl.store(out[i * 64:i * 64 + 128, :], t)  # rows 64..127 written twice, differently
    return out


def same_region_per_program(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    pid = nl.program_id(0)
    nl.store(out, nl.load(a[pid * 64:pid * 64 + 128, :]))  # both programs write all of out
    return out


def outer_tile_last_wins(a):
    out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
    last = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(8):
        last[...] = nl.load(a[0:128, nl.ds(i * 8, 8)])
    nl.store(out, last)  # read after the loop: which iteration wrote it last?
    return out


CASES = {
    "overlapping_stores": (overlapping_stores, None, LoopCarriedDependencyWarning,
                           [r"iterations i=0 \(at \S+test_races.py:(\d+)\) and i=1"]),
    "spmd": (same_region_per_program, 2, SpmdRaceWarning,
             [r"SPMD programs \(0,\) \(at \S+test_races.py:(\d+)\) and \(1,\)"]),
    "outer_tile": (outer_tile_last_wins, None, LoopCarriedDependencyWarning,
                   [r"iterations i=0 \(at \S+test_races.py:(\d+)\) and i=1"]),
}
LINES = {"overlapping_stores": "nl.store(out[i * 64", "spmd": "nl.store(out, nl.load(a[pid",
         "outer_tile": "last[...] = nl.load"}


def _line(snippet):
    src = open(__file__).read().splitlines()
    return next(k + 1 for k, text in enumerate(src) if snippet in text)


def _run(name, params):
    kernel, grid, _, _ = CASES[name]
    k = nki.jit(kernel)[grid] if grid else kernel
    return nki.simulate_kernel(k, A, params=params)


@pytest.mark.parametrize("backend", EXECUTORS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_race_warns_naming_both_writers_and_the_line(name, backend):
    _, _, category, patterns = CASES[name]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        _run(name, SimParams(backend=backend))
    races = [str(w.message) for w in rec if issubclass(w.category, category)]
    assert len(races) == 1, [str(w.message) for w in rec]
    for pat in patterns:
        m = re.search(pat, races[0])
        assert m, races[0]
        assert int(m.group(1)) == _line(LINES[name])
    assert "different values" in races[0]
    if backend == "jax" and name == "spmd":  # never silent: the fallback says why
        assert any(issubclass(w.category, CompiledFallbackWarning) and "SPMD" in str(w.message)
                   for w in rec)


@pytest.mark.parametrize("backend", EXECUTORS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_race_is_an_error_on_request(name, backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompiledFallbackWarning)
        with pytest.raises(NkiError) as info:
            _run(name, SimParams(backend=backend, races="error"))
    assert info.value.code == "wb_race"
    assert info.value.loc.endswith(f"test_races.py:{_line(LINES[name])}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_shuffled_order_changes_the_result(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        in_order = _run(name, SimParams())
        shuffled = [_run(name, SimParams(shuffle_affine=True, seed=s)) for s in range(6)]
    assert any(not np.array_equal(r, in_order) for r in shuffled)


def test_in_order_results_are_the_sequential_ones():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = _run("overlapping_stores", SimParams())
        np.testing.assert_array_equal(out[:64], A[:64])
        np.testing.assert_array_equal(out[64:], A[32:160])  # the later iteration wins
        np.testing.assert_array_equal(_run("spmd", SimParams()), A[64:])
        np.testing.assert_array_equal(_run("outer_tile", SimParams()), A[:128, 56:64])


# ----------------------------------------------------------------------------- no false alarms
def tiled(a):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 64):
        for j in nl.affine_range(2):
            t = nl.load(a[i * 64:(i + 1) * 64, j * 32:(j + 1) * 32])
            nl.store(out[i * 64:(i + 1) * 64, j * 32:(j + 1) * 32], nl.exp(t))
    return out


def per_program(a):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    p, q = nl.program_id(0), nl.program_id(1)
    t = nl.load(a[p * 96:(p + 1) * 96, q * 32:(q + 1) * 32])
    nl.store(out[p * 96:(p + 1) * 96, q * 32:(q + 1) * 32], nl.multiply(t, 2.0))
    return out


def same_value_twice(a):
    out = nl.ndarray((192, 64), nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out[i * 64:i * 64 + 128, :], nl.load(a[i * 64:i * 64 + 128, :]))
    return out


@pytest.mark.parametrize("backend", EXECUTORS)
def test_race_free_kernels_are_quiet_and_compiled(backend):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nki.simulate_kernel(tiled, A, params=SimParams(
            backend=backend)), np.exp(A), rtol=1e-5)
        np.testing.assert_array_equal(nki.simulate_kernel(nki.jit(per_program)[2, 2], A,
                                                          params=SimParams(backend=backend)),
                                      2 * A)
        # an overlap writing the value already there cannot depend on the order
        np.testing.assert_array_equal(nki.simulate_kernel(same_value_twice, A, params=SimParams(
            backend=backend)), A)


def test_the_static_proof_tracks_only_what_it_cannot_separate():
    def ir(kernel, grid=None):
        k = nki.jit(kernel)[grid] if grid else kernel
        return nki.trace_kernel(k, A).kernel
    assert overlapping_writes(ir(tiled)) == {}
    assert shared_overlaps(ir(per_program, (2, 2))) == frozenset()
    assert set().union(*overlapping_writes(ir(overlapping_stores)).values()) == {"out"}
    assert set().union(*overlapping_writes(ir(outer_tile_last_wins)).values()) == {"last"}
    assert shared_overlaps(ir(same_region_per_program, 2)) == {"out"}


def test_compiled_runs_race_free_kernels_compiled():
    k = nki.trace_kernel(tiled, A).kernel
    comp = jax_exec.compiled(k)
    runs = comp.runs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax_exec.run_compiled(k, {k.params[0].name: A})
    assert comp.runs == runs + 1
