"""The PyTorch bridge: dtype maps, HLO custom call, the torch.library op, in-place kernels."""

import re
import subprocess
import sys
import types
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from test_hlo_builder import xla_parse  # noqa: E402

import nki_workbench.nki.language as nl  # noqa: E402
import nki_workbench.nki.typing as nt  # noqa: E402
from nki_workbench import decode_backend_config, inspect, nki  # noqa: E402
from nki_workbench._src import dispatch  # noqa: E402
from nki_workbench._src import dtypes as D  # noqa: E402
from nki_workbench._src.bridges import torch as bridge  # noqa: E402
from nki_workbench.nki import NkiError  # noqa: E402
from nki_workbench.torch import (  # noqa: E402
    DTYPE_OVERRIDE_ENV,
    TORCH_TO_NKI,
    PyTorchXLAKernel,
    build_hlo_module,
    build_xla_type,
    kernel_call_op,
    nki_dtype_to_xla_type_map,
    nki_jit,
    translate_to_neuron_dtype,
)

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _trn1(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    monkeypatch.delenv(DTYPE_OVERRIDE_ENV, raising=False)


def _t(*shape, dtype=torch.float32):
    return torch.from_numpy(RNG.standard_normal(shape).astype(np.float32)).to(dtype)


# ----------------------------------------------------------------------------- kernels
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


def exp_and_square(a):
    e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(e, nl.exp(t))
    nl.store(s, t * t)
    return [e, s]


def axpy(a: nt.mutable_tensor, b, alpha):
    nl.store(a, nl.load(a) + nl.load(b) * alpha)
    return a


def scale_into(a, out):
    nl.store(out, nl.multiply(nl.load(a), 3.0))


def row_tiles(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i * 128:(i + 1) * 128, :], nl.multiply(nl.load(a[i * 128:(i + 1) * 128, :]), 2.0))
    return out


def masked_sum(x, m):
    out = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, nl.where(nl.load(m), nl.load(x), 0) + 1)
    return out


ADD = nki.jit(add, mode="torchxla")


# ----------------------------------------------------------------------------- dtypes
def test_torch_dtype_map_in_full():
    torch_dtypes = {"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "bool", "complex64", "complex128"}
    assert set(TORCH_TO_NKI) == torch_dtypes
    for name, nki_name in TORCH_TO_NKI.items():
        dt = getattr(torch, name)
        if nki_name is None:
            with pytest.raises(NkiError, match=f"torch.{name} tensors cannot be passed") as e:
                translate_to_neuron_dtype(dt)
            assert e.value.code == "wb_unsupported_dtype"
            assert DTYPE_OVERRIDE_ENV in str(e.value)
            continue
        assert translate_to_neuron_dtype(dt) == D.from_name(nki_name)
        # values survive torch -> simulator -> torch exactly
        src = torch.arange(-3, 5).to(dt) if name != "bool" else torch.tensor([True, False])
        arr = bridge.to_numpy(src, nki_name)
        assert arr.dtype == D.storage_dtype(nki_name)
        back = bridge.to_torch(arr, nki_name)
        assert back.dtype == dt and torch.equal(back, src)
    assert translate_to_neuron_dtype(torch.bfloat16) == nl.bfloat16
    with pytest.raises(NkiError, match="float8_e4m3fn .* not supported by neuronxcc"):
        translate_to_neuron_dtype(torch.float8_e4m3fn)
    with pytest.raises(NkiError, match="NKI has no complex types"):
        translate_to_neuron_dtype(torch.complex64)


_SUPPORTED = sorted(k for k, v in TORCH_TO_NKI.items() if v is not None)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(_SUPPORTED), seed=st.integers(0, 2**31 - 1),
       shape=st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_tensor_values_cross_into_the_simulator_and_back_bit_exactly(name, seed, shape):
    bits = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * 8,
                                                 dtype=np.uint8)
    dt = getattr(torch, name)
    raw = torch.from_numpy(bits[: int(np.prod(shape)) * dt.itemsize].copy())
    src = raw.view(dt).reshape(shape) if name != "bool" else (raw.reshape(shape) & 1).bool()
    arr = bridge.to_numpy(src, TORCH_TO_NKI[name])
    assert arr.shape == tuple(shape) and arr.dtype == D.canonical(TORCH_TO_NKI[name])
    back = bridge.to_torch(arr, TORCH_TO_NKI[name])
    assert back.dtype == dt
    assert torch.equal(back.view(torch.uint8), src.view(torch.uint8))  # NaN payloads too


def test_dtype_override_table_from_the_environment(monkeypatch):
    monkeypatch.setenv(DTYPE_OVERRIDE_ENV, "float64=float32, float8_e4m3fn=float8_e4m3,"
                                           "bool=uint8")
    assert translate_to_neuron_dtype(torch.float64) == np.float32
    assert translate_to_neuron_dtype(torch.float8_e4m3fn) == nl.float8_e4m3
    assert translate_to_neuron_dtype(torch.bool) == np.uint8
    assert translate_to_neuron_dtype(torch.float32) == np.float32
    x64 = torch.tensor([[1.0, 1e-50, 1 / 3, -7e5]], dtype=torch.float64)
    arr = bridge.to_numpy(x64, "float32")
    np.testing.assert_array_equal(arr, D.cast(x64.numpy(), "float32"))
    e4 = torch.tensor([1.5, -448.0, 0.0625], dtype=torch.float8_e4m3fn)
    # the NKI cast (round to nearest even; beyond e4m3's range is infinity)
    np.testing.assert_array_equal(bridge.to_numpy(e4, "float8_e4m3").astype(np.float32),
                                  np.array([1.5, -np.inf, 0.0625], np.float32))
    # a float64 tensor now runs (cast to float32 on the way in) and comes back float32
    y = ADD(x64, x64)
    assert y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), (arr + arr), rtol=1e-6)
    for bad in ("float64", "float64=float128", "int4=int8", "float64:float32"):
        monkeypatch.setenv(DTYPE_OVERRIDE_ENV, bad)
        with pytest.raises(NkiError, match="must be 'torch_dtype=nki_dtype'") as e:
            translate_to_neuron_dtype(torch.float64)
        assert e.value.code == "wb_bad_dtype_override"


def test_nki_dtype_to_xla_type_map_in_full():
    assert set(nki_dtype_to_xla_type_map) == set(D.DTYPE_NAMES)
    want = {"bool": "pred", "int8": "s8", "int16": "s16", "int32": "s32", "uint8": "u8",
            "uint16": "u16", "uint32": "u32", "float16": "f16", "float32": "f32",
            "bfloat16": "bf16", "tfloat32": "f32", "float8_e4m3": "f8e4m3",
            "float8_e5m2": "f8e5m2"}
    assert nki_dtype_to_xla_type_map == want
    for name in D.DTYPE_NAMES:
        shape = build_xla_type(D.from_name(name), (4, 2))
        assert shape.text == f"{want[name]}[4,2]{{1,0}}"
    assert PyTorchXLAKernel(add).build_xla_type(nl.bfloat16, [3]).text == "bf16[3]{0}"
    with pytest.raises(TypeError, match="unsupported dtype float64"):
        build_xla_type(np.float64, (1,))


# ----------------------------------------------------------------------------- HLO
def _jax_config(func, *arrays, **opts):
    jax_bridge = pytest.importorskip("nki_workbench._src.bridges.jax")
    jnp = pytest.importorskip("jax.numpy")
    return jax_bridge.JAXKernel(func, **opts).dump_config(
        *[jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in arrays]).backend_config


def test_hlo_custom_call_single_result_matches_jax_config():
    a, b = _t(128, 64), _t(128, 64)
    k = PyTorchXLAKernel(add, platform_target="trn1")
    dumped = k.dump_config(a, b)
    assert dumped.return_types == (((128, 64), torch.float32),)
    text = build_hlo_module(dumped).text
    assert text.startswith("HloModule nki_add, entry_computation_layout={(f32[128,64]{1,0}, "
                           "f32[128,64]{1,0})->f32[128,64]{1,0}}")
    root = [ln for ln in text.splitlines() if "ROOT" in ln][0]
    assert 'custom-call(p0, p1), custom_call_target="AwsNeuronNkiKernel"' in root
    assert "output_to_operand_aliasing" not in root
    config = re.search(r'backend_config="([^"]*)"', root).group(1)
    assert config == dumped.backend_config
    assert config == _jax_config(add, a.numpy(), b.numpy(), platform_target="trn1")
    assert decode_backend_config(config)["func_name"] == "add"
    module, stablehlo = xla_parse(text)
    assert 'custom_call_target="AwsNeuronNkiKernel"' in module.to_string()
    assert "stablehlo.custom_call @AwsNeuronNkiKernel" in stablehlo


def test_hlo_tuple_results_aliasing_and_exclusion():
    k = PyTorchXLAKernel(axpy, platform_target="trn1")
    a, b = _t(128, 32), _t(128, 32)
    dumped = k.dump_config(a, b, 0.5)
    assert dumped.operand_output_aliases == {0: 0}
    root = build_hlo_module(dumped).text.splitlines()[-2]
    assert "ROOT custom-call = f32[128,32]{1,0} custom-call(p0, p1)" in root
    assert "output_to_operand_aliasing={{}: (0, {})}" in root
    assert _jax_config(axpy, a.numpy(), b.numpy(), 0.5, platform_target="trn1") == \
        dumped.backend_config
    xla_parse(build_hlo_module(dumped).text)

    pair = PyTorchXLAKernel(exp_and_square, platform_target="trn1").dump_config(
        _t(128, 16, dtype=torch.bfloat16))
    text = build_hlo_module(pair).text
    assert "(f32[128,16]{1,0}, bf16[128,16]{1,0}) custom-call(p0)" in text
    assert "ROOT tuple = (f32[128,16]{1,0}, bf16[128,16]{1,0}) tuple(out0, out1)" in text
    module, stablehlo = xla_parse(text)
    assert stablehlo.count("get_tuple_element") == 2
    only_s = build_hlo_module(pair, exclude=["e"]).text
    assert "ROOT out1 = bf16[128,16]{1,0} get-tuple-element(custom-call), index=1" in only_s
    xla_parse(only_s)
    with pytest.raises(NkiError, match="every output of kernel 'exp_and_square' is excluded"):
        build_hlo_module(pair, exclude=[0, 1])
    with pytest.raises(NkiError, match=r"cannot exclude \['z'\]: kernel 'exp_and_square' has "
                                       r"outputs e, s"):
        build_hlo_module(pair, exclude=["z"])

    legacy = PyTorchXLAKernel(scale_into, platform_target="trn1").dump_config(
        _t(128, 8), torch.zeros(128, 8))
    assert legacy.operand_output_aliases == {1: 0}
    assert "output_to_operand_aliasing={{}: (1, {})}" in build_hlo_module(legacy).text
    xla_parse(build_hlo_module(legacy).text)


def test_inspection_custom_call_torchxla_without_importing_torch():
    code = ("import sys, numpy as np\n"
            "import nki_workbench.nki.language as nl\n"
            "from nki_workbench import inspect\n"
            "def add(a, b):\n"
            "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
            "    nl.store(out, nl.load(a) + nl.load(b))\n"
            "    return out\n"
            "x = np.ones((128, 4), np.float32)\n"
            "text = inspect(add, x, x, platform_target='trn1').custom_call('torchxla')\n"
            "print('torch' in sys.modules)\n"
            "print(text)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    first, rest = out.split("\n", 1)
    assert first == "False"
    x = np.ones((128, 4), np.float32)
    here = build_hlo_module(inspect(add, x, x, platform_target="trn1").dumped).text

    def masked(text):  # the IR inside the config records each kernel's source file and line
        return re.sub(r'backend_config="[^"]*"', "backend_config=...", text.strip())
    assert masked(rest) == masked(here)
    assert 'custom_call_target="AwsNeuronNkiKernel"' in rest
    config = decode_backend_config(re.search(r'backend_config="([^"]*)"', rest).group(1))
    assert config["serialize_dims"]["inputs"][1] == {"name": "b", "shape": [128, 4],
                                                     "dtype": "float32"}


# ----------------------------------------------------------------------------- execution
def test_results_match_numpy_single_list_grid_and_bf16():
    a, b = _t(128, 64), _t(128, 64)
    np.testing.assert_allclose(ADD(a, b).numpy(), a.numpy() + b.numpy(), atol=1e-6)
    assert nki.jit(add)(a, b).dtype == torch.float32  # auto mode picks the torch bridge
    e, s = nki.jit(exp_and_square, mode="torchxla")(a)
    np.testing.assert_allclose(e.numpy(), np.exp(a.numpy()), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s.numpy(), a.numpy() ** 2, rtol=1e-5, atol=1e-5)
    assert isinstance(nki.jit(exp_and_square, mode="torchxla")(a), list)
    g = _t(384, 32)
    np.testing.assert_allclose(nki.jit(row_tiles, mode="torchxla")[3](g).numpy(),
                               g.numpy() * 2, atol=1e-6)
    hb = _t(128, 16, dtype=torch.bfloat16)
    r = ADD(hb, hb)
    assert r.dtype == torch.bfloat16
    ref = (hb.float().numpy() * 2).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(r.float().numpy(), ref, rtol=1e-2, atol=1e-2)


def test_integer_and_bool_tensors():
    x = torch.arange(128 * 8, dtype=torch.int32).reshape(128, 8) - 500
    m = (torch.arange(128 * 8).reshape(128, 8) % 3) == 0
    got = nki.jit(masked_sum, mode="torchxla")(x, m)
    assert got.dtype == torch.int32
    np.testing.assert_array_equal(got.numpy(), np.where(m.numpy(), x.numpy(), 0) + 1)


def test_in_place_kernels_mutate_the_passed_tensor():
    a, b = _t(128, 32), _t(128, 32)
    a0 = a.clone()
    r = nki.jit(axpy, mode="torchxla")(a, b, 0.5)
    assert r is a
    np.testing.assert_allclose(a.numpy(), a0.numpy() + 0.5 * b.numpy(), atol=1e-6)
    out = torch.zeros(128, 32)
    assert nki.jit(scale_into, mode="torchxla")(b, out) is None
    np.testing.assert_allclose(out.numpy(), 3 * b.numpy(), atol=1e-6)


def test_nki_jit_shim_is_deprecated_and_runs_legacy_kernels():
    with pytest.warns(DeprecationWarning, match="torch_neuronx.nki_jit is deprecated"):
        k = nki_jit(scale_into)
    assert isinstance(k, dispatch.GenericKernel) and k.mode == "torchxla"
    with pytest.warns(DeprecationWarning, match="torch_neuronx.nki_jit is deprecated"):
        k2 = nki_jit(platform_target="trn1")(row_tiles)
    a, out = _t(128, 4), torch.zeros(128, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert k(a, out) is None
    np.testing.assert_allclose(out.numpy(), 3 * a.numpy(), atol=1e-6)
    g = _t(256, 4)
    np.testing.assert_allclose(k2[2](g).numpy(), 2 * g.numpy(), atol=1e-6)


def test_op_passes_opcheck_and_is_a_pure_function_of_the_config():
    op = kernel_call_op()
    assert op is kernel_call_op()
    assert str(torch.ops.nki_workbench.kernel_call.default._schema) == \
        "nki_workbench::kernel_call(str backend_config, Tensor[] inputs) -> Tensor[]"
    a, b = _t(128, 16), _t(128, 16)
    cfg = PyTorchXLAKernel(add, platform_target="trn1").dump_config(a, b).backend_config
    result = torch.library.opcheck(op, (cfg, [a, b]))
    assert set(result.values()) == {"SUCCESS"}, result
    (r,) = torch.ops.nki_workbench.kernel_call(cfg, [a, b])
    np.testing.assert_allclose(r.numpy(), a.numpy() + b.numpy(), atol=1e-6)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fa = mode.from_tensor(a)
        (fr,) = torch.ops.nki_workbench.kernel_call(cfg, [fa, fa])
        assert fr.shape == (128, 16) and fr.dtype == torch.float32
    with pytest.raises(NkiError, match="the kernel takes 2 tensors \\(a, b\\), got 1"):
        op(cfg, [a])
    with pytest.raises(NkiError, match=r"tensor 'b' has shape \[4, 16\]"):
        op(cfg, [a, _t(4, 16)])
    with pytest.raises(NkiError, match="tensor 'a' is torch.bfloat16"):
        op(cfg, [a.bfloat16(), b])


def test_platform_target_from_torch_neuronx(monkeypatch):
    fake = types.ModuleType("torch_neuronx")
    utils = types.ModuleType("torch_neuronx.utils")
    utils.get_platform_target = lambda: "trn2"
    fake.utils = utils
    monkeypatch.setitem(sys.modules, "torch_neuronx", fake)
    monkeypatch.setitem(sys.modules, "torch_neuronx.utils", utils)
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
    k = PyTorchXLAKernel(add)
    assert k.opts.platform_target == "trn2"
    cfg = k.dump_config(_t(128, 4), _t(128, 4)).config
    assert (cfg["platform_target"], cfg["platform_target_is_fallback"]) == ("trn2", False)
    assert PyTorchXLAKernel(add, platform_target="trn1").opts.platform_target == "trn1"
    monkeypatch.setitem(sys.modules, "torch_neuronx", None)  # not installed: the fallback
    monkeypatch.setitem(sys.modules, "torch_neuronx.utils", None)
    monkeypatch.setattr("nki_workbench._src.encode._DETECTORS", [])
    from nki_workbench._src import encode
    encode._detected.cache_clear()
    k = PyTorchXLAKernel(add)
    assert k.opts.platform_target is None
    with pytest.warns(UserWarning, match="Unable to read MLA target"):
        cfg = k.dump_config(_t(128, 4), _t(128, 4)).config
    encode._detected.cache_clear()
    assert (cfg["platform_target"], cfg["platform_target_is_fallback"]) == ("trn1", True)


def test_bad_arguments_name_the_problem():
    with pytest.raises(NkiError, match="torch.float64 tensors cannot be passed"):
        ADD(_t(128, 4).double(), _t(128, 4).double())
    with pytest.raises(NkiError, match="argument\\(s\\) b are not"):
        ADD(_t(128, 4), np.ones((128, 4), np.float32))
    x = _t(128, 4, dtype=torch.float8_e4m3fn)
    with pytest.raises(NkiError, match="float8_e4m3fn") as e:
        ADD(x, x)
    assert e.value.code == "wb_unsupported_dtype"


def test_xla_path_hands_target_config_and_types_to_torch_xla(monkeypatch):
    """The torch-xla call itself is untested (torch-xla cannot be installed here); this checks
    what the bridge hands to torch-xla's custom-call helper."""
    seen = {}

    def stablehlo_custom_call(args, call_target, output_shapes, output_dtypes, **kw):
        seen.update(args=args, target=call_target, shapes=output_shapes, dtypes=output_dtypes,
                    **kw)
        return [torch.empty(s, dtype=d) for s, d in zip(output_shapes, output_dtypes,
                                                          strict=True)]
    mod = types.ModuleType("torch_xla.experimental.stablehlo_custom_call")
    mod.stablehlo_custom_call = stablehlo_custom_call
    for name in ("torch_xla", "torch_xla.experimental"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "torch_xla.experimental.stablehlo_custom_call", mod)
    a = _t(128, 8, dtype=torch.bfloat16)
    dumped = PyTorchXLAKernel(exp_and_square, platform_target="trn1").dump_config(a)
    outs = bridge._xla_custom_call(dumped, [a])
    assert seen["target"] == "AwsNeuronNkiKernel"
    assert seen["backend_config"] == dumped.backend_config
    assert seen["shapes"] == [[128, 8], [128, 8]]
    assert seen["dtypes"] == [torch.float32, torch.bfloat16]
    assert seen["args"][0].dtype == torch.bfloat16 and len(outs) == 2
