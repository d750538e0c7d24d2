"""A Python ``if`` on loop variables splits the loops it names (docs/control_flow.md).

Where a condition of loop variables differs between iterations, the tracer cuts the loops'
ranges into consecutive parts over which it has one value, and traces the body once per part:
the numbers are those of running every iteration's own branch, and the IR grows with the number
of parts, not with the iteration count (the flash-attention backward kernel's causal
``if tile_required:`` over 16 x 64 tiles gave 544 unrolled bodies; split, it gives 16).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nki_workbench import SimParams, nki
from nki_workbench._src.errors import NkiError
from nki_workbench._src.ir import Inst, Loop
from nki_workbench.nki import language as nl

BACKENDS = [SimParams(backend="numpy"), SimParams(backend="jax")]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def loops_of(body, depth=0):
    """(depth, Loop) for every loop in ``body``, outermost first."""
    for s in body:
        if isinstance(s, Loop):
            yield depth, s
            yield from loops_of(s.body, depth + 1)


def count_ops(body, op):
    n = 0
    for s in body:
        if isinstance(s, Loop):
            n += count_ops(s.body, op)
        elif isinstance(s, Inst) and s.op == op:
            n += 1
    return n


@nki.jit
def causal_tiles(q, kv):
    """The backward kernel's shape: ``if 128 * (i_q + 1) - 1 >= 512 * i_k:`` over K tiles
    (outer) and Q tiles (inner), accumulating into a per-K-tile sum."""
    nq, nk = q.shape[0] // 128, kv.shape[0] // 512
    out = nl.ndarray((nk, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i_k in nl.affine_range(nk):
        acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        for i_q in nl.sequential_range(nq):
            required = (i_q + 1) * 128 - 1 >= i_k * 512
            if required:
                acc[...] = nl.add(acc, nl.load(q[i_q * 128:(i_q + 1) * 128, :]))
        nl.store(out[i_k], value=acc)
    return out


def causal_tiles_ref(q, kv):
    nq, nk = q.shape[0] // 128, kv.shape[0] // 512
    out = np.zeros((nk, 128, 64), np.float32)
    for i_k in range(nk):
        for i_q in range(nq):
            if (i_q + 1) * 128 - 1 >= i_k * 512:
                out[i_k] += q[i_q * 128:(i_q + 1) * 128]
    return out


@pytest.mark.parametrize("params", BACKENDS, ids=["numpy", "jax"])
def test_a_triangular_condition_splits_loops_and_matches_numpy(params):
    q, kv = rand(32 * 128, 64), rand(8 * 512, 4)
    np.testing.assert_allclose(nki.simulate_kernel(causal_tiles, q, kv, params=params),
                               causal_tiles_ref(q, kv), rtol=1e-5, atol=1e-4)
    ir = nki.trace_kernel(causal_tiles, q, kv).kernel
    # one load per part that takes the branch: one per K tile, not one per (K, Q) pair
    assert count_ops(ir.body, "load") == 8
    outer = [lp for d, lp in loops_of(ir.body) if d == 0]
    assert [(lp.start, lp.stop) for lp in outer] == [(k, k + 1) for k in range(8)]
    inner = [(lp.start, lp.stop) for d, lp in loops_of(ir.body) if d == 1]
    # K tile 0 needs every Q tile; K tile k > 0 skips Q tiles [0, 4k) and takes [4k, 32)
    assert inner == [(0, 32)] + [r for k in range(1, 8) for r in ((0, 4 * k), (4 * k, 32))]


@nki.jit
def ordered_recurrence(x):
    """A sequential recurrence whose update changes at i = 5: the parts run in order."""
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(1, x.shape[0], 2):
        t = nl.load(x[i])
        if i < 5:
            acc[...] = nl.add(nl.multiply(acc, 0.5), t)
        else:
            acc[...] = nl.subtract(nl.multiply(acc, 3.0), t)
    nl.store(out, value=acc)
    return out


@pytest.mark.parametrize("params", BACKENDS, ids=["numpy", "jax"])
def test_split_parts_of_a_sequential_loop_keep_their_order_and_step(params):
    x = rand(12, 128, 8)
    ref = np.zeros((128, 8), np.float32)
    for i in range(1, 12, 2):
        ref = ref * 0.5 + x[i] if i < 5 else ref * 3.0 - x[i]
    np.testing.assert_allclose(nki.simulate_kernel(ordered_recurrence, x, params=params), ref,
                               rtol=1e-5, atol=1e-4)
    loops = [lp for _, lp in loops_of(nki.trace_kernel(ordered_recurrence, x).kernel.body)]
    assert [(lp.start, lp.stop, lp.step, lp.kind) for lp in loops] == \
        [(1, 5, 2, "sequential"), (5, 12, 2, "sequential")]


@nki.jit
def held_and(a):
    """``c = p and q`` then ``if c:``, and ``if p and q:`` directly, on loop variables."""
    n = a.shape[0] // 128
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        for j in nl.affine_range(n):
            t = nl.load(a[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128])
            wanted = i >= j
            wanted = wanted and (i - j < 2)
            if wanted:
                t[...] = nl.multiply(t, 2.0)
            if j > 0 and i == 0:
                t[...] = nl.multiply(t, -1.0)
            nl.store(out[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128], value=t)
    return out


@pytest.mark.parametrize("params", BACKENDS, ids=["numpy", "jax"])
def test_python_and_of_loop_predicates_is_decided_per_part(params):
    a = rand(512, 512)
    ref = a.copy()
    for i in range(4):
        for j in range(4):
            blk = ref[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            if i >= j and i - j < 2:
                blk *= 2
            if j > 0 and i == 0:
                blk *= -1
    np.testing.assert_allclose(nki.simulate_kernel(held_and, a, params=params), ref,
                               rtol=1e-6)


def test_a_new_loop_reduce_accumulator_in_a_split_loop_is_refused():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            t = nl.load(a[i])
            if i < 2:
                t[...] = nl.multiply(t, 2.0)
            s = nl.loop_reduce(t, op=np.add, loop_indices=[i], dtype=nl.float32)
        nl.store(out, value=s)
        return out
    with pytest.raises(NkiError) as e:
        nki.simulate_kernel(k, rand(4, 128, 8))
    assert "split loop" in str(e.value) and "test_loop_split.py" in str(e.value)


def test_a_loop_reduce_into_a_declared_accumulator_spans_the_parts():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            t = nl.load(a[i])
            if i < 2:
                t[...] = nl.multiply(t, 2.0)
            acc[...] = nl.loop_reduce(t, op=np.add, loop_indices=[i], dtype=nl.float32)
        nl.store(out, value=acc)
        return out
    a = rand(4, 128, 8)
    np.testing.assert_allclose(nki.simulate_kernel(k, a), 2 * a[:2].sum(0) + a[2:].sum(0),
                               rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(ni=st.integers(1, 6), nj=st.integers(1, 7), a=st.integers(-3, 3), b=st.integers(-3, 3),
       c=st.integers(-8, 8), start=st.integers(0, 2))
def test_any_affine_condition_marks_exactly_its_iterations(ni, nj, a, b, c, start):
    @nki.jit
    def mark(x):
        out = nl.ndarray((ni, nj), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(start, start + ni):
            for j in nl.affine_range(nj):
                v = nl.full((1, 1), 1.0, dtype=nl.float32)
                if a * i + b * j >= c:
                    v[...] = nl.full((1, 1), 2.0, dtype=nl.float32)
                nl.store(out[i - start:i - start + 1, j:j + 1], value=v)
        return out
    got = nki.simulate_kernel(mark, np.zeros((1, 1), np.float32))
    ii, jj = np.meshgrid(np.arange(start, start + ni), np.arange(nj), indexing="ij")
    want = np.where(a * ii + b * jj >= c, 2.0, 1.0)
    np.testing.assert_array_equal(got, want)
    body = nki.trace_kernel(mark, np.zeros((1, 1), np.float32)).kernel.body
    assert count_ops(body, "memset") <= 2 * ni * nj  # never more bodies than unrolling gives
    outer = [lp for d, lp in loops_of(body) if d == 0]
    # a monotone condition of one loop splits only that loop, in at most two parts
    assert len(outer) <= (1 if a == 0 else 2 if b == 0 else ni)
    assert [i for lp in outer for i in range(lp.start, lp.stop, lp.step)] == \
        list(range(start, start + ni))
