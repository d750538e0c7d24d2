"""The nki.language surface: every public name of NKI 2.26's stub (nki-api.md Appendix A.2)."""

import inspect

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import compat, nki

A2_NAMES = """abs add affine_range all all_reduce arange arctan atomic_rmw bfloat16 bfp16
bitwise_and
bitwise_or bitwise_xor bool_ broadcast_to ceil copy cos device_print divide dropout ds empty_like
equal erf erf_dx exp expand_dims finfo float16 float32 float8_e4m3 float8_e5m2 floor fmod fp32
full gather_flattened gelu gelu_apprx_sigmoid gelu_apprx_tanh gelu_dx gemm_grid
gemm_stationary_grid greater greater_equal hbm int16 int32 int8 invert left_shift less less_equal
load load_transpose2d log logical_and logical_not logical_or logical_xor loop_reduce matmul max
maximum mean mgrid min minimum mish mod multiply nc ndarray negative not_equal num_programs ones
par_dim power private_hbm prod program_id program_ndim psum rand random_seed reciprocal relu
right_shift rms_norm rsqrt sbuf sequential_range shared_constant shared_hbm
shared_identity_matrix sigmoid sign silu silu_dx sin softmax softplus spmd_dim sqrt square
static_cast static_range store subtract sum tan tanh tfloat32 tile_size transpose trunc uint16
uint32 uint8 var where zeros zeros_like""".split()


@pytest.mark.parametrize("name", A2_NAMES)
def test_every_a2_name_exists(name):
    assert hasattr(nl, name), name


def test_no_a2_function_is_a_stub():
    """None of the A.2 functions raises NotImplementedError in its body."""
    for name in A2_NAMES:
        obj = getattr(nl, name)
        if inspect.isfunction(obj):
            assert "NotImplementedError" not in inspect.getsource(obj), name


def test_signatures_keep_nki_keywords():
    sig = inspect.signature(nl.add)
    assert sig.parameters["dtype"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "mask" in sig.parameters
    assert list(inspect.signature(nl.rms_norm).parameters)[:5] == ["x", "w", "axis", "n",
                                                                   "epsilon"]
    assert list(inspect.signature(nl.mod).parameters)[:4] == ["x", "y", "dtype", "mask"]


def test_dtypes_and_constants():
    assert nl.bfloat16 == np.dtype("bfloat16") and nl.float8_e4m3 == np.dtype("float8_e4m3")
    assert nl.tfloat32 == np.dtype("|V4")
    assert np.float32(nl.fp32.min).view(np.uint32) == 0xFF7FFFFF
    assert nl.tile_size.pmax == 128 and nl.tile_size.psum_fmax == 512
    assert nl.tile_size.gemm_stationary_fmax == 128 and nl.tile_size.gemm_moving_fmax == 512
    assert nl.finfo(nl.bfloat16).max == pytest.approx(3.3895314e38, rel=1e-6)
    assert nl.static_cast(np.array([1.00390625]), nl.bfloat16).dtype == nl.bfloat16
    assert nl.hbm is nl.private_hbm and nl.sbuf != nl.psum


def test_tile_size_follows_the_target_being_traced():
    seen = {}

    def k(a):
        seen["sbuf"] = nl.tile_size.total_available_sbuf_size
        out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, 0.0)
        return out

    nki.jit(k, mode="simulation", platform_target="trn2")(np.zeros((1, 1), np.float32))
    assert seen["sbuf"] == 212984


def test_nc_and_spmd_dim_sizes():
    assert int(nl.nc(2)) == 2 and int(nl.spmd_dim(nl.nc(2), 2)) == 4
    assert int(nl.nc(2) * 2) == 4 and int(2 * nl.nc(2)) == 4


def test_gemm_grids():
    seen = {}

    def k(a):
        i_p, i_f = nl.gemm_grid()
        j_p, j_f = nl.gemm_stationary_grid()
        seen["shapes"] = (i_p.shape, i_f.shape, j_f.shape)
        out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, 0.0)
        return out

    nki.simulate_kernel(k, np.zeros((1, 1), np.float32))
    assert seen["shapes"] == ((128, 1), (1, 512), (1, 128))


def test_compat_alias_resolves_neuronxcc_imports():
    compat.install()
    import importlib

    from neuronxcc import nki as alias_nki
    nl2 = importlib.import_module("neuronxcc.nki.language")
    assert alias_nki is nki and nl2 is nl
    for sub in ("isa", "compiler", "typing", "language.constants", "isa.constants"):
        importlib.import_module(f"neuronxcc.nki.{sub}")
    from neuronxcc.nki.isa.constants import dge_mode  # the SDK's dma_transpose doc test
    assert dge_mode is nki.isa.constants.dge_mode
    assert compat.installed()


def test_compat_refuses_when_real_neuronxcc_present(monkeypatch):
    import importlib.util
    import sys
    compat.uninstall()
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "neuronxcc" else None)
    monkeypatch.delitem(sys.modules, "neuronxcc", raising=False)
    try:
        with pytest.raises(RuntimeError, match="real neuronxcc"):
            compat.install()
    finally:
        monkeypatch.undo()
        compat.install()  # other tests import kernels through the alias


def test_placeholders_trace_without_data():
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(nl.load(a)))
        return out

    ir = nki.trace_kernel(k, nki.typing.tensor[[128, 64], nl.bfloat16])
    assert "param a: hbm bfloat16[128, 64] input" in ir.text
