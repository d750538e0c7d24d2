"""nki.jit dispatch: GenericKernel, compute_mode, _native_mode_map and the no-device policy."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench._src import dispatch, encode, runtime
from nki_workbench._src.dispatch import (
    GenericKernel,
    JAXKernel,
    PyTorchXLAKernel,
    _native_mode_map,
    compute_mode,
)
from nki_workbench._src.encode import FrameworkKernel
from nki_workbench._src.runtime import (
    BaremetalKernel,
    BenchmarkKernel,
    NoNeuronDeviceWarning,
    SimulateKernel,
)
from nki_workbench._src.trace.kernel import TRACE_HOOKS
from nki_workbench.nki import NkiError

RNG = np.random.default_rng(1)


@pytest.fixture(autouse=True)
def _no_device(monkeypatch, tmp_path):
    """No compiler on PATH, no instance detection, a fresh one-time warning."""
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NKI_WORKBENCH_STRICT", raising=False)
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    monkeypatch.setattr(encode, "_DETECTORS", [])
    encode._detected.cache_clear()
    monkeypatch.setattr(runtime, "_warned_no_device", False)
    yield
    encode._detected.cache_clear()


def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


def rows_by_program(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    r = i * 3 + j
    nl.store(out[r * 16:(r + 1) * 16, :], nl.load(a[r * 16:(r + 1) * 16, :]) * 2.0)
    return out


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- jit forms
def test_jit_bare_parametrised_and_functional():
    a, b = _f32(128, 32), _f32(128, 32)
    bare = nki.jit(add)
    param = nki.jit(mode="simulation")(add)
    func = nki.jit(add, mode="simulation", platform_target="trn2", additional_compile_opt="-O2")
    assert isinstance(bare, GenericKernel) and bare.mode == "auto"
    assert func.kwargs == {"platform_target": "trn2", "additional_compile_opt": "-O2"}
    assert func.__name__ == "add" and "mode=simulation" in repr(func)
    for k in (param, func):
        np.testing.assert_allclose(k(a, b), a + b, atol=1e-6)
    with pytest.warns(NoNeuronDeviceWarning):
        np.testing.assert_allclose(bare(a, b), a + b, atol=1e-6)
    assert func.concrete(SimulateKernel).options["platform_target"] == "trn2"
    assert nki.jit(nki.jit(add)).func is add


def test_grid_subscript_runs_every_program():
    a = _f32(96, 8)
    k = nki.jit(rows_by_program, mode="simulation")
    out = k[2, 3](a)
    ref = 2 * a   # each of the 6 programs writes its own 16 rows (unwritten rows would be NaN)
    np.testing.assert_allclose(out, ref, atol=1e-6)
    np.testing.assert_allclose(nki.simulate_kernel(k[2, 3], a), ref, atol=1e-6)
    assert k[2, 3].grid == (2, 3) and k.grid == ()


def test_simulate_kernel_and_trace_entry_points_still_work():
    a, b = _f32(16, 8), _f32(16, 8)
    np.testing.assert_allclose(nki.simulate_kernel(add, a, b), a + b, atol=1e-6)
    def double_into(x, y):
        nl.store(y, nl.load(x) * 2.0)
    legacy = nki.trace(double_into)
    y = np.zeros_like(a)
    assert nki.simulate_kernel(legacy, a, y) is None
    np.testing.assert_allclose(y, a * 2, atol=1e-6)
    assert "add" in str(nki.trace_kernel(nki.jit(add), a, b))


# ----------------------------------------------------------------------------- compute_mode
def test_native_mode_map_is_the_contract():
    assert set(_native_mode_map) == {"jax", "torchxla", "baremetal", "benchmark", "simulation"}
    assert _native_mode_map["baremetal"] is BaremetalKernel
    assert _native_mode_map["benchmark"] is BenchmarkKernel
    assert _native_mode_map["simulation"] is SimulateKernel
    for mode in ("jax", "torchxla"):
        assert issubclass(_native_mode_map[mode], FrameworkKernel)
    for mode in ("baremetal", "benchmark", "simulation"):
        assert compute_mode((), {}, mode) is _native_mode_map[mode]


def test_unknown_mode_wording():
    with pytest.raises(ValueError, match="'bogus' passed to nki.jit"):
        compute_mode((), {}, "bogus")
    with pytest.raises(ValueError, match="'cuda' passed to nki.jit"):
        nki.jit(add, mode="cuda")


def test_auto_picks_baremetal_for_numpy_and_nested_values():
    a = _f32(4, 4)
    assert compute_mode((a, 3, "x"), {}, "auto") is BaremetalKernel
    assert compute_mode(([a, {"k": (a,)}],), {"b": a}, "auto") is BaremetalKernel
    assert compute_mode((), {}, "auto") is BaremetalKernel


def test_auto_torch_tensor_selects_pytorch_xla_kernel():
    torch = pytest.importorskip("torch")
    assert compute_mode((torch.ones(2),), {}, "auto") is _native_mode_map["torchxla"]
    assert compute_mode((_f32(2), {"x": [torch.zeros(1)]}), {}, "auto") is \
        _native_mode_map["torchxla"]


def test_auto_jax_array_selects_jax_kernel_only_on_neuron(monkeypatch):
    jax = pytest.importorskip("jax")
    x = jax.numpy.ones(3)
    assert jax.default_backend() != "neuron"
    assert compute_mode((x,), {}, "auto") is BaremetalKernel
    monkeypatch.setattr(jax, "default_backend", lambda: "neuron")
    assert compute_mode((x,), {}, "auto") is _native_mode_map["jax"]
    seen = []

    def f(v):
        seen.append(compute_mode((v,), {}, "auto"))
        return v
    jax.jit(f)(x)  # a tracer
    assert seen == [_native_mode_map["jax"]]


def test_jax_and_torch_are_imported_only_when_present():
    code = ("import sys, numpy as np\n"
            "from nki_workbench._src.dispatch import compute_mode\n"
            "compute_mode((np.ones(2), [1, {'a': np.ones(1)}]), {'k': 2.0}, 'auto')\n"
            "print('jax' in sys.modules, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False"]


def test_bridge_slots_and_registration(monkeypatch):
    monkeypatch.setitem(dispatch.BRIDGE_MODULES, "jax", "nki_workbench._src.no_such_bridge")
    monkeypatch.setitem(_native_mode_map, "jax", JAXKernel)
    with pytest.raises(NkiError) as e:
        nki.jit(add, mode="jax")(_f32(2, 2), _f32(2, 2))
    assert e.value.code == "wb_bridge_missing" and "jax bridge" in str(e.value)

    class MyTorchKernel(FrameworkKernel):
        calls = []

        def __call__(self, *args):
            MyTorchKernel.calls.append(args)
            return "ran"
    monkeypatch.setitem(_native_mode_map, "torchxla", PyTorchXLAKernel)
    monkeypatch.setattr(encode, "FRAMEWORK_CLASSES", [])
    monkeypatch.setattr(dispatch, "FRAMEWORK_CLASSES", encode.FRAMEWORK_CLASSES)
    dispatch.register_mode("torchxla", MyTorchKernel)
    assert compute_mode((), {}, "torchxla") is MyTorchKernel
    assert nki.jit(add, mode="torchxla")(1, 2) == "ran"
    assert encode.FRAMEWORK_CLASSES == [MyTorchKernel]
    with pytest.raises(ValueError):
        dispatch.register_mode("simulation", MyTorchKernel)
    with pytest.raises(TypeError):
        dispatch.register_mode("jax", object)


def test_generic_kernel_memoises_the_concrete_kernel_per_mode():
    seen = []
    TRACE_HOOKS.append(seen.append)
    try:
        k = nki.jit(add, mode="simulation")
        a = _f32(8, 8)
        k(a, a)
        first = k.concrete(SimulateKernel)
        k(a, a)
        k[1](a, a)
        assert k.concrete(SimulateKernel) is first
        assert len(k._kernels) == 2   # grid () and grid (1,)
        assert len(seen) == 2
    finally:
        TRACE_HOOKS.remove(seen.append)


def test_calling_a_jit_kernel_inside_a_kernel_inlines_it():
    def double_tile(t):
        return t * 2.0
    inner = nki.jit(double_tile)

    def outer(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, inner(nl.load(a)))
        return out
    a = _f32(8, 8)
    np.testing.assert_allclose(nki.simulate_kernel(outer, a), 2 * a, atol=1e-6)

    def outer_grid(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, inner[2](nl.load(a)))
        return out
    with pytest.raises(NkiError) as e:
        nki.simulate_kernel(outer_grid, a)
    assert e.value.code == "err_nested_kernel_with_spmd_grid"


# ----------------------------------------------------------------------------- no-device policy
def test_baremetal_without_hardware_warns_once_and_simulates():
    a = _f32(16, 4)
    k = nki.jit(add)
    with pytest.warns(NoNeuronDeviceWarning, match="runs in the CPU simulator") as rec:
        out = k(a, a)
    assert len(rec) == 1 and "NKI_WORKBENCH_STRICT=1" in str(rec[0].message)
    np.testing.assert_allclose(out, 2 * a, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nki.baremetal(add)(a, a), 2 * a, atol=1e-6)


def test_strict_mode_raises_what_nki_would(monkeypatch):
    monkeypatch.setenv("NKI_WORKBENCH_STRICT", "1")
    with pytest.raises(FileNotFoundError, match="neuronx-cc"):
        nki.jit(add)(_f32(4, 4), _f32(4, 4))


def test_numpy_kernel_options_are_checked():
    with pytest.raises(TypeError, match="unknown option.*save_neff_name"):
        nki.jit(add, mode="simulation", save_neff_name="x.neff")(_f32(2, 2), _f32(2, 2))
    assert nki.baremetal(save_neff_name="k.neff")(add).options["save_neff_name"] == "k.neff"
    assert nki.baremetal(nki.jit(add)[2]).grid == (2,)


def test_disable_allocation_opt_is_accepted_as_nki_accepts_it():
    # why: course kernels call nki.baremetal(kernel, disable_allocation_opt=True); the
    # workbench keeps direct allocations as written anyway, so only the bool is checked
    a, b = _f32(4, 8), _f32(4, 8)
    for k in (nki.baremetal(add, disable_allocation_opt=True),
              nki.jit(add, mode="baremetal", disable_allocation_opt=True)):
        opts = k.kwargs if isinstance(k, GenericKernel) else k.options
        assert opts["disable_allocation_opt"] is True
        np.testing.assert_allclose(k(a, b), a + b, rtol=1e-6)
    bench = nki.benchmark(warmup=1, iters=1, disable_allocation_opt=True)(add)
    bench(a, b)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0
    with pytest.raises(TypeError, match="disable_allocation_opt must be True or False"):
        nki.baremetal(add, disable_allocation_opt="yes")


def test_public_names():
    import nki_workbench
    assert nki.FrameworkKernel is FrameworkKernel
    for name in ("jit", "baremetal", "benchmark", "profile", "simulate_kernel", "trace"):
        assert callable(getattr(nki, name)) and name in nki.__all__
    for name in ("inspect", "decode_backend_config", "simulate_backend_config"):
        assert callable(getattr(nki_workbench, name)) and name in nki_workbench.__all__
    assert isinstance(nki.profile(add, working_directory="/tmp"), runtime.ProfileKernel)
