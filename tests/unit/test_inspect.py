"""nki_workbench.inspect(...) -> Inspection: outputs, config, IR, slots, custom calls, summary."""

import numpy as np
import pytest

import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import Inspection, decode_backend_config, inspect, nki
from nki_workbench._src import encode, inspection
from nki_workbench._src.ir import print_kernel
from nki_workbench.nki import NkiError

RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _registries(monkeypatch):
    monkeypatch.setattr(encode, "_DETECTORS", [])
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    encode._detected.cache_clear()
    yield
    encode._detected.cache_clear()


def softmax_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    e = nl.exp(t - nl.max(t, axis=1, keepdims=True))
    nl.store(out, e / nl.sum(e, axis=1, keepdims=True))
    return out


def scale_into(x, y):
    nl.store(y, nl.load(x) * 4.0)


def pair(x):
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(a, t + 1.0)
    nl.store(b, t * t)
    return a, b


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_inspection_holds_outputs_config_and_ir():
    x = _f32(128, 64)
    insp = inspect(nki.jit(softmax_rows, platform_target="trn2"), x)
    assert isinstance(insp, Inspection)
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(insp.outputs, ref, rtol=1e-4, atol=1e-5)
    assert insp.config == decode_backend_config(insp.backend_config)
    assert insp.config["platform_target"] == "trn2" and insp.platform_target == "trn2"
    assert insp.ir == print_kernel(insp.kernel) == insp.config["serialize_ir_string"]
    assert insp.kernel.name == "softmax_rows" and insp.not_simulated is None
    assert insp.outputs.tobytes() == nki.simulate_kernel(
        nki.jit(softmax_rows, platform_target="trn2"), x).tobytes()


def test_inspect_options_override_the_kernel():
    x = _f32(32, 8)

    def rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out[i * 16:(i + 1) * 16, :], nl.load(x[i * 16:(i + 1) * 16, :]) * 2.0)
        return out
    insp = inspect(rows, x, grid=2, platform_target="trn1")
    assert insp.grid == (2,) and insp.config["grid"] == [2]
    np.testing.assert_allclose(insp.outputs, 2 * x, atol=1e-6)
    with pytest.warns(UserWarning, match="Unable to read MLA target"):
        fallback = inspect(rows, x, grid=(2,))
    assert fallback.platform_target_is_fallback and "(fallback)" in repr(fallback)


def test_legacy_kernel_outputs_leave_the_callers_arrays_alone():
    x, y = _f32(16, 8), np.zeros((16, 8), np.float32)
    insp = inspect(scale_into, x, y, platform_target="trn1")
    assert isinstance(insp.outputs, tuple) and len(insp.outputs) == 1
    np.testing.assert_allclose(insp.outputs[0], 4 * x, atol=1e-6)
    assert not y.any()
    assert insp.aliases == {1: 0} and "aliases (operand -> output): 1 -> 0" in repr(insp)


def test_tuple_outputs_and_placeholders():
    x = _f32(16, 8)
    insp = inspect(pair, x, platform_target="trn1")
    np.testing.assert_allclose(insp.outputs[0], x + 1, atol=1e-6)
    np.testing.assert_allclose(insp.outputs[1], x * x, atol=1e-6)
    shapes_only = inspect(pair, nt.tensor[[16, 8], nl.float32], platform_target="trn1")
    assert shapes_only.outputs is None
    assert shapes_only.not_simulated == "placeholder arguments"
    assert shapes_only.backend_config == insp.backend_config
    assert inspect(pair, x, platform_target="trn1", simulate=False).outputs is None


def test_inspect_accepts_framework_tensors():
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    x = _f32(16, 8)
    ref = inspect(pair, x, platform_target="trn1")
    for arg in (torch.from_numpy(x.copy()), jnp.asarray(x)):
        got = inspect(pair, arg, platform_target="trn1")
        assert got.backend_config == ref.backend_config
        assert got.outputs[1].tobytes() == ref.outputs[1].tobytes()
    bf = torch.from_numpy(x).to(torch.bfloat16)
    got = inspect(pair, bf, platform_target="trn1")
    assert got.config["serialize_dims"]["inputs"][0]["dtype"] == "bfloat16"
    np.testing.assert_allclose(got.outputs[0].astype(np.float32),
                               bf.float().numpy() + 1, rtol=1e-2, atol=1e-2)


def test_repr_is_deterministic_plain_text():
    x = _f32(128, 64)
    a = inspect(softmax_rows, x, platform_target="trn1")
    b = inspect(softmax_rows, _f32(128, 64), platform_target="trn1")
    assert repr(a) == repr(b)
    bundle = a._repr_mimebundle_()  # text/plain adds the notebook layer's latency line
    assert bundle["text/plain"].startswith(repr(a) + "\n  latency: ")
    assert {"text/html", "application/vnd.nki-workbench.inspection+json"} <= set(bundle)
    text = repr(a)
    assert text.splitlines()[0] == "Inspection of kernel 'softmax_rows' on trn1, grid []"
    assert "inputs:  x float32[128, 64]" in text
    assert "outputs: out float32[128, 64]" in text
    assert "matmul MACs: 0" in text
    assert f"backend_config: {len(a.backend_config)} base64 characters" in text


def test_model_views_are_explicit_properties_computed_once(monkeypatch):
    from nki_workbench._src.alloc import occupancy
    from nki_workbench._src.sim import timing
    assert not hasattr(inspection, "register_slot")  # plain object: nothing registers into it
    insp = inspect(pair, _f32(8, 8), platform_target="trn1")
    calls = []
    real = timing.timeline

    def counting(kernel, **kwargs):
        calls.append(kernel)
        return real(kernel, **kwargs)
    monkeypatch.setattr(timing, "timeline", counting)
    tl = insp.timeline
    assert calls == [insp.kernel] and insp.timeline is tl
    assert insp.latency_us == tl.latency_us and insp.latency_us > 0
    assert insp.busy_ns == tl.busy_ns and insp.utilization == tl.utilization
    assert insp.sbuf is insp.memory.sbuf and insp.psum is insp.memory.psum
    assert calls == [insp.kernel]  # the memory view reused the kept timeline
    static = occupancy(insp.kernel)
    assert insp.sbuf.peak_bytes_per_partition == static.sbuf.peak_bytes_per_partition > 0
    assert insp.check is None
    insp.memory = "set by the caller"
    assert insp.memory == "set by the caller"
    with pytest.raises(AttributeError):
        insp.nothing_here  # noqa: B018


def test_custom_call_comes_from_the_bridge_module_and_summary_has_memory(monkeypatch):
    import sys
    import types

    from nki_workbench._src import dispatch
    from nki_workbench._src.alloc import occupancy
    monkeypatch.setitem(dispatch.BRIDGE_MODULES, "jax", "nki_workbench._src.no_such_bridge")
    monkeypatch.setitem(dispatch._native_mode_map, "jax", dispatch.JAXKernel)
    insp = inspect(pair, _f32(8, 8), platform_target="trn1")
    with pytest.raises(ValueError, match="unknown framework 'cuda'"):
        insp.custom_call("cuda")
    with pytest.raises(NkiError) as e:
        insp.custom_call("jax")
    assert e.value.code == "wb_bridge_missing"
    fake = types.ModuleType("nki_workbench._src.fake_bridge")
    fake.custom_call_text = lambda i: f"custom_call {i.kernel_name}"
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setitem(dispatch.BRIDGE_MODULES, "jax", fake.__name__)
    assert insp.custom_call("jax") == "custom_call pair"
    sbuf = occupancy(insp.kernel).sbuf
    assert repr(insp).splitlines()[-1].startswith(
        f"  memory: SBUF peak {sbuf.peak_bytes_per_partition} / {sbuf.capacity_bytes} B per "
        "partition (")


def test_inspect_rejects_non_kernels():
    with pytest.raises(TypeError, match="needs an NKI kernel"):
        inspect(42)
