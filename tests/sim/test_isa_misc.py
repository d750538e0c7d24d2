"""nki.isa enums and constants, get_nc_version, the engine recorded for every instruction,
builtin_custom_op and the public module surface."""

import numpy as np
import pytest

import nki_workbench.nki.isa as nisa
import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench._src.ir import OPCODES
from nki_workbench.nki.isa import constants

A3 = ["activation", "activation_reduce", "affine_select", "bn_aggr", "bn_stats",
      "builtin_custom_op", "dma_copy", "dma_transpose", "dropout", "get_nc_version", "iota",
      "local_gather", "max8", "memset", "nc_find_index8", "nc_match_replace8", "nc_matmul",
      "nc_stream_shuffle", "nc_transpose", "range_select", "reciprocal",
      "scalar_tensor_tensor", "select_reduce", "sequence_bounds", "tensor_copy",
      "tensor_copy_dynamic_dst", "tensor_copy_dynamic_src", "tensor_copy_predicated",
      "tensor_partition_reduce", "tensor_reduce", "tensor_scalar", "tensor_scalar_reduce",
      "tensor_tensor", "tensor_tensor_scan", "tensor_scalar_cumulative"]


def test_every_appendix_a3_name_is_public_and_callable():
    for name in A3 + ["engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "fp32"]:
        assert hasattr(nisa, name), name
    for name in A3:
        assert callable(getattr(nisa, name))
    for name in A3:
        if name not in ("get_nc_version", "memset", "dropout", "reciprocal"):
            assert name in OPCODES and OPCODES[name].engine in ("tensor", "vector", "scalar",
                                                                "gpsimd", "dma"), name


def test_enum_values_and_aliases():
    assert (nisa.engine.unknown, nisa.engine.tensor, nisa.engine.scalar, nisa.engine.gpsimd,
            nisa.engine.vector, nisa.engine.sync) == (0, 1, 2, 3, 5, 6)
    assert nisa.tensor_engine is nisa.engine.tensor and nisa.vector_engine == 5
    assert nisa.scalar_engine == 2 and nisa.gpsimd_engine == 3 and nisa.unknown_engine == 0
    assert nisa.dma_engine == nisa.engine.dma
    assert [c.value for c in nisa.reduce_cmd][:4] == [0, 1, 2, 3]
    assert [c.name for c in nisa.reduce_cmd] == ["idle", "reset", "reduce", "reset_reduce",
                                                 "load_reduce"]
    assert (nisa.dge_mode.none, nisa.dge_mode.swdge, nisa.dge_mode.hwdge,
            nisa.dge_mode.unknown) == (0, 1, 2, 3)
    assert (nisa.oob_mode.error, nisa.oob_mode.skip) == (0, 1)
    assert nisa.nc_version.gen2 == 2 and nisa.nc_version.gen3 == 3
    bits = np.array(nisa.fp32.min, np.float32).view(np.uint32)
    assert int(bits) == 0xFF7FFFFF and nisa.fp32.min == nl.fp32.min
    assert constants.oob_mode is nisa.oob_mode and constants.engine.tensor == 1


@pytest.mark.parametrize("target, ver", [("trn1", 2), ("trn2", 3), ("trn3", 4)])
def test_get_nc_version_follows_platform_target(target, ver):
    @nki.jit(mode="simulation", platform_target=target)
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        if nisa.get_nc_version() >= nisa.nc_version.gen3:
            x = nisa.tensor_scalar(x, np.add, 1.0)
        nl.store(out, x)
        return out
    a = np.zeros((2, 2), np.float32)
    np.testing.assert_array_equal(k(a), a + (ver >= 3))
    with pytest.raises(nki.NkiError) as e:
        nisa.get_nc_version()
    assert e.value.code == "err_nki_api_outside_of_nki_kernel"


def test_builtin_custom_op_needs_registered_reference():
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.builtin_custom_op("my_cumsum", "libcustom.so", "1.0", "1.0", srcs=[x], dsts=[y])
        nl.store(out, y)
        return out
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(nki.NkiError) as e:
        nki.simulate_kernel(kernel, a)
    assert e.value.code == "wb_custom_op_not_simulatable" and "my_cumsum" in str(e.value)
    nisa.register_custom_op("my_cumsum", lambda x: np.cumsum(x, axis=1))
    try:
        np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), np.cumsum(a, axis=1))
        ir = nki.trace_kernel(kernel, a).kernel
        op = [i for i in ir.body if getattr(i, "op", "") == "builtin_custom_op"][0]
        assert op.attr("engine") == "gpsimd"
    finally:
        from nki_workbench._src.isa.custom import CUSTOM_OPS
        CUSTOM_OPS.pop("my_cumsum")


def test_engine_attribute_is_printed_in_the_ir():
    @nki.jit(mode="simulation")
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        y = nisa.activation(op=nl.exp, data=x)
        z = nisa.tensor_tensor(x, y, op=np.add)
        nl.store(out, nisa.tensor_copy(z, engine=nisa.gpsimd_engine))
        return out
    text = str(nki.trace_kernel(k, np.zeros((4, 4), np.float32)))
    assert "activation(" in text and "engine='scalar'" in text
    assert "engine='vector'" in text and "engine='gpsimd'" in text
