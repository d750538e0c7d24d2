"""The backend_config contract: keys, encoding, decode, aliases, cache, target, round trip."""

import base64
import json
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import decode_backend_config, nki, simulate_backend_config
from nki_workbench._src import encode as enc
from nki_workbench._src.encode import (
    CONFIG_KEYS,
    KERNEL_VERSION,
    LegacyFrameworkKernel,
    UnifiedKernel,
    matmul_mac_count,
)
from nki_workbench._src.ir import parse, print_kernel
from nki_workbench._src.trace.kernel import TRACE_HOOKS
from nki_workbench.nki import NkiError

RNG = np.random.default_rng(0)
KEYS = {"kernel_version", "func_name", "grid", "has_collectives", "matmul_mac_count",
        "platform_target", "platform_target_is_fallback", "opts", "serialize_dims",
        "serialize_ir_string", "tiled", "constant_values", "kernel_return",
        "result_is_sequence"}


@pytest.fixture(autouse=True)
def _known_target(monkeypatch):
    """No instance detection: the fallback is decided per test."""
    monkeypatch.setattr(enc, "_DETECTORS", [])
    enc._detected.cache_clear()
    monkeypatch.delenv(enc.PLATFORM_ENV, raising=False)
    yield
    enc._detected.cache_clear()


# ----------------------------------------------------------------------------- test kernels
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


def tiled_matmul(a_t, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        at = nl.load(a_t[k * 128:(k + 1) * 128, :])
        bt = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nl.matmul(at, bt, transpose_x=True)
    nl.store(out, acc)
    return out


def legacy_scale(a, out):
    nl.store(out, nl.multiply(nl.load(a), 3.0))


def mutable_inc(a: nt.mutable_tensor, b):
    nl.store(a, nl.load(a) + nl.load(b))
    return a


def two_outputs(a):
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(s, t * t)
    nl.store(e, nl.exp(t))
    return s, e


def list_output(a):
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(s, nl.load(a) - 1.0)
    return [s]


def spmd_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i * 32:(i + 1) * 32, :], nl.load(a[i * 32:(i + 1) * 32, :]) * 2.0)
    return out


def scaled(a, factor, bias=1.0):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) * factor + bias)
    return out


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# (name, kernel, grid, args, kwargs, numpy reference of the outputs)
def _cases():
    a, b = _f32(128, 64), _f32(128, 64)
    at, bm = _f32(256, 128), _f32(256, 512)
    g = _f32(128, 32)
    bf = _f32(64, 32).astype(ml_dtypes.bfloat16)
    return [
        ("add", add_kernel, (), (a, b), {}, [a + b]),
        ("matmul", tiled_matmul, (), (at, bm), {}, [at.T @ bm]),
        ("legacy", legacy_scale, (), (a, np.zeros_like(a)), {}, [a * 3]),
        ("mutable", mutable_inc, (), (a.copy(), b), {}, [a + b]),
        ("tuple", two_outputs, (), (g,), {}, [g * g, np.exp(g)]),
        ("list", list_output, (), (g,), {}, [g - 1]),
        ("spmd", spmd_rows, (4,), (g,), {}, [g * 2]),
        ("constants", scaled, (), (a, 0.5), {"bias": 2.0}, [a * 0.5 + 2]),
        ("bf16", add_kernel, (), (bf, bf), {},
         [(bf.astype(np.float32) * 2).astype(ml_dtypes.bfloat16)]),
    ]


CASES = _cases()


def _copy_args(args):
    return tuple(x.copy() if isinstance(x, np.ndarray) else x for x in args)


def _dump(func, *args, grid=(), **kwargs):
    return UnifiedKernel(func, grid=grid, platform_target="trn1").dump_config(*args, **kwargs)


def _outputs(result, args, traced):
    """Outputs as a list (legacy: the written output arguments)."""
    if result is None:
        by = dict(zip([d.name for d in traced.kernel.params],
                      [x for x in args if isinstance(x, np.ndarray)], strict=True))
        return [by[n] for n in traced.kernel.outputs]
    return list(result) if isinstance(result, (tuple, list)) else [result]


# ----------------------------------------------------------------------------- encoding
def test_exact_key_set_and_plain_base64_json():
    a, b = _f32(128, 64), _f32(128, 64)
    d = _dump(add_kernel, a, b)
    cfg = json.loads(base64.b64decode(d.backend_config))
    assert set(cfg) == KEYS and len(cfg) == 14 and tuple(cfg) == CONFIG_KEYS
    assert cfg["kernel_version"] == KERNEL_VERSION
    assert cfg["func_name"] == "add_kernel"
    assert cfg["platform_target"] == "trn1" and cfg["platform_target_is_fallback"] is False
    assert cfg["serialize_ir_string"] == print_kernel(d.traced.kernel)
    assert cfg["serialize_dims"]["inputs"] == [
        {"name": "a", "shape": [128, 64], "dtype": "float32"},
        {"name": "b", "shape": [128, 64], "dtype": "float32"}]
    assert cfg["kernel_return"] is True and cfg["result_is_sequence"] is False
    assert cfg["has_collectives"] is False and cfg["tiled"] is False
    assert decode_backend_config(d.backend_config) == cfg == d.config


def test_config_records_opts_constants_grid_and_sequences():
    a = _f32(128, 32)
    k = UnifiedKernel(scaled, platform_target="trn2", additional_compile_opt="-O1", flag=3)
    cfg = k.dump_config(a, 0.25, bias=-1.0).config
    assert cfg["opts"] == {"platform_target": "trn2", "additional_compile_opt": "-O1",
                           "flag": 3}
    assert cfg["constant_values"] == [["factor", 0.25], ["bias", -1.0]]
    assert cfg["platform_target"] == "trn2"
    cfg = UnifiedKernel(spmd_rows, grid=(4,), platform_target="trn1").dump_config(a).config
    assert cfg["grid"] == [4] and cfg["tiled"] is True
    cfg = _dump(two_outputs, a).config
    assert cfg["result_is_sequence"] is True and cfg["kernel_return"] is True
    cfg = _dump(legacy_scale, a, np.zeros_like(a)).config
    assert cfg["kernel_return"] is False and cfg["result_is_sequence"] is False


def test_has_collectives_reaches_the_config():
    def reduce_all(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.all_reduce(nl.load(a), np.add, program_axes=0))
        return out
    cfg = UnifiedKernel(reduce_all, grid=(2,), platform_target="trn1").dump_config(
        _f32(128, 8)).config
    assert cfg["has_collectives"] is True


def test_matmul_mac_count_counts_loop_trips_and_programs():
    at, bm = _f32(256, 128), _f32(256, 512)
    d = _dump(tiled_matmul, at, bm)
    assert d.config["matmul_mac_count"] == 2 * 128 * 128 * 512
    gridded = UnifiedKernel(tiled_matmul, grid=(3,), platform_target="trn1").dump_config(at, bm)
    assert matmul_mac_count(gridded.traced.kernel) == 3 * 2 * 128 * 128 * 512
    assert _dump(add_kernel, _f32(8, 8), _f32(8, 8)).config["matmul_mac_count"] == 0


def test_nested_loops_multiply_trip_counts():
    def nested(a_t, b):
        out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((64, 32), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(3):
            for j in nl.sequential_range(2):
                acc += nl.matmul(nl.load(a_t[0:16, :]), nl.load(b[0:16, :]), transpose_x=True)
        nl.store(out, acc)
        return out
    d = _dump(nested, _f32(16, 64), _f32(16, 32))
    assert d.config["matmul_mac_count"] == 3 * 2 * (64 * 32 * 16)


def test_encode_rejects_a_wrong_key_set():
    cfg = dict(_dump(add_kernel, _f32(4, 4), _f32(4, 4)).config)
    cfg["extra"] = 1
    with pytest.raises(ValueError, match="unexpected: extra"):
        enc.encode_backend_config(cfg)


# ----------------------------------------------------------------------------- decode
def _b64(obj) -> str:
    return base64.b64encode(json.dumps(obj).encode()).decode()


def test_decode_errors_name_the_problem():
    good = _dump(add_kernel, _f32(4, 4), _f32(4, 4)).config
    with pytest.raises(ValueError, match="not valid base64"):
        decode_backend_config("@@@")
    with pytest.raises(ValueError, match="does not hold JSON"):
        decode_backend_config(base64.b64encode(b"{not json").decode())
    with pytest.raises(ValueError, match="missing: grid"):
        decode_backend_config(_b64({k: v for k, v in good.items() if k != "grid"}))
    with pytest.raises(ValueError, match="unexpected: zzz"):
        decode_backend_config(_b64({**good, "zzz": 0}))
    with pytest.raises(ValueError, match="'tiled' must be bool"):
        decode_backend_config(_b64({**good, "tiled": 1}))
    with pytest.raises(ValueError, match="kernel_version 99"):
        decode_backend_config(_b64({**good, "kernel_version": 99}))
    with pytest.raises(ValueError, match="must be a JSON object"):
        decode_backend_config(_b64([1, 2]))
    with pytest.raises(TypeError):
        decode_backend_config(12)
    assert decode_backend_config(_b64(good).encode()) == good


_B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_garbage = st.one_of(
    st.text(max_size=64),
    st.text(alphabet=_B64_ALPHABET, max_size=96),
    st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()),
)


# why: 100 examples x 100 strings = 10 000 garbage strings at a fraction of the per-example cost
@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(_garbage, min_size=100, max_size=100))
def test_decode_of_10000_garbage_strings_raises_only_value_error(batch):
    for s in batch:
        try:
            decode_backend_config(s)
        except ValueError:
            pass


_VALUES = st.none() | st.booleans() | st.integers() | st.text(max_size=4) | st.lists(
    st.integers(min_value=-2, max_value=4), max_size=3) | st.dictionaries(
    st.text(max_size=3), st.integers(), max_size=2)
_GOOD = None


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(drop=st.sets(st.sampled_from(CONFIG_KEYS), max_size=2),
       change=st.dictionaries(st.sampled_from(CONFIG_KEYS + ("zz",)), _VALUES, max_size=3))
def test_decode_of_mutated_configs_raises_only_value_error(drop, change):
    global _GOOD
    if _GOOD is None:
        _GOOD = _dump(add_kernel, _f32(4, 4), _f32(4, 4)).config
    cfg = {k: v for k, v in _GOOD.items() if k not in drop}
    cfg.update(change)
    try:
        back = decode_backend_config(_b64(cfg))
    except ValueError:
        return
    assert back == cfg and set(back) == KEYS


# ----------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_simulate_backend_config_equals_simulating_the_trace(case):
    name, func, grid, args, kwargs, ref = case
    direct_args, config_args = _copy_args(args), _copy_args(args)
    kernel = nki.jit(func, mode="simulation")[grid] if grid else nki.jit(func, mode="simulation")
    direct = nki.simulate_kernel(kernel, *direct_args, **kwargs)
    d = UnifiedKernel(func, grid=grid, platform_target="trn1").dump_config(*args, **kwargs)
    arrays = [x for x in config_args if isinstance(x, np.ndarray)]
    back = simulate_backend_config(d.backend_config, *arrays)
    got_direct = _outputs(direct, direct_args, d.traced)
    got_back = _outputs(back, arrays, d.traced)
    assert type(back) is type(direct)
    for x, y, r in zip(got_direct, got_back, ref, strict=True):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(r, np.float32),
                                   rtol=1e-2, atol=1e-2)


def test_config_alone_rebuilds_the_kernel_without_calling_python():
    calls = []

    def counted(a, b):
        calls.append(1)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) + nl.load(b))
        return out
    a, b = _f32(128, 16), _f32(128, 16)
    s = _dump(counted, a, b).backend_config
    assert calls == [1]
    out = simulate_backend_config(s, a, b)
    assert calls == [1]
    np.testing.assert_allclose(out, a + b, atol=1e-6)
    assert parse(decode_backend_config(s)["serialize_ir_string"]) == \
        _dump(counted, a, b).traced.kernel


def test_simulate_backend_config_checks_its_arrays():
    a = _f32(8, 8)
    s = _dump(add_kernel, a, a).backend_config
    with pytest.raises(NkiError, match="takes 2 tensors"):
        simulate_backend_config(s, a)
    with pytest.raises(NkiError, match="numpy arrays"):
        simulate_backend_config(s, a, [1])


# ----------------------------------------------------------------------------- aliases
def test_aliases_for_an_output_argument_kernel():
    a = _f32(128, 8)
    d = _dump(legacy_scale, a, np.zeros_like(a))
    assert d.operand_output_aliases == {1: 0}
    assert d.input_names == ("a", "out") and d.output_names == ("out",)
    assert d.kernel_return is False
    legacy = LegacyFrameworkKernel(legacy_scale, platform_target="trn1")
    shape_only = type("ShapeDtype", (), {"shape": (128, 8), "dtype": np.dtype(np.float32)})()
    assert legacy.dump_config(a, shape_only).operand_output_aliases == {1: 0}
    with pytest.raises(NkiError, match="returns its outputs"):
        LegacyFrameworkKernel(add_kernel, platform_target="trn1").dump_config(a, a)


def test_aliases_for_a_mutable_parameter_and_none_for_fresh_outputs():
    a, b = _f32(64, 8), _f32(64, 8)
    assert _dump(mutable_inc, a, b).operand_output_aliases == {0: 0}
    assert _dump(add_kernel, a, b).operand_output_aliases == {}
    d = _dump(two_outputs, a)
    assert d.operand_output_aliases == {}
    assert [(s, np.dtype(t).name) for s, t in d.return_types] == [((64, 8), "float32")] * 2


# ----------------------------------------------------------------------------- cache
@pytest.fixture
def trace_count():
    seen = []
    hook = seen.append
    TRACE_HOOKS.append(hook)
    yield seen
    TRACE_HOOKS.remove(hook)


def test_dump_config_cache_hits_without_retracing(trace_count):
    k = UnifiedKernel(scaled, platform_target="trn1")
    a = _f32(32, 16)
    first = k.dump_config(a, 2.0)
    assert k.dump_config(_f32(32, 16), 2.0) is first
    assert k.dump_config(a, factor=2.0) is first
    assert len(trace_count) == 1
    cache = k.__neuron_kernel_interface_kernel_cache__
    assert len(cache) == 1 and list(cache.values())[0] is first
    k.dump_config(_f32(32, 8), 2.0)   # shape
    k.dump_config(a, 3.0)             # constant value
    k.dump_config(a, 2)               # constant type (2 == 2.0 but traces differently)
    k.dump_config(a.astype(ml_dtypes.bfloat16), 2.0)   # dtype
    assert len(trace_count) == 5 and len(cache) == 5
    off = UnifiedKernel(scaled, platform_target="trn1", enable_cache=False)
    off.dump_config(a, 2.0)
    off.dump_config(a, 2.0)
    assert len(trace_count) == 7


def test_hash_key_changes_with_platform_target_is_fallback():
    import inspect
    k = UnifiedKernel(scaled)
    bound = k._map_args(inspect.signature(scaled).bind(_f32(4, 4), 1.0))
    k.platform_target, k.platform_target_is_fallback = "trn1", False
    real = k._generate_hash_key(bound)
    k.platform_target_is_fallback = True
    assert k._generate_hash_key(bound) != real


def test_unhashable_constant_is_err_nki_param_not_hashable():
    with pytest.raises(NkiError) as e:
        _dump(scaled, _f32(4, 4), {1, 2})
    assert e.value.code == "err_nki_param_not_hashable"


def test_map_args_makes_decl_tensor_placeholders():
    import inspect
    k = UnifiedKernel(scaled)
    bound = k._map_args(inspect.signature(scaled).bind(_f32(4, 6), 1.0))
    assert bound.arguments["a"] == enc.DeclTensor((4, 6), np.dtype(np.float32))
    assert bound.arguments["factor"] == 1.0
    params = inspect.signature(enc.FrameworkKernel.dump_config).parameters.values()
    assert [(p.name, p.kind.name) for p in params] == [
        ("self", "POSITIONAL_OR_KEYWORD"), ("args", "VAR_POSITIONAL"),
        ("kwargs", "VAR_KEYWORD")]


def test_base_framework_kernel_hooks_are_abstract():
    with pytest.raises(NotImplementedError, match="is_framework_tensor"):
        enc.FrameworkKernel(add_kernel, platform_target="trn1").dump_config(object(), 1)


# ----------------------------------------------------------------------------- platform target
def test_fallback_warns_exactly_and_marks_the_config():
    a = _f32(8, 8)
    with pytest.warns(UserWarning) as rec:
        d = UnifiedKernel(add_kernel).dump_config(a, a)
    assert [str(w.message) for w in rec] == [
        "Unable to read MLA target. Assuming cross compile to trn1."]
    assert d.config["platform_target"] == "trn1"
    assert d.config["platform_target_is_fallback"] is True


def test_target_from_option_env_and_detection(monkeypatch):
    a = _f32(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert UnifiedKernel(add_kernel, platform_target="trn2").dump_config(a, a).config[
            "platform_target"] == "trn2"
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
        cfg = UnifiedKernel(add_kernel).dump_config(a, a).config
        assert (cfg["platform_target"], cfg["platform_target_is_fallback"]) == ("trn3", False)
        monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
        monkeypatch.setattr(enc, "_DETECTORS", [lambda: "trn2n"])
        enc._detected.cache_clear()
        d = UnifiedKernel(add_kernel).dump_config(a, a)
        assert d.config["platform_target"] == "trn2n"
        assert d.traced.kernel.target == "trn2"
    with pytest.raises(ValueError, match="unknown platform target 'trn9'"):
        UnifiedKernel(add_kernel, platform_target="trn9").dump_config(a, a)


def test_multi_core_grid_only_on_trn2_and_later():
    g = _f32(128, 32)
    with pytest.raises(NkiError) as e:
        UnifiedKernel(spmd_rows, grid=(nl.nc(2) * 2,), platform_target="trn1").dump_config(g)
    assert e.value.code == "err_multi_cores_spmd_not_supported"
    for target in ("trn2", "trn2n", "trn3"):
        d = UnifiedKernel(spmd_rows, grid=(nl.nc(2) * 2,), platform_target=target
                          ).dump_config(g)
        assert d.config["grid"] == [4]
    with pytest.raises(NkiError) as e:
        nki.simulate_kernel(nki.jit(spmd_rows, platform_target="trn1")[nl.nc(2), 2], g)
    assert e.value.code == "err_multi_cores_spmd_not_supported"
    assert "NEURON_PLATFORM_TARGET_OVERRIDE=trn2" in str(e.value)
    assert "platform_target='trn2'" in str(e.value)


def test_the_target_fallback_warning_is_shown_once_per_process():
    import warnings as W

    from nki_workbench._src.encode import FALLBACK_WARNING, resolve_platform_target
    with W.catch_warnings(record=True) as caught:
        W.simplefilter("always")
        first = resolve_platform_target()
        second = resolve_platform_target()
    assert first == second == ("trn1", True)
    assert [str(w.message) for w in caught] == [FALLBACK_WARNING]
