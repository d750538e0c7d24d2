"""Kernels NKI rejects at trace time: each raises NKI's code naming the kernel line.

(The bulk of the err_* codes is pinned in tests/sim/test_errors.py; these are the ones a
reliability probe found we ran anyway.)
"""

import warnings

import numpy as np
import pytest

import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import BlockDimensionWarning, NkiError, nki

A = np.ones((128, 512), np.float32)
IDX = np.zeros((128, 1), np.int32)


def _line(snippet):
    src = open(__file__).read().splitlines()
    return next(k + 1 for k, text in enumerate(src) if snippet in text)


def free_dim_indirect(a, idx):
    out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    it = nl.load(idx)
    nl.store(out, nl.load(a[i_p, it[i_p, 0]]))  # FREE-DIM
    return out


def local_annotation(a, idx):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    x: nt.tensor[128, 128] = nl.load(a)  # ANNOTATED
    nl.store(out, x)
    return out


def param_annotation(a: nt.tensor[128, 128], idx):  # PARAM-ANNOTATED
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out


def while_on_tile(a, idx):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    while t:  # WHILE
        t = nl.add(t, 1.0)
    nl.store(out, t)
    return out


def if_on_tile(a, idx):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    s = nl.load(a)
    if s > 0:  # IF-TILE
        s = nl.add(s, 1.0)
    nl.store(out, s)
    return out


def block_dims(a, idx):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((2, nl.par_dim(128), 512), nl.float32, buffer=nl.sbuf)  # BLOCK
    t[1] = nl.load(a)
    nl.store(out, t[1])
    return out


CASES = [
    (free_dim_indirect, "err_indirect_indices_free_dim", "# FREE-DIM", None),
    (local_annotation, "err_annotation_shape_mismatch", "# ANNOTATED", "'x'"),
    (param_annotation, "err_annotation_shape_mismatch", "# PARAM-ANNOTATED", "'a'"),
    (while_on_tile, "err_while_loop_requires_unconditional_entry", "# WHILE", "while t"),
    (if_on_tile, "err_ambiguous_tensor_truth_value", "# IF-TILE", "'s > 0'"),
]


@pytest.mark.parametrize("kernel,code,marker,names", CASES, ids=[c[0].__name__ for c in CASES])
def test_rejected_at_trace_time_with_code_and_line(kernel, code, marker, names):
    with pytest.raises(NkiError) as info:
        nki.trace_kernel(kernel, A, IDX)
    assert info.value.code == code
    assert info.value.loc.endswith(f"test_rejections.py:{_line(marker)}")
    if names:
        assert names in str(info.value)


def test_if_on_a_tile_names_the_condition_not_a_temporary():
    with pytest.raises(NkiError) as info:
        nki.trace_kernel(if_on_tile, A, IDX)
    assert "'t'" not in str(info.value)


def test_block_dims_warn_deprecated_and_fail_on_trn3():
    with pytest.warns(BlockDimensionWarning, match=f"test_rejections.py:{_line('# BLOCK')}"):
        nki.trace_kernel(block_dims, A, IDX)
    out = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BlockDimensionWarning)
        out = nki.simulate_kernel(block_dims, A, IDX)
    np.testing.assert_array_equal(out, A)  # still runs, as NKI 2.23+ does
    with pytest.raises(NkiError) as info:
        nki.trace_kernel(nki.jit(block_dims, platform_target="trn3"), A, IDX)
    assert info.value.code == "err_leading_dimension_of_tensor_must_be_partition"
    assert info.value.loc.endswith(f"test_rejections.py:{_line('# BLOCK')}")


def test_direct_allocation_keeps_block_dims_quietly():
    import nki_workbench.nki.compiler as ncc

    def k(a, idx):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((2, nl.par_dim(128), 512), nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        t[0] = nl.load(a)
        nl.store(out, t[0])
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(nki.simulate_kernel(k, A, IDX), A)


def test_matching_annotations_and_row_indirection_are_fine():
    def k(a: nt.tensor[128, 512], idx):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        i_f = nl.arange(512)[None, :]
        it = nl.load(idx)
        x: nt.tensor[128, 512] = nl.load(a[it[nl.arange(128)[:, None], 0], i_f])
        nl.store(out, x)
        return out
    a = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = nki.simulate_kernel(k, a, IDX)
    np.testing.assert_array_equal(out, np.broadcast_to(a[0], a.shape))


def annotated_reshape(a):
    out = nl.ndarray((128, 4, 128), nl.float32, buffer=nl.shared_hbm)
    x: nt.tensor[128, 4, 128] = nl.load(a)  # same partitions and elements: a reshape
    nl.store(out, nl.add(x, x[:, 0:1, :]))  # uses the annotated shape
    return out


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_an_annotation_with_the_same_partitions_and_elements_reshapes_the_tile(backend):
    # The SDK's local_gather example annotates a [128, 64, 4] result as tensor[128, 4, 16, 4].
    a = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)
    got = nki.simulate_kernel(nki.jit(annotated_reshape), a,
                              params=nki.SimParams(backend=backend))
    x = a.reshape(128, 4, 128)
    np.testing.assert_allclose(got, x + x[:, 0:1, :], rtol=1e-6)
