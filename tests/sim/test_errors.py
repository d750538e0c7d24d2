"""Trace-time validation: every error names its NKI code and the kernel line."""

import inspect
import os

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import NkiError, nki
from nki_workbench.nki import typing as nt

HERE = os.path.basename(__file__)
A = np.zeros((256, 512), np.float32)
B = np.zeros((128, 512), np.float32)


def line_of(fn, needle):
    src, start = inspect.getsourcelines(fn)
    for k, text in enumerate(src):
        if needle in text:
            return start + k
    raise AssertionError(f"{needle!r} not in {fn.__name__}")


def expect(code, fn, needle, *args, **kwargs):
    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(fn, *args, **kwargs)
    err = info.value
    assert err.code == code, str(err)
    if needle is not None:
        assert f"{HERE}:{line_of(fn, needle)}" in str(err), str(err)
    return err


def k_partition_too_big(a):
    t = nl.ndarray((256, 512), nl.float32)  # HERE
    return t


def test_partition_dim_over_128():
    err = expect("err_num_partition_exceed_arch_limit", k_partition_too_big, "# HERE", A)
    assert "256" in str(err) and "128" in str(err) and "hint" in str(err)


def k_load_too_many_partitions(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)  # HERE
    nl.store(out, t)
    return out


def test_load_of_256_partitions():
    expect("err_num_partition_exceed_arch_limit", k_load_too_many_partitions, "# HERE", A)


def k_sbuf_free_too_big(a):
    t = nl.zeros((128, 50000), nl.float32)  # HERE
    return t


def test_sbuf_tile_over_usable_partition_bytes():
    err = expect("err_size_of_dimension_exceed_arch_limit", k_sbuf_free_too_big, "# HERE", A)
    assert "180224" in str(err)  # trn1 usable SBUF bytes per partition


def test_sbuf_limit_depends_on_target():
    def k(a):
        out = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.zeros((128, 50000), nl.float32)  # 200000 bytes: fits trn2 (212984), not trn1
        nl.store(out, nl.max(t, axis=1, keepdims=True))
        return out
    np.testing.assert_array_equal(nki.jit(k, mode="simulation", platform_target="trn2")(A),
                                  np.zeros((128, 1), np.float32))


def k_psum_too_big(a):
    t = nl.zeros((128, 1024), nl.float32, buffer=nl.psum)  # HERE
    return t


def test_psum_tile_over_one_bank():
    err = expect("err_size_of_dimension_exceed_arch_limit", k_psum_too_big, "# HERE", A)
    assert "PSUM" in str(err)


def k_matmul_contraction(a):
    x = nl.load(a[0:128, 0:64])
    y = nl.load(a[0:64, 0:512])
    r = nl.matmul(x, y, transpose_x=True)  # HERE
    return r


def test_matmul_contraction_on_partition_axis():
    err = expect("err_num_partition_mismatch", k_matmul_contraction, "# HERE", A)
    assert "transpose_x" in str(err)


def k_matmul_stationary(a):
    x = nl.load(a[0:128, 0:256])
    y = nl.load(a[0:128, 0:512])
    r = nl.matmul(x, y, transpose_x=True)  # HERE
    return r


def test_matmul_stationary_free_size():
    err = expect("err_size_of_dimension_exceed_arch_limit", k_matmul_stationary, "# HERE", A)
    assert "gemm_stationary_fmax" in str(err)


def k_matmul_moving(a):
    x = nl.load(a[0:128, 0:128])
    y = nl.ndarray((128, 1024), nl.float32)
    r = nl.matmul(x, y, transpose_x=True)  # HERE
    return r


def test_matmul_moving_free_size():
    err = expect("err_size_of_dimension_exceed_arch_limit", k_matmul_moving, "# HERE",
                 np.zeros((256, 1024), np.float32))
    assert "gemm_moving_fmax" in str(err)


def k_oob_slice(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(3):
        t = nl.load(a[i * 128:(i + 1) * 128, :])  # HERE
        nl.store(out, t)
    return out


def test_out_of_bounds_hbm_slice():
    err = expect("err_tensor_access_out_of_bound", k_oob_slice, "# HERE", A)
    assert "[0, 383]" in str(err) and "256" in str(err)


def k_oob_arange(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(600)[None, :]
    t = nl.load(a[i_p, i_f])  # HERE
    return out


def test_out_of_bounds_arange():
    expect("err_tensor_access_out_of_bound", k_oob_arange, "# HERE", A)


def k_oob_masked(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(600)[None, :]
    t = nl.load(a[i_p, i_f], mask=(i_f < 550))  # HERE
    nl.store(out, t[:, 0:512])
    return out


def test_mask_that_does_not_cover_the_overflow_fails_at_run_time():
    err = expect("err_tensor_access_out_of_bound", k_oob_masked, "# HERE", A)
    assert "run time" in str(err)


def test_mask_that_covers_the_overflow_is_valid():
    def k(a):
        out = nl.ndarray((128, 300), a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(600)[None, :]
        t = nl.load(a[i_p, i_f], mask=(i_f < 300))
        nl.store(out[i_p, i_f], t, mask=(i_f < 300))
        return out

    a = np.arange(256 * 512, dtype=np.float32).reshape(256, 512)
    np.testing.assert_array_equal(nki.simulate_kernel(k, a), a[:128, :300])


def k_partition_reduce(a):
    t = nl.load(a[0:128, :])
    s = nl.sum(t, axis=0)  # HERE
    return s


def test_reduction_over_partition_axis():
    err = expect("wb_partition_axis_reduction", k_partition_reduce, "# HERE", A)
    assert "tensor_partition_reduce" in str(err)


def k_shared_hbm_in_loop(a):
    for i in nl.affine_range(2):
        out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)  # HERE
    return out


def test_shared_hbm_inside_loop():
    expect("err_shared_hbm_must_in_kernel_level", k_shared_hbm_in_loop, "# HERE", A)


def _make_out(a):
    return nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)  # HELPER


def k_shared_hbm_in_helper(a):
    out = _make_out(a)
    return out


def test_shared_hbm_in_helper_function():
    err = expect("err_shared_hbm_must_in_kernel_level", k_shared_hbm_in_helper, None, A)
    assert f"{HERE}:{line_of(_make_out, '# HELPER')}" in str(err)


def k_1d_arange(a):
    t = nl.load(a[nl.arange(128), 0])  # HERE
    return t


def test_1d_arange():
    expect("err_1d_arange_not_supported", k_1d_arange, "# HERE", A)


def k_mixing(a):
    i = nl.arange(128)[:, None]
    t = nl.load(a[i, 0:512])  # HERE
    return t


def test_mixing_basic_and_advanced():
    expect("err_unsupported_mixing_basic_advanced_tensor_indexing", k_mixing, "# HERE", A)


def k_if_on_loop_var(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        if i == 0:  # HERE
            nl.store(out, nl.load(a[0:128, :]))
    return out


def test_python_if_on_loop_variable_is_evaluated_per_iteration():
    # NKI gives a condition on loop variables a meaning (docs/control_flow.md): iteration 0
    # stores, iteration 1 does not
    a = np.arange(256 * 512, dtype=np.float32).reshape(256, 512)
    np.testing.assert_array_equal(nki.simulate_kernel(k_if_on_loop_var, a), a[0:128])


def k_if_on_program_id(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    if nl.program_id(0) == 0:  # HERE
        nl.store(out, nl.load(a[0:128, :]))
    return out


def test_python_if_on_a_program_id_that_varies():
    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(nki.jit(k_if_on_program_id)[2], A)
    err = info.value
    assert err.code == "err_dynamic_control_flow_not_supported", str(err)
    assert f"{HERE}:{line_of(k_if_on_program_id, '# HERE')}" in str(err), str(err)
    assert "mask" in str(err) and "affine_select" in str(err)


def k_if_on_arange(a):
    i = nl.arange(128)[:, None]
    if i < 5:  # HERE
        pass


def test_python_if_on_arange():
    expect("err_control_flow_condition_depending_on_arange", k_if_on_arange, "# HERE", A)


def k_truth_of_tile(a):
    t = nl.load(a[0:128, :])
    if t:  # HERE
        pass


def test_truth_value_of_tile():
    expect("err_ambiguous_tensor_truth_value", k_truth_of_tile, "# HERE", A)


def k_hbm_compute(a):
    e = nl.exp(a)  # HERE
    return e


def test_compute_on_hbm_operand():
    err = expect("err_unsupported_memory", k_hbm_compute, "# HERE", A)
    assert "'hbm'" in str(err)


def k_load_sbuf(a):
    t = nl.load(a[0:128, :])
    u = nl.load(t)  # HERE
    return u


def test_load_from_sbuf():
    err = expect("err_unsupported_memory", k_load_sbuf, "# HERE", A)
    assert "Expected operand 'src' of 'load' to be in address space 'hbm'" in str(err)


def k_hbm_init(a):
    out = nl.zeros((128, 512), nl.float32, buffer=nl.shared_hbm)  # HERE
    return out


def test_hbm_with_init_value():
    expect("err_hbm_tensor_with_init_value_not_supported", k_hbm_init, "# HERE", A)


def k_scope(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
    nl.store(out, t)  # HERE
    return out


def test_tile_used_outside_its_loop():
    expect("err_local_variable_used_out_of_scope", k_scope, "# HERE", A)


def k_immutable(a):
    nl.store(a[0:128, :], nl.zeros((128, 512), nl.float32))  # HERE
    out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, 0.0)
    return out


def test_store_into_immutable_parameter():
    expect("err_cannot_update_immutable_parameter", k_immutable, "# HERE", A)


def k_mutable_not_returned(a: nt.mutable_tensor):
    nl.store(a[0:128, :], nl.zeros((128, 512), nl.float32))  # HERE
    out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, 0.0)
    return out


def test_mutable_parameter_not_returned():
    expect("err_mutable_parameter_not_returned", k_mutable_not_returned, "# HERE", A)


def k_not_written(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)  # HERE
    for i in nl.affine_range(0):
        nl.store(out, nl.load(a[0:128, :]))
    return out


def test_output_never_written():
    expect("err_tensor_output_not_written_to", k_not_written, "# HERE", A)


def k_no_output(a):
    t = nl.load(a[0:128, :])


def test_kernel_without_any_output():
    err = expect("err_tensor_output_not_written_to", k_no_output, None, A)
    assert "k_no_output" in str(err)


def k_dst_smaller(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    small = nl.ndarray((128, 64), nl.float32)
    small[...] = nl.load(a[0:128, :])  # HERE
    return out


def test_assignment_destination_smaller():
    expect("err_store_dst_shape_smaller_than_other_shape", k_dst_smaller, "# HERE", A)


def k_transpose_3d(a):
    t = nl.ndarray((128, 4, 4), nl.float32)
    u = nl.transpose(t)  # HERE
    return u


def test_transpose_of_3d_tile():
    expect("err_exceed_max_supported_dimension", k_transpose_3d, "# HERE", A)


def k_transpose_big(a):
    t = nl.load(a[0:128, :])
    u = nl.transpose(t)  # HERE
    return u


def test_transpose_over_128():
    expect("err_size_of_dimension_exceed_arch_limit", k_transpose_big, "# HERE", A)


def k_block_tile(a):
    t = nl.ndarray((2, nl.par_dim(128), 512), nl.float32)
    u = nl.exp(t)  # HERE
    return u


def test_block_tensor_is_not_a_tile():
    expect("err_failed_to_infer_tile_from_local_tensor", k_block_tile, "# HERE", A)


def k_partition_mismatch(a):
    x = nl.load(a[0:128, :])
    y = nl.load(a[0:64, :])
    z = nl.add(x, y)  # HERE
    return z


def test_partition_mismatch():
    expect("err_num_partition_mismatch", k_partition_mismatch, "# HERE", A)


def k_mask_nonaffine(a):
    i = nl.arange(128)[:, None]
    t = nl.load(a[i, nl.arange(512)[None, :]], mask=(i % 4 < 2))  # HERE
    return t


def test_non_affine_mask():
    expect("err_unsupported_expression_in_mask", k_mask_nonaffine, "# HERE", A)


def k_assign_index(a):
    i = nl.arange(128)[:, None]
    i[0] = 3  # HERE


def test_assign_into_index():
    expect("err_cannot_assign_to_index", k_assign_index, "# HERE", A)


def k_indirect_free(a, idx):
    i_p = nl.arange(128)[:, None]
    it = nl.load(idx)
    t = nl.load(a[i_p, it])  # HERE
    return t


def test_indirect_index_on_free_dim():
    expect("err_indirect_indices_free_dim", k_indirect_free, "# HERE", A,
           np.zeros((128, 4), np.int32))


def k_indirect_sbuf(a, idx):
    it = nl.load(idx)
    t = nl.load(a[0:128, :])
    u = nl.copy(t[it, 0])  # HERE
    return u


def test_indirect_index_on_sbuf():
    expect("err_copy_dynamic_indirect_indices_not_natively_supported", k_indirect_sbuf, "# HERE",
           A, np.zeros((128, 1), np.int32))


def k_indirect_transpose(a, idx):
    it = nl.load(idx)
    t = nl.load_transpose2d(a[it[nl.arange(128)[:, None], 0], nl.arange(64)[None, :]])  # HERE
    return t


def test_indirect_indices_with_load_transpose2d():
    expect("err_indirect_indices_are_not_supported_with_nki_api", k_indirect_transpose, "# HERE",
           A, np.zeros((128, 1), np.int32))


def k_same_location(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        nl.store(out[0:128, :], nl.load(a[i * 128:(i + 1) * 128, :]))  # HERE
    return out


def test_affine_iterations_writing_the_same_output():
    err = expect("err_unexpected_output_dependencies", k_same_location, "# HERE", A)
    assert "sequential_range" in str(err)


def test_nested_kernel_with_grid():
    @nki.jit
    def inner(a):
        out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a[0:128, :]))
        return out

    def outer(a):
        return inner[2](a)

    expect("err_nested_kernel_with_spmd_grid", outer, None, A)


def test_nki_api_outside_kernel():
    with pytest.raises(NkiError) as info:
        nl.load(A)
    assert info.value.code == "err_nki_api_outside_of_nki_kernel"
    assert f"{HERE}:" in str(info.value)


def test_unhashable_constant_argument():
    def k(a, opts):
        out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a[0:128, :]))
        return out

    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(k, A, {"scale": [1, 2]})
    assert info.value.code == "err_nki_param_not_hashable"
    assert "opts_scale" in str(info.value)


def test_float64_input_is_refused_with_the_parameter_name():
    def k(a):
        return a

    with pytest.raises(NkiError) as info:
        nki.simulate_kernel(k, np.zeros((4, 4)))
    assert "'a'" in str(info.value) and "float64" in str(info.value)


def test_assert_shape_annotation_mismatch():
    def k(a):
        t = nl.load(a[0:128, :]).assert_shape((128, 128))  # HERE
        return t

    expect("err_annotation_shape_mismatch", k, "# HERE", A)
