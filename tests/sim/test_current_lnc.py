"""Today's LNC instructions and ``nki.collectives`` against numpy (both executors, see conftest).

``nisa.sendrecv`` exchanges an SBUF tile between the two cores of a ``kernel[2]`` launch;
``nisa.core_barrier`` orders shared-HBM writes of one core before reads of the other;
``nki.collectives`` calls trace to the same collective instructions as ``nki.nccl``.
"""

import warnings

import numpy as np
import pytest
from kernels_current import nisa, nki, nl

import nki_workbench
from nki_workbench import NkiError
from nki_workbench._src.ir.printer import print_kernel
from nki_workbench.current import collectives as ncc

RNG = np.random.default_rng(11)
X = RNG.standard_normal((128, 64)).astype(np.float32)


def k_swap_halves(a):
    """Core c loads half c of the columns, sends it to the other core, stores what it got."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    c = nl.program_id(0)
    half = a.shape[1] // 2
    mine = nl.ndarray((128, half), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[:, c * half:(c + 1) * half])
    got = nl.ndarray((128, half), a.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=got, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
    nisa.dma_copy(dst=out[:, c * half:(c + 1) * half], src=got)
    return out


def k_barrier_exchange(a):
    """Each core writes its half, waits at the barrier, then reads the other core's half."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    c = nl.program_id(0)
    half = a.shape[1] // 2
    t = nl.ndarray((128, half), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[:, c * half:(c + 1) * half])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=scratch[:, c * half:(c + 1) * half], src=t)
    nisa.core_barrier(data=scratch, cores=(0, 1))
    o = 1 - c
    u = nl.ndarray((128, half), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=scratch[:, o * half:(o + 1) * half])
    nisa.dma_copy(dst=out[:, c * half:(c + 1) * half], src=u)
    return out


def _swapped(a):
    h = a.shape[1] // 2
    return np.concatenate([a[:, h:], a[:, :h]], axis=1)


def _run(kernel, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the compiled executor hands collectives over
        return nki.simulate(nki.jit(kernel)[2])(*args)


def test_sendrecv_exchanges_tiles_between_the_two_cores():
    np.testing.assert_array_equal(_run(k_swap_halves, X), _swapped(X))


def test_core_barrier_orders_writes_before_the_other_cores_reads():
    for _ in range(3):  # the cores are threads: the barrier, not luck, orders them
        np.testing.assert_array_equal(_run(k_barrier_exchange, X), _swapped(2.0 * X))


def test_sendrecv_needs_a_peer_core():
    with pytest.raises(NkiError, match="not another core"):
        nki.simulate(nki.jit(k_swap_halves))(X)


def test_sendrecv_and_barrier_are_traced_as_lnc_instructions():
    text = print_kernel(nki_workbench.nki.trace_kernel(nki.jit(k_barrier_exchange)[2], X).kernel)
    assert "lnc_core_barrier(scratch) [cores=(0, 1)]" in text
    text = print_kernel(nki_workbench.nki.trace_kernel(nki.jit(k_swap_halves)[2], X).kernel)
    assert "lnc_sendrecv(mine, expr(-pid0 + 1), expr(-pid0 + 1)) [pipe_id=0]" in text


def k_gather(a):
    out = nl.ndarray((2 * a.shape[0], a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    ncc.all_gather(srcs=[a], dsts=[out], replica_group=ncc.ReplicaGroup([[0, 1]]),
                   collective_dim=0)
    return out


def k_reduce(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ncc.all_reduce(srcs=[a], dsts=[out], replica_group=ncc.ReplicaGroup([[0, 1]]), op=nl.add)
    return out


def test_collectives_over_two_ranks():
    xs = [RNG.standard_normal((4, 8)).astype(np.float32) for _ in range(2)]
    outs = nki_workbench.simulate_ranks(nki.jit(k_gather), [(x,) for x in xs])
    for o in outs:
        np.testing.assert_array_equal(o, np.concatenate(xs, axis=0))
    outs = nki_workbench.simulate_ranks(nki.jit(k_reduce), [(x,) for x in xs])
    for o in outs:
        np.testing.assert_allclose(o, xs[0] + xs[1], rtol=1e-6)


def test_replica_group_and_unmodelled_calls_name_themselves():
    assert ncc.ReplicaGroup([[0, 1], [2, 3]]).replica_groups == ((0, 1), (2, 3))
    with pytest.raises(NkiError, match="all_gather_v"):
        nki.simulate(nki.jit(k_gather_v))(X)


def k_gather_v(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    ncc.all_gather_v(srcs=[a], dsts=[out], replica_group=ncc.ReplicaGroup([[0]]),
                     metadata_tensor=a)
    return out


def k_other_block(a):
    """All-gather, then each rank keeps the block of the next rank (picked by ``rank_id``)."""
    n = a.shape[0]
    gathered = nl.ndarray((2 * n, a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    ncc.all_gather(srcs=[a], dsts=[gathered], replica_group=ncc.ReplicaGroup([[0, 1]]),
                   collective_dim=0)
    r = ncc.rank_id()
    other = (int(r) + 1) % 2
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=gathered[other * n:(other + 1) * n, :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(10 * int(r)))
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_rank_id_is_each_ranks_own_id():
    xs = [RNG.standard_normal((4, 8)).astype(np.float32) for _ in range(2)]
    kern = nki.jit(k_other_block)
    for _ in range(2):  # the second call reuses the kernel's per-rank traces
        outs = nki_workbench.simulate_ranks(kern, [(x,) for x in xs])
        np.testing.assert_allclose(outs[0], xs[1], rtol=1e-6)
        np.testing.assert_allclose(outs[1], xs[0] + 10.0, rtol=1e-6)
    # why: a kernel run alone is rank 0 of a world of one
    np.testing.assert_allclose(nki.simulate(nki.jit(k_rank_alone))(X), X, rtol=1e-6)


def k_rank_alone(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(1 + int(ncc.rank_id())))
    nisa.dma_copy(dst=out, src=t)
    return out


def k_python_core_id(a):
    """Uses the core id as a Python int (an ``if`` and ``range`` bounds), as NKI 0.2+ allows."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    c = nl.program_id(0)
    rows = a.shape[0] // nl.num_programs()
    start = int(c) * rows
    t = nl.ndarray((rows, a.shape[1]), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[start:start + rows, :])
    if c == 0:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=-1.0)
    else:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=10.0)
    nisa.dma_copy(dst=out[start:start + rows, :], src=t)
    return out


def test_a_python_use_of_the_core_id_traces_each_core():
    got = _run(k_python_core_id, X)
    np.testing.assert_array_equal(got, np.concatenate([-X[:64], X[64:] + 10.0]))
    text = print_kernel(nki_workbench.nki.trace_kernel(nki.jit(k_python_core_id)[2], X).kernel)
    assert "mask=(pid0 == 0)" in text and "mask=(pid0 == 1)" in text
    assert text.count("alloc out:") == 1  # one shared output for both cores


def k_swap_python_ids(a):
    """k_swap_halves with the core id used as a Python int (traced per core)."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    c = int(nl.program_id(0))
    half = a.shape[1] // 2
    mine = nl.ndarray((128, half), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[:, c * half:(c + 1) * half])
    got = nl.ndarray((128, half), a.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=got, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
    nisa.core_barrier(data=out, cores=(0, 1))
    nisa.dma_copy(dst=out[:, c * half:(c + 1) * half], src=got)
    return out


def test_sendrecv_in_bodies_traced_per_core():
    np.testing.assert_array_equal(_run(k_swap_python_ids, X), _swapped(X))


def test_guarded_instructions_without_outputs_round_trip_through_the_ir_text():
    from nki_workbench._src.ir.parser import parse
    k = nki_workbench.nki.trace_kernel(nki.jit(k_swap_python_ids)[2], X).kernel
    text = print_kernel(k)
    assert "lnc_core_barrier(out) [cores=(0, 1)] mask=(pid0 == 1)" in text
    assert print_kernel(parse(text)) == text


def k_gather_per_core(a, idx):
    """A data-dependent instruction in a body traced for core 0 only must not run on core 1."""
    out = nl.ndarray((128, 16), a.dtype, buffer=nl.shared_hbm)
    c = int(nl.program_id(0))
    if c == 0:
        src = nl.ndarray((128, 2), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=a[:, 0:2])
        ix = nl.ndarray((128, 16), nl.uint16, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx)
        g = nl.ndarray((128, 16), a.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=g, src_buffer=src, index=ix, num_elem_per_idx=1,
                          num_valid_indices=16)
        nisa.dma_copy(dst=out, src=g)
    return out


def test_a_body_guarded_off_computes_nothing_on_the_other_core():
    idx = np.zeros((128, 16), np.uint16)
    got = _run(k_gather_per_core, X, idx)  # core 1 would gather through an unwritten index
    np.testing.assert_array_equal(got, np.repeat(X[:, 0:1], 16, axis=1))
