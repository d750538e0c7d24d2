"""The scheduler: engine overlap, dependencies on exact regions, DMA queues and engines, PSUM
banks, port conflicts, SPMD cores, critical path, summaries and the Perfetto export."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nki_workbench._src import lang as nl
from nki_workbench._src.hw.cost import cost_target
from nki_workbench._src.runtime import get_traced
from nki_workbench._src.sim.perfetto import check_trace_events
from nki_workbench._src.sim.timing import collect, estimate_latency_us, schedule, timeline

T1 = cost_target("trn1")
LAT_V = 200 / 1.12  # dependency latency on VectorE (assume:dep_latency), ns
DMA_128x512_BF16 = (128 * 512 * 2 + 128 * 256) / 16 / 17  # ns on 16 trn1 DMA engines


def ir(fn, *shapes, dtype=np.float32, grid=()):
    args = [np.zeros(s, dtype=dtype) for s in shapes]
    return get_traced(fn, args, {}, grid=grid).kernel


def ev(tl, op, n=0):
    return [e for e in tl.events if e.op == op][n]


def two_chains(a, b):
    out1 = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    nl.store(out1, value=nl.exp(x))  # ScalarE
    nl.store(out2, value=nl.negative(x))  # VectorE
    return out1, out2


def test_independent_engines_overlap():
    tl = timeline(ir(two_chains, (128, 512), (128, 512)))
    e, n = ev(tl, "exp"), ev(tl, "negative")
    assert (e.track, n.track) == ("Scalar", "Vector")
    assert e.start_ns < n.end_ns and n.start_ns < e.end_ns  # both run at once
    assert e.duration_ns == pytest.approx(512 / 1.4) and n.duration_ns == pytest.approx(512 / 1.12)


def chain(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.negative(x)
    z = nl.negative(y)
    nl.store(out, value=z)
    return out


def test_dependency_serialises_with_semaphore_latency():
    tl = timeline(ir(chain, (128, 512)))
    ld, y, z, st = (ev(tl, "load"), ev(tl, "negative", 0), ev(tl, "negative", 1),
                    ev(tl, "store"))
    assert ld.start_ns == pytest.approx(T1.dma_fixed_ns)  # fixed DMA latency first
    assert y.wait == "raw" and y.after == ld.idx
    assert y.start_ns == pytest.approx(ld.end_ns + LAT_V)
    assert z.wait == "raw" and z.start_ns == pytest.approx(y.end_ns + LAT_V)
    assert st.start_ns == pytest.approx(z.end_ns + T1.dma_fixed_ns)
    assert tl.total_ns == st.end_ns
    assert [e.idx for e in tl.critical_path()] == [ld.idx, y.idx, z.idx, st.idx]
    assert estimate_latency_us(ir(chain, (128, 512))) == pytest.approx(tl.latency_us)


def many_loads(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32)
    for i in nl.sequential_range(17):
        acc[...] = nl.add(acc, nl.load(a[i]))
    nl.store(out, value=acc)
    return out


def test_dma_queues_and_engine_contention():
    tl = timeline(ir(many_loads, (17, 128, 512), dtype=np.dtype("float16")))
    loads = [e for e in tl.events if e.op == "load"]
    assert [e.track for e in loads] == [f"q{i}" for i in range(16)] + ["q0"]
    one = (128 * 512 * 2 + 128 * 256) / 16 / 17 + T1.dma_transfer_gap_ns
    # every load needs all 16 DMA engines: they queue up behind each other
    for i, e in enumerate(loads):
        assert e.end_ns == pytest.approx(T1.dma_fixed_ns + (i + 1) * one)
        assert e.issue_ns == 0.0
    assert [e.wait for e in loads[1:]].count("dma_engine") >= 15


def partition_slices(a):
    out = nl.ndarray((16, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((16, 512), dtype=a.dtype, buffer=nl.sbuf)
    t[0:8, :] = nl.load(a[0:8, :])
    t[8:16, :] = nl.load(a[8:16, :])
    nl.store(out, value=t)
    return out


def test_disjoint_partitions_use_different_dma_engines():
    tl = timeline(ir(partition_slices, (16, 512)))
    l0, l1 = ev(tl, "load", 0), ev(tl, "load", 1)
    assert l0.start_ns == l1.start_ns == pytest.approx(T1.dma_fixed_ns)  # in parallel
    assert l0.duration_ns == pytest.approx((8 * 512 * 4 + 8 * 256) / 17 + T1.dma_transfer_gap_ns)
    st = ev(tl, "store")
    assert st.wait == "raw" and st.start_ns == pytest.approx(max(l0.end_ns, l1.end_ns) + 1300)


def halves(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    t[:, 0:256] = nl.load(a[:, 0:256])
    t[:, 256:512] = nl.exp(nl.load(a[:, 256:512]))
    u = nl.negative(t[:, 0:256])  # reads only the first half
    nl.store(out[:, 0:256], value=u)
    nl.store(out[:, 256:512], value=t[:, 256:512])
    return out


def test_dependencies_follow_exact_regions():
    tl = timeline(ir(halves, (128, 512)))
    first, neg = ev(tl, "load", 0), ev(tl, "negative")
    ex = ev(tl, "exp")
    assert neg.after == first.idx and neg.wait == "raw"
    assert neg.start_ns < ex.end_ns  # does not wait for the other half's producer
    st1 = ev(tl, "store", 1)
    assert st1.start_ns >= ex.end_ns + T1.dma_fixed_ns  # its data comes from exp


def psum_groups(a, b):
    out = nl.ndarray((9, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    for g in nl.affine_range(9):
        ps = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
        ps += nl.matmul(x, y, transpose_x=True)
        nl.store(out[g], value=nl.copy(ps))
    return out


def test_psum_banks_limit_accumulation_groups():
    tl = timeline(ir(psum_groups, (128, 128), (128, 64), dtype=np.dtype("float16")))
    mms = [e for e in tl.events if e.op == "matmul"]
    copies = [e for e in tl.events if e.op == "copy"]
    assert len(mms) == 9 and mms[0].duration_ns == pytest.approx(64 / 2.8)
    # 8 banks: the first 8 groups run back to back, the 9th reuses bank 0 once group 0's copy
    # has drained it (plus the semaphore latency)
    assert all(m.wait in ("raw", "engine") for m in mms[:8])
    for a, b in zip(mms[:7], mms[1:8], strict=True):
        assert b.start_ns == pytest.approx(a.end_ns)
    assert mms[8].wait == "psum_bank" and mms[8].after == copies[0].idx
    assert mms[8].start_ns == pytest.approx(copies[0].end_ns + 200 / 2.8)


def vector_and_gpsimd(a):
    out1 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.rand((128, 512), dtype=nl.float32)  # GpSimd
    f = nl.full((128, 512), 3.0, dtype=nl.float32)  # VectorE memset, independent of r
    nl.store(out1, value=r)
    nl.store(out2, value=f)
    return out1, out2


def test_port_conflict_vector_gpsimd_on_trn1_only():
    k = ir(vector_and_gpsimd, (128, 512))
    tl1 = timeline(k, target="trn1")
    r, m = ev(tl1, "rand"), ev(tl1, "memset")
    assert r.start_ns == 0.0 and m.start_ns == pytest.approx(r.end_ns)  # shared SBUF port
    assert m.wait == "port" and m.after == r.idx
    tl2 = timeline(k, target="trn2")
    r2, m2 = ev(tl2, "rand"), ev(tl2, "memset")
    assert r2.start_ns == m2.start_ns == 0.0  # trn2 lifts it (fp32 memset: no perf mode)


def test_walk_and_simulation_give_the_same_stream():
    k = ir(halves, (128, 512))
    a = schedule(collect(k, simulate=True), "trn1")
    b = schedule(collect(k, simulate=False), "trn1")
    key = [(e.track, e.op, e.start_ns, e.end_ns, e.operands) for e in a.events]
    assert key == [(e.track, e.op, e.start_ns, e.end_ns, e.operands) for e in b.events]


def gather_rows(a, idx):
    out = nl.ndarray((4, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.load(idx)
    rows = nl.load(a[i[nl.arange(4)[:, None], 0], nl.arange(512)[None, :]])
    nl.store(out, value=rows)
    return out


def test_indirect_indices_are_read_from_the_simulated_data():
    args = [np.zeros((64, 512), np.float32), np.array([[7], [3], [40], [9]], np.int32)]
    k = get_traced(gather_rows, args, {}).kernel
    tl = timeline(k, inputs={"a": args[0], "idx": args[1]})
    ld = ev(tl, "load", 1)
    assert "a[3:41" in ld.operands  # exact bounds of the rows actually read
    assert ld.after == ev(tl, "load", 0).idx  # waits for the index tile (RAW)
    assert timeline(k).events[1].operands.startswith("rows[0:4, 0:512] <- a[0, 0:512]")  # zeros


def spmd(a):
    out = nl.ndarray((2, 128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    p = nl.program_id(0)
    x = nl.load(a[p])
    nl.store(out[p], value=nl.exp(x))
    return out


def test_spmd_programs_on_cores():
    k1 = ir(spmd, (2, 128, 512), grid=(2,))
    tl1 = timeline(k1, target="trn1")
    assert tl1.cores == 1 and {e.core for e in tl1.events} == {0}
    tl2 = timeline(k1, target="trn2")
    assert tl2.cores == 2 and {e.core for e in tl2.events} == {0, 1}
    assert "core1/Scalar" in tl2.by_engine()
    single = timeline(k1, target="trn2", cores=1)
    assert tl2.total_ns < single.total_ns


def test_summary_roofline_perfetto_and_plot(tmp_path):
    tl = timeline(ir(psum_groups, (128, 128), (128, 64), dtype=np.dtype("float16")))
    s = tl.summary()
    assert s["estimate"] and s["instructions"] == len(tl.events)
    assert s["rows"]["Tensor"]["count"] == 9
    assert s["rows"]["Tensor"]["busy_ns"] == pytest.approx(9 * 64 / 2.8)
    r = tl.roofline()
    assert r["flops"] == 9 * 2 * 128 * 128 * 64
    assert r["dma_bytes"] == 128 * 128 * 2 + 128 * 64 * 2 + 9 * 128 * 64 * 4
    assert r["ridge"] == pytest.approx(T1.peak_flops() / 272e9)
    assert 0 < r["mfu"] < 1 and r["bound"] in ("compute", "memory")
    assert "Tensor" in tl.report() and tl.tracks()[0] == "q0"
    assert json.loads(json.dumps(s, allow_nan=False))["roofline"]["flops"] == r["flops"]
    trace = tl.to_perfetto()
    check_trace_events(trace)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(tl.events)
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"} >= {
        "Tensor", "Vector", "DMA queue q0"}
    path = tl.save_perfetto(tmp_path / "t.json")
    back = json.loads(open(path).read())
    check_trace_events(back)
    assert back["traceEvents"][-1]["args"]["loc"].endswith(str(tl.events[-1].loc.split(":")[-1]))
    fig = tl.plot()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()][::-1] == tl.tracks()
    fig2 = tl.plot_timeline(start=0, end=tl.total_ns / 2)
    assert fig2.axes[0].get_xlim()[1] == pytest.approx(tl.total_ns / 2000)
    with pytest.raises(ValueError, match="empty"):
        tl.plot(start=10, end=5)


@pytest.mark.parametrize("bad, msg", [
    ({"traceEvents": [{"ph": "X", "name": "a", "ts": -1, "dur": 1, "pid": 0, "tid": 1}]}, "ts"),
    ({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 0, "tid": 1}]},
     "thread_name"),
    ({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {}}]},
     "args.name"),
    ({"events": []}, "traceEvents"),
])
def test_trace_validator_rejects_malformed_traces(bad, msg):
    with pytest.raises(ValueError, match=msg):
        check_trace_events(bad)


@settings(max_examples=300, deadline=None)
@given(st.integers(-20, 20), st.integers(1, 9), st.integers(1, 12),
       st.integers(-20, 20), st.integers(1, 9), st.integers(1, 12))
def test_region_overlap_matches_sets(a0, s0, n0, a1, s1, n1):
    from nki_workbench._src.sim.timing_stream import ap_overlap, regions_overlap
    want = bool(set(range(a0, a0 + s0 * n0, s0)) & set(range(a1, a1 + s1 * n1, s1)))
    assert ap_overlap(a0, s0, n0, a1, s1, n1) == want
    assert regions_overlap(((0, 1, 4), (a0, s0, n0)), ((2, 1, 4), (a1, s1, n1))) == want
