"""Resource limits fail fast (well under a second here) with a clear NkiError and the kernel line.

Trace time: an HBM tensor beyond the target chip's HBM, a static write past an SBUF tile, SBUF
or PSUM tiles live together beyond the partition's capacity (16 KiB / 8 banks of PSUM), also
for a backend_config's IR.
Run time: SimParams(max_bytes=...) (default 1 GiB) refuses a simulation before it allocates.
"""

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import NkiError, SimParams, nki
from nki_workbench._src.hw import get_target
from nki_workbench._src.options import DEFAULT_MAX_BYTES

A = np.ones((128, 512), np.float32)


def _line(snippet):
    src = open(__file__).read().splitlines()
    return next(k + 1 for k, text in enumerate(src) if snippet in text)


def huge_hbm(a):
    out = nl.ndarray((10**6, 10**6), nl.float32, buffer=nl.shared_hbm)  # HUGE
    nl.store(out[0:128, 0:512], nl.load(a))
    return out


def many_hbm(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    for _ in range(3):
        nl.ndarray((2, 2**30), nl.float32, buffer=nl.hbm)  # 8 GiB each
    nl.ndarray((2, 2**30), nl.float32, buffer=nl.hbm)  # TOTAL: 32 GiB + out
    nl.store(out, nl.load(a))
    return out


def scratch(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((40000, 40000), nl.float32, buffer=nl.hbm)  # SCRATCH 6.4 GB
    nl.store(s[0:128, 0:512], nl.load(a))
    nl.store(out, nl.load(s[0:128, 0:512]))
    return out


def write_past_tile(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    t[:, 256:768] = nl.load(a)  # PAST
    nl.store(out, t[:, 0:512])
    return out


def write_past_tile_in_loop(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(3):
        t[:, nl.ds(i * 256, 256)] = nl.load(a[:, 0:256])  # LOOP-PAST
    nl.store(out, t)
    return out


@pytest.mark.parametrize("kernel,code,marker", [
    (huge_hbm, "wb_hbm_capacity", "# HUGE"),
    (many_hbm, "wb_hbm_capacity", "# TOTAL"),
    (write_past_tile, "err_tensor_access_out_of_bound", "# PAST"),
    (write_past_tile_in_loop, "err_tensor_access_out_of_bound", "# LOOP-PAST"),
], ids=["huge_hbm", "hbm_total", "write_past_tile", "write_past_tile_in_loop"])
def test_trace_time_limits(kernel, code, marker):
    with pytest.raises(NkiError) as info:
        nki.trace_kernel(kernel, A)
    assert info.value.code == code
    assert info.value.loc.endswith(f"test_limits.py:{_line(marker)}")


def test_hbm_capacity_is_the_targets():
    assert get_target("trn1").hbm_bytes_per_chip == 32 * 2**30
    assert get_target("trn2").hbm_bytes_per_chip == 96 * 2**30
    with pytest.raises(NkiError, match="32 GiB of HBM of a trn1"):
        nki.trace_kernel(many_hbm, A)
    nki.trace_kernel(nki.jit(many_hbm, platform_target="trn2"), A)  # 32 GiB fit in 96


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_memory_budget_refuses_before_allocating(backend):
    assert SimParams().max_bytes == DEFAULT_MAX_BYTES == 2**30
    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(scratch, A, params=SimParams(backend=backend))
    err = info.value
    assert err.code == "wb_memory_budget"
    assert "'s' [40000, 40000] float32" in str(err) and "max_bytes" in str(err)
    assert err.loc.endswith(f"test_limits.py:{_line('# SCRATCH')}")


def test_memory_budget_is_adjustable():
    small = SimParams(max_bytes=100_000)
    with pytest.raises(NkiError, match="wb_memory_budget"):
        nki.simulate_kernel(_copy_kernel, A, params=small)
    out = nki.simulate_kernel(_copy_kernel, A, params=SimParams(max_bytes=10 * 2**20))
    np.testing.assert_array_equal(out, A)
    with pytest.raises(ValueError):
        SimParams(max_bytes=0)


def test_no_memory_budget_on_request():
    from nki_workbench._src.execution import check_memory, footprint
    from nki_workbench._src.sim.interp import Program
    prog = Program(nki.trace_kernel(scratch, A).kernel)
    assert footprint(prog)[0] > 6 * 10**9  # the 6.4 GB scratch tile (and its mask)
    with pytest.raises(NkiError, match="wb_memory_budget"):
        check_memory(prog, SimParams())
    check_memory(prog, SimParams(max_bytes=None))  # why: checked, not run (it would allocate)


def _copy_kernel(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out


# ----------------------------------------------------------------------------- SBUF/PSUM totals
def sbuf_total(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    big = nl.ndarray((128, 40000), nl.float32, buffer=nl.sbuf)  # 160 000 B per partition
    big2 = nl.ndarray((128, 40000), nl.float32, buffer=nl.sbuf)  # SBUF-TOTAL: both live
    big[:, 0:512] = nl.load(a)
    big2[:, 0:512] = nl.load(a)
    nl.store(out, nl.add(big[:, 0:512], big2[:, 0:512]))
    return out


def psum_total(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    banks = [nl.zeros((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]  # PSUM-TOTAL
    acc = nl.load(a)
    for p in banks:
        acc = nl.add(acc, p)
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("kernel,what,marker", [
    (sbuf_total, "SBUF over-subscribed: peak 320000 bytes per partition live at once, "
     "capacity 180224", "# SBUF-TOTAL"),
    (psum_total, "PSUM over-subscribed: peak 18432 bytes per partition live at once, "
     "capacity 16384", "# PSUM-TOTAL"),
], ids=["sbuf", "psum"])
def test_on_chip_totals_fail_at_trace_time_naming_tensors_and_lines(kernel, what, marker):
    for run in (lambda: nki.trace_kernel(kernel, A), lambda: nki.simulate_kernel(kernel, A)):
        with pytest.raises(NkiError) as info:
            run()
        err = info.value
        assert err.code == "wb_alloc_oversubscribed" and what in str(err)
        line = _line(marker)
        assert err.loc.endswith(f"test_limits.py:{line}")
        listed = str(err).split("largest live tensors")[1]
        assert f"B/partition at reliability/test_limits.py:{line}" in listed


def test_per_tile_limits_still_come_first():
    def one_huge(a):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 50000), nl.float32, buffer=nl.sbuf)  # 200 000 B > 180 224
        t[:, 0:512] = nl.load(a)
        nl.store(out, t[:, 0:512])
        return out
    with pytest.raises(NkiError) as info:
        nki.trace_kernel(one_huge, A)
    assert info.value.code == "err_size_of_dimension_exceed_arch_limit"


def test_backend_config_ir_is_held_to_the_same_totals():
    import base64
    import json
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit"))
    import ir_mutations as M

    from nki_workbench import simulate_backend_config
    cfg = next(c for n, c, _ in M.base_cases() if n == "add")
    # every tile valid alone (92 000 B per partition), two of them live together too many
    text = cfg["serialize_ir_string"].replace("[32, 16]", "[128, 23000]")
    dims = json.loads(json.dumps(cfg["serialize_dims"]).replace("[32, 16]", "[128, 23000]"))
    s = base64.b64encode(json.dumps({**cfg, "serialize_ir_string": text,
                                     "serialize_dims": dims}).encode()).decode()
    a = np.ones((128, 23000), np.float32)
    with pytest.raises(NkiError) as info:
        simulate_backend_config(s, a, a)
    assert info.value.code == "wb_alloc_oversubscribed"
    assert "SBUF over-subscribed" in str(info.value) and "'t_1' 92000 B/partition" in str(
        info.value)
    # the same kernel at [128, 16] fits and runs
    small = cfg["serialize_ir_string"].replace("[32, 16]", "[128, 16]")
    dims = json.loads(json.dumps(cfg["serialize_dims"]).replace("[32, 16]", "[128, 16]"))
    s = base64.b64encode(json.dumps({**cfg, "serialize_ir_string": small,
                                     "serialize_dims": dims}).encode()).decode()
    b = np.full((128, 16), 0.5, np.float32)
    np.testing.assert_allclose(simulate_backend_config(s, b, b), np.exp(b) + b, rtol=1e-6)


# ----------------------------------------------------------------------------- peak, not sum
def unrolled_accumulate(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.sbuf)
    for i in range(16):  # a Python loop: 16 copies of each tile in one block
        t = nl.load(a)
        acc[...] = nl.add(acc, nl.multiply(t, float(i)))
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_memory_budget_counts_the_peak_of_unrolled_tiles(backend):
    from nki_workbench._src import execution

    prog = execution.program_for(nki.trace_kernel(unrolled_accumulate, A).kernel)
    tiles = [d for d in prog.decls.values() if d.kind != "input" and d.base is None]
    summed = sum(int(np.prod(d.shape)) * 5 for d in tiles)  # fp32 + a mask byte
    peak = execution.footprint(prog)[0]
    assert len(tiles) > 16 and summed > 5 * 2**20
    assert peak <= 4 * 128 * 512 * 5 < summed  # acc, out and the live temporaries
    budget = SimParams(backend=backend, max_bytes=peak + 1)
    out = nki.simulate_kernel(unrolled_accumulate, A, params=budget)
    np.testing.assert_allclose(out, A * sum(range(16)), rtol=1e-6)
    with pytest.raises(NkiError, match="wb_memory_budget"):
        nki.simulate_kernel(unrolled_accumulate, A,
                            params=SimParams(backend=backend, max_bytes=peak - 1))


def test_interpreter_frees_dead_unrolled_tiles():
    import tracemalloc

    params = SimParams(backend="numpy")
    nki.simulate_kernel(unrolled_accumulate, A, params=params)  # trace and compile first
    tracemalloc.start()
    try:
        out = nki.simulate_kernel(unrolled_accumulate, A, params=params)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(out, A * sum(range(16)), rtol=1e-6)
    assert peak < 2.5 * 2**20  # 16 unrolled copies kept alive were 5.1 MiB; freed, 1.4 MiB
