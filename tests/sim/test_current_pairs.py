"""Kernels that exist in both APIs trace to the same IR and simulate to the same outputs."""

import re

import numpy as np
import pytest
from kernels_current import PAIRS, nki

from nki_workbench import inspect
from nki_workbench.ir import print_kernel
from nki_workbench.nki import simulate_kernel, trace_kernel

_LOC = re.compile(r"\s+# \S+:\d+$", re.M)


def _ir(kernel, args):
    text = print_kernel(trace_kernel(kernel, *args).kernel)
    text = _LOC.sub("", text)
    return re.sub(r"^kernel \w+", "kernel K", text)


def _launch(k, grid):
    return k[grid] if grid else k


@pytest.mark.parametrize("name,legacy,current,args,ref,grid", PAIRS, ids=[p[0] for p in PAIRS])
def test_same_ir(name, legacy, current, args, ref, grid):
    assert _ir(_launch(legacy, grid), args) == _ir(_launch(current, grid), args)


@pytest.mark.parametrize("name,legacy,current,args,ref,grid", PAIRS, ids=[p[0] for p in PAIRS])
def test_same_outputs_and_reference(name, legacy, current, args, ref, grid):
    old = simulate_kernel(_launch(legacy, grid), *args)
    new = nki.simulate(_launch(current, grid))(*args)
    np.testing.assert_array_equal(old, new)
    np.testing.assert_allclose(new, ref(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,legacy,current,args,ref,grid", PAIRS[:2],
                         ids=[p[0] for p in PAIRS[:2]])
def test_same_timeline(name, legacy, current, args, ref, grid):
    a = inspect(legacy, *args)
    b = inspect(current, *args)
    assert a.latency_us == pytest.approx(b.latency_us, rel=0, abs=0)
    assert [e.engine for e in a.timeline.events] == [e.engine for e in b.timeline.events]
