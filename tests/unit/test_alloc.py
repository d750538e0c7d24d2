"""The auto allocator, liveness, over-subscription errors and the occupancy data."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki_workbench.nki.compiler as ncc
import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench._src.alloc import AllocationOverlapWarning, allocate, liveness, occupancy
from nki_workbench._src.errors import NkiError
from nki_workbench._src.hw import get_target
from nki_workbench._src.ir import Access, Alloc, Inst, Kernel, Loop, TensorDecl

HERE = "unit/test_alloc.py"


def trace(k, *args, **kwargs):
    return nki.jit(k, mode="simulation").trace(*args, **kwargs).kernel


def matmul_tiled(lhsT, rhs, out_dtype=nl.float32, mb=1):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=out_dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            res_psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128, directives=ncc.multi_buffer(mb)):
                lhsT_tile = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                lhsT_tile[...] = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                rhs_tile[...] = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                res_psum += nl.matmul(lhsT_tile[...], rhs_tile[...], transpose_x=True)
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=res_sb)
    return result


@pytest.mark.parametrize("dtype,size", [(np.float32, 4), ("bfloat16", 2)])
def test_tiled_matmul_peak_equals_hand_computed(dtype, size):
    import ml_dtypes
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    rng = np.random.default_rng(0)
    a = rng.random((256, 256)).astype(dt)
    b = rng.random((256, 1024)).astype(dt)
    out = nki.simulate_kernel(matmul_tiled, a, b)
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(out, ref, rtol=1e-4 if size == 4 else 1e-2, atol=1e-3)
    occ = occupancy(trace(matmul_tiled, a, b))
    # hand computation: inside the k loop lhsT_tile (128 el) and rhs_tile (512 el) are live
    # together; res_sb (512 fp32 elements) lives after the k loop and reuses that space
    assert occ.sbuf.peak_bytes_per_partition == max(128 * size + 512 * size, 512 * 4)
    assert occ.sbuf.capacity_bytes == 180224
    assert occ.psum.peak_bytes_per_partition == 512 * 4
    assert occ.psum.capacity_bytes == 16384
    sb = {a.tensor: a for a in occ.sbuf.allocations}
    assert (sb["lhsT_tile"].byte_addr, sb["rhs_tile"].byte_addr, sb["res_sb"].byte_addr) == \
        (0, 128 * size, 0)
    assert occ.sbuf.high_water_bytes == occ.sbuf.peak_bytes_per_partition
    ps = occ.psum.allocations
    assert len(ps) == 1 and ps[0].bank == 0 and ps[0].accumulation


def test_multi_buffer_doubles_the_footprint():
    a = np.ones((256, 256), np.float32)
    b = np.ones((256, 1024), np.float32)
    one = occupancy(trace(matmul_tiled, a, b)).sbuf
    two = occupancy(trace(matmul_tiled, a, b, mb=2)).sbuf
    assert two.peak_bytes_per_partition == 2 * one.peak_bytes_per_partition == 2 * 2560
    assert {x.tensor: x.copies for x in two.allocations} == \
        {"lhsT_tile": 2, "rhs_tile": 2, "res_sb": 1}


def test_multi_buffer_context_manager_and_psum_copies():
    def kern(a):
        out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            with ncc.multi_buffer(2):
                t = nl.load(a[i * 128:(i + 1) * 128, :])
                p = nl.matmul(t, t, transpose_x=True)
            nl.store(out[:, i * 128:(i + 1) * 128], value=nl.copy(p))
        return out

    occ = occupancy(trace(kern, np.ones((256, 128), np.float32)))
    t = [x for x in occ.sbuf.allocations if x.tensor == "t"][0]
    assert t.copies == 2 and t.size_bytes == 2 * 128 * 4
    ps = occ.psum.allocations
    assert [(x.name, x.bank) for x in ps] == [("p#0", 0), ("p#1", 1)]


def test_tiles_in_a_loop_live_per_iteration_and_outer_tensors_span_the_loop():
    def kern(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 64), nl.float32)
        for i in nl.affine_range(a.shape[0] // 128):
            x = nl.load(a[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], value=x)
        for j in nl.sequential_range(a.shape[0] // 128):
            y = nl.load(a[j * 128:(j + 1) * 128, :])
            acc[...] = nl.add(acc, y)
        nl.store(out[0:128, :], value=acc)
        return out

    k = trace(kern, np.ones((256, 64), np.float32))
    live = liveness(k).tensors
    assert live["x"].loops == ("i",) and live["x"].start == live["x"].end - 1
    # acc is accessed inside loop j, so it stays live over the whole loop and after it
    assert live["acc"].start == 0 and live["acc"].end == len(liveness(k).insts) - 1
    sb = {x.tensor: x for x in occupancy(k).sbuf.allocations}
    assert sb["x"].byte_addr == sb["y"].byte_addr  # disjoint lifetimes share the space
    assert sb["acc"].byte_addr != sb["y"].byte_addr
    assert occupancy(k).sbuf.peak_bytes_per_partition == 2 * 64 * 4


def oversubscribed(a):
    out = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.shared_hbm)
    t0 = nl.load(a[0])
    t1 = nl.load(a[1])
    t2 = nl.load(a[2])
    t3 = nl.load(a[3])
    t4 = nl.load(a[4])
    t5 = nl.load(a[5])  # the sixth 32 KiB tile does not fit
    s = nl.add(nl.add(nl.add(t0, t1), nl.add(t2, t3)), nl.add(t4, t5))
    nl.store(out, value=s)
    return out


def test_oversubscribed_kernel_error_message():
    with pytest.raises(NkiError) as info:
        trace(oversubscribed, np.ones((6, 128, 8192), np.float32))
    err, text = info.value, str(info.value)
    assert err.code == "wb_alloc_oversubscribed"
    assert "SBUF over-subscribed" in text
    assert "peak 196608 bytes per partition" in text and "capacity 180224" in text
    assert err.loc == f"{HERE}:{_line('the sixth 32 KiB tile')}"
    listed = text.split("largest live tensors")[1]
    assert listed.count("32768 B/partition") == 5
    assert f"{HERE}:{_line('t0 = nl.load')}" in listed or f"{HERE}:{_line('t5 = nl.load')}" in \
        listed
    assert "hint:" in text


def test_oversubscription_counts_multi_buffer_copies():
    def kern(a):
        out = nl.ndarray((4, 128, 16384), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4, directives=ncc.multi_buffer(4)):
            big = nl.load(a[i])
            other = nl.load(a[i])
            nl.store(out[i], value=nl.add(big, other))
        return out

    with pytest.raises(NkiError, match=r"x4 buffers") as info:
        trace(kern, np.ones((4, 128, 16384), np.float32))
    assert info.value.code == "wb_alloc_oversubscribed"


def test_psum_accumulation_groups_limited_to_banks():
    def nine(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        p0 = nl.matmul(t, t, transpose_x=True)
        p1 = nl.matmul(t, t, transpose_x=True)
        p2 = nl.matmul(t, t, transpose_x=True)
        p3 = nl.matmul(t, t, transpose_x=True)
        p4 = nl.matmul(t, t, transpose_x=True)
        p5 = nl.matmul(t, t, transpose_x=True)
        p6 = nl.matmul(t, t, transpose_x=True)
        p7 = nl.matmul(t, t, transpose_x=True)
        p8 = nl.matmul(t, t, transpose_x=True)
        s = nl.add(nl.add(nl.add(p0, p1), nl.add(p2, p3)), nl.add(nl.add(p4, p5),
                                                                  nl.add(p6, p7)))
        nl.store(out, value=nl.add(s, p8))
        return out

    with pytest.raises(NkiError) as info:
        trace(nine, np.ones((128, 128), np.float32))
    assert info.value.code == "wb_alloc_oversubscribed"
    assert "9 accumulation groups" in str(info.value) and "8 banks" in str(info.value)


def test_non_accumulating_psum_tiles_share_a_bank():
    def kern(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        ps = []
        for q in range(4):
            p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
            p[...] = nl.copy(t[:, q * 128:(q + 1) * 128])
            ps.append(p)
        for q in range(4):
            nl.store(out[:, q * 128:(q + 1) * 128], value=ps[q])
        return out

    a = np.random.default_rng(5).random((128, 512), dtype=np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(kern, a), a)
    ps = occupancy(trace(kern, a)).psum.allocations
    assert [(p.bank, p.byte_addr) for p in ps] == [(0, 0), (0, 512), (0, 1024), (0, 1536)]


def test_stack_allocator_bump_pointer_scoped():
    k = ncc.enable_stack_allocator(ncc.skip_middle_end_transformations(
        nki.jit(matmul_tiled, mode="simulation")))
    a = np.random.default_rng(6).random((256, 256), dtype=np.float32)
    b = np.random.default_rng(7).random((256, 1024), dtype=np.float32)
    np.testing.assert_allclose(k(a, b), a.T @ b, rtol=1e-4, atol=1e-3)
    occ = occupancy(k.trace(a, b))
    assert occ.sbuf.strategy == occ.psum.strategy == "stack"
    sb = {x.tensor: x for x in occ.sbuf.allocations}
    assert (sb["lhsT_tile"].byte_addr, sb["rhs_tile"].byte_addr, sb["res_sb"].byte_addr) == \
        (0, 512, 0)
    ir_len = len(liveness(k.trace(a, b).kernel).insts)
    assert sb["res_sb"].live[1] == ir_len - 1  # lives to the end of its (n-loop) block
    assert occ.sbuf.peak_bytes_per_partition == 2560


def test_direct_overlap_warning():
    def kern(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        y = nl.ndarray((128, 512), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
        x[...] = nl.load(a)
        y[...] = nl.load(a)
        x[...] = nl.add(x, y)
        nl.store(out, value=x)
        return out

    with pytest.warns(AllocationOverlapWarning, match=r"'x'.*'y'.*\[1024, 2048\)"):
        trace(kern, np.ones((128, 512), np.float32))


def test_occupancy_per_program_and_rendering():
    def kern(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.exp(t))
        return out

    k = trace(kern, np.ones((256, 64), np.float32)) if False else \
        nki.jit(kern, mode="simulation")[2].trace(np.ones((256, 64), np.float32)).kernel
    whole = occupancy(k)
    p1 = occupancy(k, program=1)
    assert p1.sbuf.program == (1,) and p1.sbuf.allocations == whole.sbuf.allocations
    with pytest.raises(ValueError, match="outside the launch grid"):
        occupancy(k, program=2)
    text = str(p1.sbuf)
    assert "program (1,)" in text and "peak 512 / 180224" in text and "t " in text
    assert p1._repr_mimebundle_()["text/plain"].startswith("SBUF occupancy")
    png1, png2 = whole.to_png(), occupancy(k).to_png()
    assert png1[:8] == b"\x89PNG\r\n\x1a\n" and png1 == png2
    assert b"Software" not in png1 and b"Creation" not in png1
    fig = whole.sbuf.plot()
    assert len(fig.axes[0].patches) == len(whole.sbuf.allocations)
    timed = whole.sbuf.with_times({p: (10.0 * p, 10.0 * p + 5) for p in range(10)})
    first = timed.allocations[0]
    assert first.live_ns == (10.0 * first.live[0], 10.0 * first.live[1] + 5)


# ----------------------------------------------------------------------------- property test
def _kernel(tiles, target="trn1"):
    """Straight-line IR: tile k is written at step s_k and read at step e_k."""
    body, events = [], []
    decls = []
    for k, (pdim, free, s, e) in enumerate(tiles):
        decls.append(TensorDecl(f"t{k}", (pdim, free), "float32", "sbuf", loc=f"x.py:{k}"))
        events.append((s, 0, k))
        events.append((max(s, e), 1, k))
    made = set()
    for _, kind, k in sorted(events):
        d = decls[k]
        if k not in made:
            body.append(Alloc(d))
            made.add(k)
        if kind == 0:
            body.append(Inst("memset", (Access(d.name),), (), (("dtype", "float32"),)))
        else:
            body.append(Inst("exp", (Access(d.name),), (Access(d.name),),
                             (("dtype", "float32"),)))
    return Kernel("prop", (), tuple(body), (), (), target)


TILE = st.tuples(st.sampled_from([128, 96, 64, 48, 32, 16, 1]), st.integers(1, 12000),
                 st.integers(0, 30), st.integers(0, 30))


@settings(max_examples=60, deadline=None)
@given(st.lists(TILE, min_size=1, max_size=14))
def test_auto_allocation_is_a_valid_packing(tiles):
    k = _kernel(tiles)
    tgt = get_target("trn1")
    try:
        res = allocate(k)
    except NkiError as err:
        assert err.code == "wb_alloc_oversubscribed"
        return
    occ = occupancy(k).sbuf
    recs = res.sbuf
    assert len(recs) == len(tiles)
    for r in recs:
        assert 0 <= r.byte_addr and r.byte_addr + r.size_bytes <= tgt.total_available_sbuf_size
        assert r.start_partition in tgt.allowed_start_partitions(r.num_partitions)
    for x in recs:
        for y in recs:
            if x is y or x.live[1] < y.live[0] or y.live[1] < x.live[0]:
                continue
            if x.start_partition + x.num_partitions <= y.start_partition or \
                    y.start_partition + y.num_partitions <= x.start_partition:
                continue
            assert x.byte_addr + x.size_bytes <= y.byte_addr or \
                y.byte_addr + y.size_bytes <= x.byte_addr, (x, y)
    assert occ.peak_bytes_per_partition <= occ.high_water_bytes
    # the peak is the sum of live sizes on the busiest partition (brute force)
    brute = max(sum(r.size_bytes for r in recs if r.live[0] <= p <= r.live[1]
                    and r.start_partition <= q < r.start_partition + r.num_partitions)
                for p in range(occ.num_positions) for q in range(128))
    assert occ.peak_bytes_per_partition == brute


def test_loop_positions_span_whole_loop_for_outer_tensors_in_ir():
    outer = TensorDecl("o", (128, 4), "float32", "sbuf")
    inner = TensorDecl("t", (128, 4), "float32", "sbuf")
    w = (("dtype", "float32"),)
    loop = Loop("i", 0, 4, 1, "affine", (
        Alloc(inner),
        Inst("memset", (Access("t"),), (), w),
        Inst("add", (Access("o"),), (Access("o"), Access("t")), w),
        Inst("exp", (Access("t"),), (Access("t"),), w)))
    k = Kernel("k", (), (Alloc(outer), Inst("memset", (Access("o"),), (), w), loop,
                         Inst("exp", (Access("o"),), (Access("o"),), w)), ())
    lv = liveness(k).tensors
    assert (lv["o"].start, lv["o"].end) == (0, 4)
    assert (lv["t"].start, lv["t"].end) == (1, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert occupancy(k).sbuf.peak_bytes_per_partition == 32


def _line(marker):
    import inspect
    src = inspect.getsource(inspect.getmodule(_line)).splitlines()
    for n, text in enumerate(src, 1):
        if marker in text and "_line(" not in text:
            return n
    raise AssertionError(marker)


def test_inspection_exposes_occupancy():
    import nki_workbench
    a = np.random.default_rng(8).random((256, 256), dtype=np.float32)
    b = np.random.default_rng(9).random((256, 1024), dtype=np.float32)
    insp = nki_workbench.inspect(nki.jit(matmul_tiled, mode="simulation"), a, b,
                                platform_target="trn1")
    np.testing.assert_allclose(insp.outputs, a.T @ b, rtol=1e-4, atol=1e-3)
    assert insp.sbuf.peak_bytes_per_partition == 2560 and insp.sbuf is insp.memory.sbuf
    assert insp.psum.allocations[0].tensor == "res_psum"
    assert "memory: SBUF peak 2560 / 180224 B per partition (auto), PSUM peak 2048 / 16384 B" \
        in repr(insp)


def test_docs_occupancy_script(tmp_path):
    import importlib.util
    import pathlib
    script = pathlib.Path(__file__).parents[2] / "docs" / "make_occupancy_png.py"
    spec = importlib.util.spec_from_file_location("make_occupancy_png", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    one = mod.render(tmp_path / "a.png")
    two = mod.render(tmp_path / "b.png")
    assert one[:8] == b"\x89PNG\r\n\x1a\n" and one == two
    assert (script.parent / "occupancy_tiled_matmul.png").read_bytes()[:8] == one[:8]
