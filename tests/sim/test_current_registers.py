"""Registers loaded from tensors drive dynamic loops decided at run time (NKI 0.2–0.6)."""

import numpy as np
import pytest
from kernels_current import nisa, nki, nl

from nki_workbench import NkiError
from nki_workbench.ir import parse, print_kernel, validate, walk_stmts
from nki_workbench.nki import trace_kernel

RNG = np.random.default_rng(11)
A = RNG.standard_normal((512, 64)).astype(np.float32)
ROWS = 128


def _n(v):
    return np.array([[v]], dtype=np.int32)


@nki.jit
def add_one_to_first_tiles(a, n_tiles):
    """out = a, plus 1 on the first ``n_tiles`` row tiles (a run-time count)."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // ROWS):
        t = nl.ndarray((ROWS, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * ROWS:(i + 1) * ROWS, :])
        nisa.dma_copy(dst=out[i * ROWS:(i + 1) * ROWS, :], src=t)
    cnt = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cnt, src=n_tiles)
    reg = nisa.register_alloc()
    nisa.register_load(reg, cnt)
    row = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=row, value=0)
    for _ in nl.dynamic_range(reg):
        t = nl.ndarray((ROWS, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[a.shape[1], ROWS], [1, a.shape[1]]],
                                      scalar_offset=row, indirect_dim=0))
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out.ap(pattern=[[a.shape[1], ROWS], [1, a.shape[1]]],
                                 scalar_offset=row, indirect_dim=0), src=t)
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=ROWS)
    return out


def _expected(n):
    e = A.copy()
    e[:n * ROWS] += 1.0
    return e


@pytest.mark.parametrize("n", [0, 1, 3, 4])
def test_dynamic_range_runs_as_many_iterations_as_the_loaded_register(n):
    np.testing.assert_array_equal(nki.simulate(add_one_to_first_tiles)(A, _n(n)), _expected(n))


def test_a_dynamic_loop_is_one_loop_in_the_ir_and_round_trips():
    k = trace_kernel(add_one_to_first_tiles, A, _n(2)).kernel
    loops = [s for s in walk_stmts(k.body) if getattr(s, "kind", None) == "dynamic"]
    assert len(loops) == 1 and "bound" in dict(loops[0].attrs)
    assert parse(print_kernel(k)) == k
    validate(k)


@nki.jit
def count_down(counter, step):
    """Adds ``step`` to an accumulator while a counter (decremented in SBUF) is non-zero."""
    out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
    c = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=c, src=counter)
    acc = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    s = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=step)
    reg = nisa.register_alloc()
    nisa.register_load(reg, c)

    def body(r):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=s, op=nl.add)
        nisa.tensor_scalar(dst=c, data=c, op0=nl.subtract, operand0=1)
        nisa.register_load(r, c)
        return r

    nl.while_loop(reg, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", [0, 1, 5])
def test_while_loop_rereads_its_register_before_each_iteration(n):
    step = np.array([[0.5]], dtype=np.float32)
    np.testing.assert_array_equal(nki.simulate(count_down)(_n(n), step), [[0.5 * n]])


@nki.jit
def fori_sum(a, n):
    """Sums the first ``n`` (run-time) rows of ``a`` (one row per iteration)."""
    out = nl.ndarray((1, a.shape[1]), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((1, a.shape[1]), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    row = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=row, value=0)
    hi = nisa.register_alloc()
    nisa.register_load(hi, n)

    def body(i):
        t = nl.ndarray((1, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[a.shape[1], 1], [1, a.shape[1]]],
                                      scalar_offset=row, indirect_dim=0))
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=1)

    nl.fori_loop(0, hi, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_fori_loop_with_a_register_bound_loaded_from_hbm():
    x = A[:8]
    for n in (0, 3, 8):
        got = nki.simulate(fori_sum)(x, np.array([n], dtype=np.int32))
        np.testing.assert_allclose(got, x[:n].sum(0, keepdims=True), rtol=1e-6, atol=1e-6)


@nki.jit
def first_load_inside_loop(counter):
    """A register allocated before a while loop and reloaded inside the loop of another."""
    out = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
    c = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=c, src=counter)
    seen = nisa.register_alloc()
    outer = nisa.register_alloc()
    nisa.register_load(outer, c)

    def body(r):
        nisa.register_load(seen, c)  # first load of `seen`: its tile lives outside the loop
        nisa.tensor_scalar(dst=c, data=c, op0=nl.subtract, operand0=1)
        nisa.register_load(r, c)
        return r

    nl.while_loop(outer, body)
    nisa.register_store(out, seen)
    return out


def test_a_register_first_loaded_in_a_loop_keeps_its_value_after_it():
    assert nki.simulate(first_load_inside_loop)(_n(4))[0, 0] == 1


def test_a_run_time_register_used_as_a_python_value_is_named():
    @nki.jit
    def k(a, n):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        r = nisa.register_alloc()
        nisa.register_load(r, n)
        for _ in range(int(r)):
            nisa.dma_copy(dst=out, src=a)
        return out

    with pytest.raises(NkiError, match="a register used as a Python value"):
        nki.simulate(k)(A[:128], _n(1))


def test_while_on_a_register_that_never_reaches_zero_stops_with_an_error(monkeypatch):
    import nki_workbench._src.ir.nodes as nodes
    monkeypatch.setattr(nodes, "MAX_DYNAMIC_ITERATIONS", 50)

    @nki.jit
    def spin(counter):
        out = nl.ndarray((1, 1), nl.int32, buffer=nl.shared_hbm)
        c = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=c, src=counter)
        reg = nisa.register_alloc()
        nisa.register_load(reg, c)

        def body(r):
            nisa.register_load(r, c)
            return r

        nl.while_loop(reg, body)
        nisa.dma_copy(dst=out, src=c)
        return out

    with pytest.raises(NkiError, match="did not end after 50 iterations"):
        nki.simulate(spin)(_n(1))


def test_the_validator_names_a_dynamic_loop_without_a_register():
    from dataclasses import replace

    from nki_workbench import NkiError as Err
    k = trace_kernel(add_one_to_first_tiles, A, _n(2)).kernel
    i = next(j for j, s in enumerate(k.body) if getattr(s, "kind", None) == "dynamic")
    for attrs, why in (((), "exactly one of the attributes"),
                       ((("bound", "nope"),), "'nope' is not a declared tensor")):
        bad = replace(k, body=k.body[:i] + (replace(k.body[i], attrs=attrs),) + k.body[i + 1:])
        with pytest.raises(Err, match=why):
            validate(bad)


def test_the_timeline_follows_the_run_time_trip_count():
    from nki_workbench._src.sim.timing import collect
    k = trace_kernel(add_one_to_first_tiles, A, _n(0)).kernel
    names = [d.name for d in k.params]
    zero, one, three = (len(collect(k, dict(zip(names, (A, _n(n)), strict=True))))
                        for n in (0, 1, 3))
    assert (one - zero, three - one) == (4, 8)  # the body's 4 instructions per iteration


@nki.jit
def row_at(a, n, k):
    """Row ``k`` (a trace-time register) and row ``n`` (a register loaded at run time)."""
    out = nl.ndarray((2, a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    known = nisa.register_alloc(k)
    loaded = nisa.register_alloc()
    nisa.register_load(loaded, n)
    for j, reg in enumerate((known, loaded)):
        t = nl.ndarray((1, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[a.shape[1], 1], [1, a.shape[1]]],
                                      scalar_offset=reg, indirect_dim=0))
        nisa.dma_copy(dst=out[j:j + 1, :], src=t)
    return out


def test_a_register_is_a_scalar_offset():
    x = A[:8]
    np.testing.assert_array_equal(nki.simulate(row_at)(x, _n(5), 2), x[[2, 5]])


@nki.jit
def stored_only_in_a_dynamic_loop(a, n):
    """``out`` is written only by a dynamic loop's body, which may run zero times."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    reg = nisa.register_alloc()
    nisa.register_load(reg, n)
    for _ in nl.dynamic_range(reg):
        nisa.dma_copy(dst=out, src=t)
    return out


def test_a_dynamic_loop_proves_no_output_written_whole():
    from nki_workbench import UninitializedReadWarning
    from nki_workbench._src.sim.analysis import fully_written_outputs
    x = A[:128]
    assert fully_written_outputs(trace_kernel(stored_only_in_a_dynamic_loop, x, _n(1)).kernel) \
        == frozenset()
    np.testing.assert_array_equal(nki.simulate(stored_only_in_a_dynamic_loop)(x, _n(2)), x)
    with pytest.warns(UninitializedReadWarning, match="8192 of 8192 elements were never written"):
        got = nki.simulate(stored_only_in_a_dynamic_loop)(x, _n(0))
    assert np.isnan(got).all()
