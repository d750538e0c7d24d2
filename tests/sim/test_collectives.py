"""Collectives on 2, 4 and 8 simulated ranks against numpy (nki.nccl and nki.distributed)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki_workbench
import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench.nki import distributed as dist
from nki_workbench.nki import nccl

RANKS = (2, 4, 8)


def _data(n, shape, seed=0):
    rng = np.random.default_rng(seed + n)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


# ----------------------------------------------------------------------------- kernels
@nki.jit
def k_all_reduce_sbuf(a, n):
    """nccl.all_reduce of SBUF tiles with explicit groups."""
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    r = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nccl.all_reduce(op=np.add, srcs=[t], dsts=[r], replica_groups=[list(range(n))])
    nl.store(out, r)
    return out


@nki.jit
def k_all_reduce_max(a):
    """distributed.all_reduce on HBM, over the launch group."""
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    dist.all_reduce([a], [out], np.maximum)
    return out


@nki.jit
def k_all_gather(a, n, dim):
    shape = list(a.shape)
    shape[dim] *= n
    out = nl.ndarray(tuple(shape), nl.float32, buffer=nl.shared_hbm)
    dist.all_gather([a], [out], all_gather_dim=dim)
    return out


@nki.jit
def k_reduce_scatter(a, n):
    out = nl.ndarray((a.shape[0], a.shape[1] // n), nl.float32, buffer=nl.shared_hbm)
    nccl.reduce_scatter(np.add, [a], [out], [list(range(n))], reduce_scatter_dim=1)
    return out


@nki.jit
def k_all_to_all(a, n):
    out = nl.ndarray((a.shape[0] * n, a.shape[1] // n), nl.float32, buffer=nl.shared_hbm)
    nccl.all_to_all(np.add, [a], [out], [list(range(n))], 1, 0)
    return out


@nki.jit
def k_broadcast(a, root):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    dist.broadcast([a], [out], root=root)
    return out


@nki.jit
def k_permute_ring(a, n):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    nccl.collective_permute(dst=out, src=a,
                            source_target_pairs=[(i, (i + 1) % n) for i in range(n)])
    return out


@nki.jit
def k_permute_implicit(a, n):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    nccl.collective_permute_implicit(dst=out, src=a, replica_groups=[list(range(n))],
                                     channel_id=0, num_channels=2)
    return out


@nki.jit
def k_permute_reduce(a, n):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    acc = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    acc[...] = nl.multiply(t, 2.0)
    nccl.collective_permute_reduce_implicit(dst=acc, src=t, op=np.add,
                                            replica_groups=[list(range(n))])
    nl.store(out, acc)
    return out


@nki.jit
def k_shift(a):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    dist.collective_permute([a], [out], shift=-1)
    return out


@nki.jit
def k_sendrecv_ring(a, rank, n):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    nccl.send([a], peer_id=(rank + 1) % n)
    nccl.recv([out], peer_id=(rank - 1) % n)
    return out


@nki.jit
def k_recv_reduce(a, rank):
    out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    acc = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    acc[...] = nl.copy(t)
    if rank == 0:
        nccl.send([t], peer_id=1)
    else:
        nccl.recv([acc], op=np.add, peer_id=0)
    nl.store(out, acc)
    return out


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("n", RANKS)
def test_all_reduce_sum_and_max(n):
    xs = _data(n, (128, 64))
    outs = nki_workbench.simulate_ranks(k_all_reduce_sbuf, [(x, n) for x in xs])
    ref = np.sum(np.stack(xs), axis=0)
    for o in outs:
        np.testing.assert_allclose(o, ref, atol=1e-4, rtol=1e-5)
    outs = nki_workbench.simulate_ranks(k_all_reduce_max, [(x,) for x in xs])
    for o in outs:
        np.testing.assert_array_equal(o, np.max(np.stack(xs), axis=0))


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("dim", [0, 1])
def test_all_gather(n, dim):
    xs = _data(n, (16, 24))
    outs = nki_workbench.simulate_ranks(k_all_gather, [(x, n, dim) for x in xs])
    for o in outs:
        np.testing.assert_array_equal(o, np.concatenate(xs, axis=dim))


@pytest.mark.parametrize("n", RANKS)
def test_reduce_scatter(n):
    xs = _data(n, (32, 8 * 16))
    outs = nki_workbench.simulate_ranks(k_reduce_scatter, [(x, n) for x in xs])
    chunks = np.split(np.sum(np.stack(xs), axis=0), n, axis=1)
    for r, o in enumerate(outs):
        np.testing.assert_allclose(o, chunks[r], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("n", RANKS)
def test_all_to_all_split_concat(n):
    xs = _data(n, (16, 8 * 4))
    outs = nki_workbench.simulate_ranks(k_all_to_all, [(x, n) for x in xs])
    for r, o in enumerate(outs):
        ref = np.concatenate([np.split(x, n, axis=1)[r] for x in xs], axis=0)
        np.testing.assert_array_equal(o, ref)


@pytest.mark.parametrize("n", RANKS)
def test_broadcast_from_root(n):
    xs = _data(n, (64, 32))
    root = n - 1
    outs = nki_workbench.simulate_ranks(k_broadcast, [(x, root) for x in xs])
    for o in outs:
        np.testing.assert_array_equal(o, xs[root])


@pytest.mark.parametrize("n", RANKS)
def test_permute_ring_explicit_implicit_and_shift(n):
    xs = _data(n, (32, 16))
    for kern in (k_permute_ring, k_permute_implicit):
        outs = nki_workbench.simulate_ranks(kern, [(x, n) for x in xs])
        for r, o in enumerate(outs):
            np.testing.assert_array_equal(o, xs[(r - 1) % n])
    outs = nki_workbench.simulate_ranks(k_shift, [(x,) for x in xs])
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(o, xs[(r + 1) % n])
    outs = nki_workbench.simulate_ranks(k_permute_reduce, [(x, n) for x in xs])
    for r, o in enumerate(outs):
        np.testing.assert_allclose(o, 2 * xs[r] + xs[(r - 1) % n], atol=1e-5)


@pytest.mark.parametrize("n", RANKS)
def test_send_recv_ring(n):
    xs = _data(n, (8, 128))
    outs = nki_workbench.simulate_ranks(k_sendrecv_ring, [(x, r, n) for r, x in enumerate(xs)])
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(o, xs[(r - 1) % n])


def test_send_recv_pair_reducing():
    xs = _data(2, (128, 32))
    outs = nki_workbench.simulate_ranks(k_recv_reduce, [(x, r) for r, x in enumerate(xs)])
    np.testing.assert_array_equal(outs[0], xs[0])
    np.testing.assert_allclose(outs[1], xs[0] + xs[1], atol=1e-5)


@pytest.mark.parametrize("groups", [[[0, 1], [2, 3]], [[0, 2], [1, 3]], [[3, 1, 0], [2]]])
def test_replica_groups_split_ranks(groups):
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nccl.all_reduce(np.add, [a], [out], replica_groups=groups)
        return out

    @nki.jit
    def g(a):
        out = nl.ndarray((a.shape[0] * 2, a.shape[1]), nl.float32, buffer=nl.shared_hbm)
        dist.all_gather([a], [out], all_gather_dim=0)
        return out

    xs = _data(4, (16, 8))
    outs = nki_workbench.simulate_ranks(k, [(x,) for x in xs])
    for grp in groups:
        ref = np.sum(np.stack([xs[m] for m in grp]), axis=0)
        for m in grp:
            np.testing.assert_allclose(outs[m], ref, atol=1e-5)
    if all(len(grp) == 2 for grp in groups):  # the launch topology supplies dist's groups
        outs = nki_workbench.simulate_ranks(g, [(x,) for x in xs], replica_groups=groups)
        for grp in groups:
            for m in grp:
                np.testing.assert_array_equal(outs[m], np.concatenate([xs[q] for q in grp]))


def test_several_srcs_and_masks_and_spmd_grid():
    @nki.jit
    def k(a, b):
        oa = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        ob = nl.ndarray(b.shape, nl.float32, buffer=nl.shared_hbm)
        i = nl.arange(a.shape[0])[:, None]
        j = nl.arange(a.shape[1])[None, :]
        ta = nl.load(a)
        ra = nl.zeros(a.shape, nl.float32)
        nccl.all_reduce(np.add, [ta], [ra], [[0, 1, 2]], mask=(i < 64))
        nl.store(oa, ra)
        pid = nl.program_id(0)
        dist.all_reduce([b[pid]], [ob[pid]], np.minimum)
        nl.store(oa[i, j], ra, mask=(i < 64))
        return oa, ob

    xs, ys = _data(3, (128, 16)), _data(3, (2, 8, 8), seed=5)
    outs = nki_workbench.simulate_ranks(k[2], [(x, y) for x, y in zip(xs, ys, strict=True)])
    ref = np.sum(np.stack(xs), axis=0)
    for oa, ob in outs:
        np.testing.assert_allclose(oa[:64], ref[:64], atol=1e-5)
        np.testing.assert_array_equal(oa[64:], 0.0)  # masked-out lanes keep nl.zeros
        np.testing.assert_array_equal(ob, np.min(np.stack(ys), axis=0))


def test_tensor_parallel_mlp_block_matches_single_device():
    """Column-parallel (W1 split by columns) then row-parallel (W2 by rows) + all_reduce."""
    @nki.jit
    def mlp_shard(x_t, w1, w2):
        out = nl.ndarray((x_t.shape[1], w2.shape[1]), nl.float32, buffer=nl.shared_hbm)
        h = nl.matmul(nl.load(x_t), nl.load(w1), transpose_x=True)   # [tokens, H/4]
        act = nl.relu(h)
        y = nl.matmul(act, nl.load(w2))                              # [tokens, D] partial
        part = nl.copy(y, dtype=nl.float32)
        total = nl.ndarray(part.shape, nl.float32, buffer=nl.sbuf)
        nccl.all_reduce(np.add, [part], [total], replica_groups=[[0, 1, 2, 3]])
        nl.store(out, total)
        return out

    rng = np.random.default_rng(7)
    tokens, d, hidden, n = 128, 128, 512, 4
    x = rng.standard_normal((tokens, d)).astype(np.float32) / 4
    w1 = rng.standard_normal((d, hidden)).astype(np.float32) / 8
    w2 = rng.standard_normal((hidden, d)).astype(np.float32) / 8
    ref = np.maximum(x @ w1, 0) @ w2
    hs = hidden // n
    args = [(np.ascontiguousarray(x.T), np.ascontiguousarray(w1[:, r * hs:(r + 1) * hs]),
             np.ascontiguousarray(w2[r * hs:(r + 1) * hs])) for r in range(n)]
    outs = nki_workbench.simulate_ranks(mlp_shard, args)
    for o in outs:
        np.testing.assert_allclose(o, ref, atol=1e-3, rtol=1e-3)
    np.testing.assert_array_equal(outs[0], outs[3])


def test_all_reduce_rounds_to_the_destination_dtype():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
        dist.all_reduce([a], [out], np.add)
        return out

    xs = _data(4, (32, 32))
    outs = nki_workbench.simulate_ranks(k, [(x,) for x in xs])
    ref = np.sum(np.stack(xs), axis=0)
    for o in outs:
        assert o.dtype.name == "bfloat16"
        np.testing.assert_allclose(o.astype(np.float32), ref, atol=1e-2, rtol=1e-2)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 5), rows=st.integers(1, 16), cols=st.integers(1, 4),
       op=st.sampled_from([("add", np.add, np.sum), ("max", np.maximum, np.max),
                           ("min", np.minimum, np.min)]),
       seed=st.integers(0, 2**16))
def test_property_all_reduce_and_all_gather_match_numpy(n, rows, cols, op, seed):
    _, ufunc, red = op

    @nki.jit
    def k(a, n):
        r = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        g = nl.ndarray((a.shape[0], a.shape[1] * n), nl.float32, buffer=nl.shared_hbm)
        nccl.all_reduce(ufunc, [a], [r], [list(range(n))[::-1]])
        nccl.all_gather(None, [a], [g], [list(range(n))], all_gather_dim=1)
        return r, g

    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(n)]
    outs = nki_workbench.simulate_ranks(k, [(x, n) for x in xs])
    for r, g in outs:
        np.testing.assert_allclose(r, red(np.stack(xs), axis=0), atol=1e-5, rtol=1e-5)
        np.testing.assert_array_equal(g, np.concatenate(xs, axis=1))


def test_tensor_parallel_mlp_as_a_kernel_pair():
    """Two kernels, as a framework would launch them: a column-parallel matmul (+ relu) whose
    shard stays on its rank, then a row-parallel matmul whose partial sums are all-reduced."""
    @nki.jit
    def column_parallel(x_t, w1):
        h = nl.ndarray((x_t.shape[1], w1.shape[1]), nl.float32, buffer=nl.shared_hbm)
        nl.store(h, nl.relu(nl.matmul(nl.load(x_t), nl.load(w1), transpose_x=True)))
        return h

    @nki.jit
    def row_parallel_all_reduce(h, w2):
        out = nl.ndarray((h.shape[0], w2.shape[1]), nl.float32, buffer=nl.shared_hbm)
        part = nl.copy(nl.matmul(nl.load(h), nl.load(w2)), dtype=nl.float32)
        total = nl.ndarray(part.shape, nl.float32, buffer=nl.sbuf)
        nccl.all_reduce(np.add, [part], [total], replica_groups=[[0, 1, 2, 3]])
        nl.store(out, total)
        return out

    rng = np.random.default_rng(11)
    tokens, d, hidden, n = 128, 128, 512, 4
    x = rng.standard_normal((tokens, d)).astype(np.float32) / 4
    w1 = rng.standard_normal((d, hidden)).astype(np.float32) / 8
    w2 = rng.standard_normal((hidden, d)).astype(np.float32) / 8
    hs = hidden // n
    hs_per_rank = nki_workbench.simulate_ranks(
        column_parallel, [(np.ascontiguousarray(x.T), np.ascontiguousarray(w1[:, r * hs:(r + 1) *
                                                                           hs])) for r in range(n)])
    outs = nki_workbench.simulate_ranks(
        row_parallel_all_reduce,
        [(hs_per_rank[r], np.ascontiguousarray(w2[r * hs:(r + 1) * hs])) for r in range(n)])
    ref = np.maximum(x @ w1, 0) @ w2
    for o in outs:
        np.testing.assert_allclose(o, ref, atol=1e-3, rtol=1e-3)
