"""``nl.ndarray(..., address=(partition_offset, free_byte_offset))`` places a tensor (NKI 0.3+).

The placed tensor sits where it says (PSUM: the byte offset names a bank), the allocator places
the other tensors around it, and SBUF capacity is counted at the given addresses: tensors a
kernel places on the same bytes at different times share them, as on hardware.
"""

import inspect as _pyinspect
import warnings

import numpy as np
import pytest
from kernels_current import nisa, nki, nl

from nki_workbench import NkiError
from nki_workbench._src.alloc import allocate
from nki_workbench._src.alloc.allocator import AllocationOverlapWarning
from nki_workbench.ir import parse, print_kernel
from nki_workbench.nki import trace_kernel

A = np.random.default_rng(3).standard_normal((128, 512)).astype(np.float32)


def _line_of(fn, text):
    src, start = _pyinspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if text in s)


def k_placed(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 4096))
    y = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)  # allocated around x
    p = nl.ndarray((128, 512), nl.float32, buffer=nl.psum, address=(0, 3 * 2048))
    nisa.dma_copy(dst=x, src=a)
    nisa.tensor_copy(dst=p, src=x)
    nisa.tensor_scalar(dst=y, data=p, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=y)
    return out


def _by_name(recs):
    return {r.tensor: r for r in recs}


def test_placed_tensors_sit_at_their_address_and_the_rest_around_them():
    k = trace_kernel(nki.jit(k_placed), A).kernel
    res = allocate(k)
    sbuf, psum = _by_name(res.sbuf), _by_name(res.psum)
    x, y, p = sbuf["x"], sbuf["y"], psum["p"]
    assert (x.kind, x.start_partition, x.byte_addr, x.size_bytes) == ("alloc", 0, 4096, 2048)
    assert y.kind == "auto" and not (y.byte_addr < 4096 + 2048 and 4096 < y.byte_addr + 2048)
    assert (p.kind, p.bank, p.byte_addr) == ("alloc", 3, 0)
    np.testing.assert_array_equal(nki.simulate(k_placed)(A), 2.0 * A)


def test_the_placement_is_part_of_the_ir_and_round_trips():
    k = trace_kernel(nki.jit(k_placed), A).kernel
    text = print_kernel(k)
    assert "address" in text and "4096" in text
    assert print_kernel(parse(text)) == text


def k_reuse(a):
    """Phase 1 and phase 2 each hold 200000 B per partition at byte 0: 400000 B if both were
    allocated apart, over SBUF's 245752 B; placed on the same bytes they fit."""
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 200000))
    big1 = nl.ndarray((128, 50000), nl.float32, buffer=nl.sbuf, address=(0, 0))
    nisa.dma_copy(dst=big1[:, 0:512], src=a)
    nisa.tensor_copy(dst=acc, src=big1[:, 0:512])
    big2 = nl.ndarray((128, 50000), nl.float32, buffer=nl.sbuf, address=(0, 0))
    nisa.dma_copy(dst=big2[:, 49488:50000], src=a)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=big2[:, 49488:50000], op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_tensors_placed_on_the_same_bytes_at_different_times_share_them():
    with warnings.catch_warnings():
        warnings.simplefilter("error", AllocationOverlapWarning)
        np.testing.assert_array_equal(nki.simulate(k_reuse)(A), A + A)
    sbuf = _by_name(allocate(trace_kernel(nki.jit(k_reuse), A).kernel).sbuf)
    assert sbuf["big1"].byte_addr == sbuf["big2"].byte_addr == 0


def k_reuse_auto(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    big1 = nl.ndarray((128, 50000), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=big1[:, 0:512], src=a)
    big2 = nl.ndarray((128, 50000), nl.float32, buffer=nl.sbuf)  # AUTO-BIG2
    nisa.dma_copy(dst=big2[:, 0:512], src=a)
    nisa.tensor_tensor(dst=acc, data1=big1[:, 0:512], data2=big2[:, 0:512], op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_without_placement_the_same_sizes_live_together_are_over_capacity():
    with pytest.raises(NkiError) as ei:
        nki.simulate(k_reuse_auto)(A)
    assert ei.value.code == "wb_alloc_oversubscribed"
    assert ei.value.loc.endswith(f"test_current_address.py:{_line_of(k_reuse_auto, 'AUTO-BIG2')}")


def k_overlap(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 0))
    y = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 1024))  # OVERLAP
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=a)
    z = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
    nisa.dma_copy(dst=out, src=z)
    return out


def test_placed_tensors_live_together_on_shared_bytes_warn():
    shared = r"'x' .* and 'y' .* share bytes \[1024, 2048\)"
    with pytest.warns(AllocationOverlapWarning, match=shared):
        nki.simulate(k_overlap)(A)


def k_psum_mid_bank(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, 2048 + 512))  # MID-BANK
    x = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a[:, 0:128])
    nisa.tensor_copy(dst=p, src=x)
    nisa.dma_copy(dst=out[:, 0:128], src=x)
    return out


def k_sbuf_past_the_end(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 245000))  # PAST-END
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=out, src=x)
    return out


def k_bad_address(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=4096)  # NOT-A-PAIR
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=out, src=x)
    return out


@pytest.mark.parametrize("kernel,code,marker,text", [
    (k_psum_mid_bank, "wb_alloc_psum_offset", "MID-BANK", "byte_addr 512 must both be 0"),
    (k_sbuf_past_the_end, "wb_alloc_out_of_capacity", "PAST-END",
     "bytes [245000, 247048) per partition run past the usable SBUF size 245752"),
    (k_bad_address, "wb_alloc_bad_argument", "NOT-A-PAIR", "got 4096"),
], ids=["psum_mid_bank", "sbuf_past_the_end", "not_a_pair"])
def test_invalid_placements_are_errors_at_the_kernel_line(kernel, code, marker, text):
    with pytest.raises(NkiError) as ei:
        nki.simulate(kernel)(A)
    assert ei.value.code == code and text in str(ei.value)
    assert ei.value.loc.endswith(f"test_current_address.py:{_line_of(kernel, marker)}")
