"""Resource limits fail fast (well under a second here) with a clear NkiError and the kernel line.

Trace time: an HBM tensor beyond the target chip's HBM, a static write past an SBUF tile.
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


def _copy_kernel(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out
