"""Errors and checks that AWS's simulator leaves to the hardware path are on for ``import nki``
kernels: NkiError with a code and the kernel line (capacity, bounds, memories, enums)."""

import inspect as _pyinspect
import warnings

import numpy as np
import pytest
from kernels_current import nisa, nki, nl

from nki_workbench._src.errors import (
    LoopCarriedDependencyWarning,
    NkiError,
    UninitializedReadWarning,
)

A = np.ones((128, 512), np.float32)


def _line_of(fn, text):
    src, start = _pyinspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if text in s)


def _expect(kernel, code, text, *args):
    with pytest.raises(NkiError) as ei:
        nki.simulate(kernel)(*(args or (A,)))
    assert ei.value.code == code
    assert ei.value.loc.endswith(f"test_current_errors.py:{_line_of(kernel, text)}")
    return ei.value


def k_psum_nine_banks(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    banks = []
    for _ in range(9):
        p = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)  # PSUM-BANK
        nisa.tensor_copy(dst=p, src=x)
        banks.append(p)
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=acc, src=banks[0])
    for p in banks[1:]:
        nisa.tensor_tensor(dst=acc, data1=acc, data2=p, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out




def k_sbuf_too_big(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    big = nl.ndarray((128, 70000), nl.float32, buffer=nl.sbuf)  # TOO-BIG
    nisa.dma_copy(dst=big[:, 0:512], src=a)
    nisa.dma_copy(dst=out, src=big[:, 0:512])
    return out


def k_sbuf_full(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    tiles = []
    for _ in range(3):  # 3 x 100000 B per partition live together: over SBUF's 245752 B
        t = nl.ndarray((128, 25000), nl.float32, buffer=nl.sbuf)  # SBUF-FULL
        nisa.dma_copy(dst=t[:, 0:512], src=a)
        tiles.append(t)
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=acc, data1=tiles[0][:, 0:512], data2=tiles[1][:, 0:512], op=nl.add)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=tiles[2][:, 0:512], op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


# why: AWS's simulator runs each of these (it allocates every tensor independently); ours
# refuses them from either entry point, naming the kernel line in the message itself
ENTRY_POINTS = {"simulate": lambda k, *a: nki.simulate(k)(*a),
                "jit_call": lambda k, *a: nki.jit(k)(*a)}
CAPACITY = [
    ("psum_nine_banks", k_psum_nine_banks, "wb_alloc_oversubscribed", "# PSUM-BANK",
     "PSUM over-subscribed"),
    ("sbuf_tile_too_big", k_sbuf_too_big, "err_size_of_dimension_exceed_arch_limit",
     "# TOO-BIG", "70000"),
    ("sbuf_tiles_over_capacity", k_sbuf_full, "wb_alloc_oversubscribed", "# SBUF-FULL",
     "SBUF over-subscribed: peak 300000 bytes per partition live at once, capacity 245752"),
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("name,kernel,code,marker,text", CAPACITY, ids=[c[0] for c in CAPACITY])
def test_capacity_errors_name_the_kernel_line(entry, name, kernel, code, marker, text):
    with pytest.raises(NkiError) as ei:
        ENTRY_POINTS[entry](kernel, A)
    where = f"test_current_errors.py:{_line_of(kernel, marker)}"
    assert ei.value.code == code
    assert ei.value.loc.endswith(where)
    msg = str(ei.value)
    assert msg.startswith(f"[{code}]") and f"{where})" in msg and text in msg


def k_psum_tile_over_a_bank(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)  # OVER-BANK
    nisa.dma_copy(dst=out, src=a)
    return out


def test_psum_tile_over_one_bank_is_an_error():
    _expect(k_psum_tile_over_a_bank, "err_size_of_dimension_exceed_arch_limit", "# OVER-BANK")


def k_partitions(a):
    out = nl.ndarray((256, 4), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((256, 4), nl.float32, buffer=nl.sbuf)  # PARTS
    nisa.dma_copy(dst=out, src=t)
    return out


def test_more_than_128_partitions_is_an_error():
    _expect(k_partitions, "err_num_partition_exceed_arch_limit", "# PARTS")


def k_oob(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(2):
        nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128, :])  # OOB
    nisa.dma_copy(dst=out, src=t)
    return out


def test_out_of_bounds_access_is_an_error():
    _expect(k_oob, "err_tensor_access_out_of_bound", "# OOB")


def k_dma_from_psum(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    nisa.dma_copy(dst=out, src=p)  # FROM-PSUM
    return out


def test_dma_cannot_read_psum():
    _expect(k_dma_from_psum, "err_unsupported_memory", "# FROM-PSUM")


def k_matmul_into_sbuf(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    d = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(dst=d, stationary=x[:, 0:128], moving=x)  # MM-SBUF
    nisa.dma_copy(dst=out, src=d)
    return out


def test_matmul_destination_must_be_psum():
    _expect(k_matmul_into_sbuf, "err_unsupported_memory", "# MM-SBUF")


def k_raw_enum(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a, dge_mode=7)  # RAW-ENUM
    return out


def test_values_outside_an_enum_are_refused():
    e = _expect(k_raw_enum, None, "# RAW-ENUM")
    assert "dge_mode" in str(e)


def k_result_not_dst(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    nisa.memset(dst=3, value=0.0)  # NOT-DST
    return out


def test_destination_must_be_a_tensor():
    _expect(k_result_not_dst, None, "# NOT-DST")


def k_memset_type(a):
    out = nl.ndarray((128, 512), nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=2.5)  # MEMSET-TYPE
    nisa.dma_copy(dst=out, src=t)
    return out


def test_memset_value_must_match_the_dtype():
    _expect(k_memset_type, None, "# MEMSET-TYPE")


def test_platform_target_keyword_and_grids_are_refused():
    with pytest.raises(NkiError, match="NEURON_PLATFORM_TARGET_OVERRIDE"):
        nki.jit(k_oob, platform_target="trn2")
    with pytest.raises(NkiError, match="LNC degree"):
        nki.jit(k_oob)[2, 2]


def k_uninit(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, 0:256], src=a[:, 0:256])
    u = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=u)
    return out


def test_uninitialised_reads_warn_by_default():
    with pytest.warns(UninitializedReadWarning):
        out = nki.simulate(k_uninit)(A)
    assert np.isnan(out[:, 256:]).all() and (out[:, :256] == 2.0).all()


def k_race(a):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for i in nl.affine_range(4):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_affine_range_races_are_detected_by_default():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        nki.simulate(k_race)(A)
    assert any(issubclass(x.category, LoopCarriedDependencyWarning) for x in w)
