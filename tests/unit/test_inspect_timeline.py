"""The time model's views on an Inspection (issue 8, point 3)."""

import json

import numpy as np

import nki_workbench
import nki_workbench.nki.language as nl
from nki_workbench import SimParams


def k(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], nl.exp(t))
    return out


def test_inspection_timeline_views(tmp_path):
    a = np.zeros((256, 64), np.float32)
    insp = nki_workbench.inspect(k, a)
    tl = insp.timeline
    assert tl is not None and insp.latency_us == tl.latency_us > 0
    assert set(insp.busy_ns()) & {"Act", "ACT", "Scalar", "scalar"} or insp.busy_ns()
    assert insp.roofline()["bound"] in ("compute", "memory")
    assert insp.critical_path()
    path = tmp_path / "trace.json"
    insp.to_perfetto(str(path))
    events = json.loads(path.read_text())
    assert "traceEvents" in events and len(events["traceEvents"]) > 4
    ax = insp.plot_timeline(start=0, end=tl.total_ns / 2)
    assert ax is not None


def test_occupancy_live_ranges_in_ns_from_the_timeline():
    a = np.zeros((256, 64), np.float32)
    insp = nki_workbench.inspect(k, a)
    allocs = insp.sbuf.allocations
    assert allocs and all(x.live_ns is not None for x in allocs)
    for x in allocs:
        start, end = x.live_ns
        assert 0 <= start <= end <= insp.timeline.total_ns


def test_inspect_with_the_compiled_backend_gives_the_same_outputs():
    a = np.arange(256 * 64, dtype=np.float32).reshape(256, 64) / 1000
    ref = nki_workbench.inspect(k, a, params=SimParams(backend="numpy")).outputs
    out = nki_workbench.inspect(k, a, params=SimParams(backend="jax")).outputs
    np.testing.assert_allclose(out, ref, rtol=4 * 2.0**-23)  # XLA's exp: within 4 fp32 ulps
