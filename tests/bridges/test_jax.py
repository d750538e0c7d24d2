"""The JAX bridge: the nki_call primitive, its neuron custom call, the CPU simulator path."""

import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import decode_backend_config, inspect, nki
from nki_workbench._src import dispatch
from nki_workbench._src.bridges import jax as bridge
from nki_workbench._src.ir import parse
from nki_workbench.jax import (
    DONT_CACHE_ENV,
    OP_NAME,
    STALE_TRACE_MESSAGE,
    TARGET,
    JAXKernel,
    StaleTraceError,
    export_for_neuron,
    lower_for_neuron,
    nki_call,
    nki_call_p,
    with_vjp,
)
from nki_workbench.nki import NkiError

RNG = np.random.default_rng(5)
ATOL = 1e-5


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(autouse=True)
def _trn1(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")


# ----------------------------------------------------------------------------- kernels
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


def axpy(a: nt.mutable_tensor, b, alpha):
    nl.store(a, nl.load(a) + nl.load(b) * alpha)
    return a


def scale_into(a, out):
    nl.store(out, nl.multiply(nl.load(a), 3.0))


def mul(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), nl.load(b)))
    return out


def exp_and_square(a):
    e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(e, nl.exp(t))
    nl.store(s, t * t)
    return e, s


def row_tiles(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    tile = nl.load(a[i * 128:(i + 1) * 128, :])
    nl.store(out[i * 128:(i + 1) * 128, :], nl.multiply(tile, 2.0))
    return out


def bad_writes_input(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(a, t)
    nl.store(out, t)
    return out


ADD = nki.jit(add, mode="jax", platform_target="trn1")
AXPY = nki.jit(axpy, mode="jax", platform_target="trn1")
MUL = nki.jit(mul, mode="jax", platform_target="trn1")


def _hlo_with_metadata(lowered) -> str:
    import jaxlib._hlo as hlo
    opts = hlo.HloPrintOptions.short_parsable()
    opts.print_metadata = True
    return lowered.compiler_ir("hlo").as_hlo_module().to_string(opts)


def _custom_calls(text):
    return [ln for ln in text.splitlines() if f"custom_call @{TARGET}" in ln]


def _config_of(line):
    return decode_backend_config(re.search(r'backend_config = "([^"]+)"', line).group(1))


# ----------------------------------------------------------------------------- dispatch, hooks
def test_mode_jax_uses_the_bridge_class_and_its_hooks():
    assert dispatch.compute_mode((), {}, "jax") is JAXKernel
    assert isinstance(ADD.concrete(JAXKernel), JAXKernel)
    k = JAXKernel.__new__(JAXKernel)  # the hooks need no instance state
    x = jnp.ones((2, 3), jnp.bfloat16)
    assert k.is_framework_tensor(x) and not k.is_framework_tensor(np.ones(2))
    assert k.map_framework_tensor(x) == ((2, 3), jnp.bfloat16)
    names = {jnp.bfloat16: "bfloat16", jnp.float8_e4m3: "float8_e4m3",
             jnp.float8_e5m2: "float8_e5m2", jnp.float16: "float16", jnp.float32: "float32",
             jnp.int8: "int8", jnp.uint16: "uint16", jnp.int32: "int32", jnp.bool_: "bool"}
    for dt, name in names.items():
        assert k.translate_to_neuron_dtype(jnp.dtype(dt)) == name
    for dt, why in ((jnp.float8_e4m3fn, "IEEE-style e4m3"), (np.float64, "no 64-bit"),
                    (np.int64, "no 64-bit")):
        with pytest.raises(NkiError, match=why):
            k.translate_to_neuron_dtype(np.dtype(dt))


def test_importing_nki_workbench_does_not_import_jax():
    code = "import sys, nki_workbench; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- neuron lowering
def test_neuron_lowering_is_the_custom_call_with_config_aliases_and_attributes():
    a, b = _f32(128, 64), _f32(128, 64)

    def program(x, y):
        return AXPY(jnp.tanh(x), ADD(x, y), 0.5)

    lowered = jax.jit(program).trace(a, b).lower(lowering_platforms=("neuron",))
    text = lowered.as_text()
    calls = _custom_calls(text)
    assert len(calls) == 2 and "stablehlo.tanh" in text
    add_line, axpy_line = calls
    assert "output_operand_aliases" not in add_line
    assert ("output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = "
            "[], operand_index = 0, operand_tuple_indices = []>]") in axpy_line
    assert 'mhlo.frontend_attributes = {kernel_name = "axpy"}' in axpy_line
    assert 'mhlo.frontend_attributes = {kernel_name = "add"}' in add_line
    # the config in the module is exactly what dump_config gives for these arguments
    dumped = AXPY.concrete(JAXKernel).dump_config(jnp.asarray(a), jnp.asarray(b), 0.5)
    assert re.search(r'backend_config = "([^"]+)"', axpy_line).group(1) == dumped.backend_config
    cfg = _config_of(axpy_line)
    assert parse(cfg["serialize_ir_string"]) == dumped.traced.kernel
    assert cfg["constant_values"] == [["alpha", 0.5]] and cfg["func_name"] == "axpy"
    assert dumped.operand_output_aliases == {0: 0}
    hlo = _hlo_with_metadata(lowered)
    cc = [ln for ln in hlo.splitlines() if "custom-call(" in ln]
    assert len(cc) == 2 and all(f'custom_call_target="{TARGET}"' in ln for ln in cc)
    assert "output_to_operand_aliasing={{}: (0, {})}" in cc[1]
    assert all(f'op_type="{OP_NAME}"' in ln and re.search(f'op_name="[^"]*{OP_NAME}"', ln)
               for ln in cc)
    assert 'frontend_attributes={kernel_name="add"}' in cc[0]


def test_multi_output_and_legacy_output_argument_lowering():
    a = _f32(128, 32)
    text = lower_for_neuron(lambda x: bridge.nki_call(exp_and_square, x), a)
    (line,) = _custom_calls(text)
    assert "-> (tensor<128x32xf32>, tensor<128x32xf32>)" in line
    assert _config_of(line)["result_is_sequence"] is True
    legacy = lower_for_neuron(lambda x: nki_call(
        scale_into, x, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)), a)
    (line,) = _custom_calls(legacy)
    assert "operand_index = 1" in line
    cfg = _config_of(line)
    assert cfg["kernel_return"] is False
    assert [d["name"] for d in cfg["serialize_dims"]["inputs"]] == ["a", "out"]
    both = jax.jit(lambda x: ADD(x, x)).trace(a).lower(lowering_platforms=("neuron", "cpu"))
    text = both.as_text()  # a platform switch: the custom call, or the inline simulator
    assert "stablehlo.case" in text and _custom_calls(text)
    assert "callback" not in text and "stablehlo.add" in text


def test_inspection_custom_call_jax_is_the_neuron_lowering():
    a = _f32(128, 64)
    insp = inspect(axpy, a, a, 2.0, platform_target="trn1")
    text = insp.custom_call("jax")
    (line,) = _custom_calls(text)
    assert re.search(r'backend_config = "([^"]+)"', line).group(1) == insp.backend_config
    assert "operand_index = 0" in line and 'kernel_name = "axpy"' in line
    assert text.startswith("module @")


def test_export_for_neuron():
    a = _f32(128, 64)
    exp = export_for_neuron(lambda x, y: ADD(x, y) * 2, a, a)
    assert exp.platforms == ("neuron",)
    (line,) = _custom_calls(exp.mlir_module())
    assert _config_of(line)["func_name"] == "add"
    with pytest.raises(ValueError, match="used on"):
        exp.call(a, a)  # exported for neuron, called on cpu
    pytest.importorskip("flatbuffers")
    back = jax.export.deserialize(exp.serialize())
    assert _custom_calls(back.mlir_module())


# ----------------------------------------------------------------------------- CPU execution
def test_jitted_program_with_two_kernels_matches_numpy():
    a, b = _f32(128, 64), _f32(128, 64)

    @jax.jit
    def program(x, y):
        s = ADD(x, y)                                   # fresh output
        t = AXPY(jnp.tanh(x), s, 0.5)                   # mutable parameter (aliased)
        u = nki_call(scale_into, t, out_shape=jax.ShapeDtypeStruct(t.shape, t.dtype))
        return jnp.sum(u, axis=1), u @ y.T

    got_sum, got_mm = program(a, b)
    u = (np.tanh(a) + (a + b) * 0.5) * 3.0
    np.testing.assert_allclose(np.asarray(got_sum), u.sum(axis=1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.asarray(got_mm), u @ b.T, rtol=1e-4, atol=1e-2)
    # eager (no jit) gives the same numbers, with numpy arrays mixed in
    eager = AXPY(jnp.tanh(a), ADD(a, jnp.asarray(b)), 0.5)
    np.testing.assert_allclose(np.asarray(eager), u / 3.0, atol=ATOL)


def test_donated_mutable_operand():
    a, b = _f32(128, 64), _f32(128, 64)
    f = jax.jit(lambda x, y: AXPY(x, y, 2.0), donate_argnums=0)
    x = jnp.asarray(a)
    out = f(x, jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(out), a + 2 * b, atol=ATOL)
    assert x.is_deleted()


def test_multiple_outputs_spmd_grid_and_bf16_on_cpu():
    a = _f32(128, 32)
    e, s = jax.jit(lambda x: nki_call(exp_and_square, x))(a)
    np.testing.assert_allclose(np.asarray(e), np.exp(a), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(s), a * a, atol=ATOL)
    big = _f32(384, 16)
    tiles = jax.jit(lambda x: nki_call(row_tiles, x, grid=(3,)))(big)
    np.testing.assert_allclose(np.asarray(tiles), 2 * big, atol=ATOL)  # every program's tile
    bf = jnp.asarray(a, jnp.bfloat16)
    got = jax.jit(lambda x: ADD(x, x))(bf)
    assert got.dtype == jnp.bfloat16
    want = (np.asarray(bf).astype(np.float32) * 2).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(np.asarray(got, np.float32), want.astype(np.float32),
                               rtol=1e-2, atol=1e-2)


def test_scan_and_cond():
    a, b = _f32(128, 64), _f32(128, 64)

    def step(c, _):
        c = ADD(c, b)
        return c, jnp.max(c)

    carry, maxes = jax.jit(lambda x: lax.scan(step, x, length=3))(a)
    np.testing.assert_allclose(np.asarray(carry), a + 3 * b, atol=1e-4)
    np.testing.assert_allclose(np.asarray(maxes), [np.max(a + k * b) for k in (1, 2, 3)],
                               atol=1e-4)
    pick = jax.jit(lambda p, x, y: lax.cond(p, lambda: ADD(x, y), lambda: MUL(x, y)))
    np.testing.assert_allclose(np.asarray(pick(True, a, b)), a + b, atol=ATOL)
    np.testing.assert_allclose(np.asarray(pick(False, a, b)), a * b, atol=ATOL)


def test_vmap_maps_the_kernel_over_the_batch():
    xs, y = _f32(3, 128, 64), _f32(128, 64)
    got = jax.jit(jax.vmap(ADD, in_axes=(0, None)))(xs, y)
    np.testing.assert_allclose(np.asarray(got), xs + y, atol=ATOL)
    ys = _f32(128, 4, 64)
    both = jax.vmap(lambda x, yy: AXPY(x, yy, 2.0), in_axes=(0, 1))(xs[:, :, :], ys[:, :3])
    np.testing.assert_allclose(np.asarray(both), xs + 2 * np.moveaxis(ys[:, :3], 1, 0),
                               atol=ATOL)
    e, s = jax.vmap(lambda x: nki_call(exp_and_square, x))(xs[:2, :, :32])
    np.testing.assert_allclose(np.asarray(s), xs[:2, :, :32] ** 2, atol=ATOL)


# ----------------------------------------------------------------------------- trace cache
def test_one_trace_per_specialisation():
    k = nki.jit(add, mode="jax", platform_target="trn1")  # a fresh kernel: its own cache
    start = bridge.TRACE_COUNTER["traces"]
    a = _f32(128, 16)
    f = jax.jit(lambda x, y: k(x, y))
    for _ in range(3):
        f(a, a)
    jax.jit(lambda x: k(x, x) * 2)(a)                 # another program, same specialisation
    k(jnp.asarray(a), a)                              # eager
    assert bridge.TRACE_COUNTER["traces"] - start == 1
    f(_f32(128, 8), _f32(128, 8))                     # a new shape: one more trace
    assert bridge.TRACE_COUNTER["traces"] - start == 2
    ka = nki.jit(axpy, mode="jax", platform_target="trn1")
    g = jax.jit(lambda x, c: ka(x, x, c), static_argnums=1)
    g(a, 1.0), g(a, 2.0), g(a, 1.0)                   # constants specialise the trace
    assert bridge.TRACE_COUNTER["traces"] - start == 4


def _lowerable(kernel_fn, a):
    """A traced (not yet lowered) program and its JaxTraceResult."""
    k = nki.jit(kernel_fn, mode="jax", platform_target="trn1")
    traced = jax.jit(lambda x: k(x, x)).trace(a)
    (eqn,) = [e for e in traced.jaxpr.eqns if e.primitive is nki_call_p]
    return traced, eqn.params["trace"]


def test_stale_trace_error_and_the_env_var_escape_hatch(monkeypatch):
    a = _f32(128, 16)
    monkeypatch.delenv(DONT_CACHE_ENV, raising=False)
    traced, trace = _lowerable(add, a)
    other = trace.kernel.dump_config(jnp.zeros((128, 8)), jnp.zeros((128, 8)))
    trace.dumped = other                                   # a cache handing back another trace
    with pytest.raises(StaleTraceError) as e:
        traced.lower(lowering_platforms=("neuron",))
    assert str(e.value) == STALE_TRACE_MESSAGE
    assert STALE_TRACE_MESSAGE == ("NKI trace is not properly cached, use export "
                                   "NKI_DONT_CACHE_TRACE_FOR_JAX_LOWERING=TRUE to workaround "
                                   "the issue.")
    monkeypatch.setenv(DONT_CACHE_ENV, "TRUE")
    traces, retraces = (bridge.TRACE_COUNTER[k] for k in ("traces", "lowering_retraces"))
    text = traced.lower(lowering_platforms=("neuron",)).as_text()
    (line,) = _custom_calls(text)
    assert _config_of(line)["serialize_dims"]["inputs"][0]["shape"] == [128, 16]
    assert bridge.TRACE_COUNTER["lowering_retraces"] == retraces + 1
    assert bridge.TRACE_COUNTER["traces"] == traces + 1    # a real re-trace, not the cache
    out = traced.lower().compile()(a)                      # the cpu lowering re-traces too
    np.testing.assert_allclose(np.asarray(out), 2 * a, atol=ATOL)
    assert bridge.TRACE_COUNTER["lowering_retraces"] == retraces + 2


# ----------------------------------------------------------------------------- autodiff, errors
def test_grad_needs_a_backward():
    a = _f32(128, 16)
    with pytest.raises(NkiError) as e:
        jax.grad(lambda x: MUL(x, x).sum())(a)
    assert e.value.code == "wb_jax_no_derivative" and "with_vjp" in str(e.value)

    def mul_bwd(args, out, g):
        x, y = args
        return MUL(g, y), MUL(g, x)

    dmul = with_vjp(MUL, mul_bwd)
    b = _f32(128, 16)
    ga, gb = jax.jit(jax.grad(lambda x, y: (dmul(x, y) * 3).sum(), argnums=(0, 1)))(a, b)
    np.testing.assert_allclose(np.asarray(ga), 3 * b, atol=ATOL)
    np.testing.assert_allclose(np.asarray(gb), 3 * a, atol=ATOL)

    def axpy_bwd(args, out, g):
        x, y, alpha = args
        return g, g * alpha, None
    daxpy = with_vjp(axpy, axpy_bwd)                   # plain function: wrapped by nki_call
    gy = jax.grad(lambda y: daxpy(a, y, 4.0).sum())(b)
    np.testing.assert_allclose(np.asarray(gy), np.full_like(b, 4.0), atol=ATOL)


def test_kernel_errors_reach_the_user():
    a = jnp.ones((128, 8))
    with pytest.raises(NkiError) as e:
        jax.jit(lambda x: nki_call(bad_writes_input, x))(a)
    assert e.value.code == "err_cannot_update_immutable_parameter"
    assert "test_jax.py" in str(e.value)
    with pytest.raises(NkiError, match="no 64-bit"):
        nki_call(add, np.ones((4, 4)), np.ones((4, 4)))
    with pytest.raises(NkiError, match="cannot call kernel 'add'"):
        ADD(a)
    with pytest.raises(NkiError, match="err_nki_param_not_hashable"):
        AXPY(a, a, [1.0])


def reads_unwritten(a):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    t[:, 0:64] = nl.load(a[:, 0:64])
    nl.store(out, nl.matmul(t, t, transpose_x=True))  # reads the unwritten half
    return out


def test_simulator_diagnostics_reach_the_user():
    from nki_workbench import SimParams, UninitializedReadWarning
    a = jnp.ones((128, 128))
    warn_k = nki.jit(reads_unwritten, mode="jax")
    with pytest.warns(UninitializedReadWarning, match="nothing wrote"):
        out = jax.jit(lambda x: warn_k(x))(a)
        out.block_until_ready()
    assert np.isnan(np.asarray(out)).any()
    strict = nki.jit(reads_unwritten, mode="jax", sim_params=SimParams(uninitialized="error"))
    with pytest.raises(NkiError, match="wb_uninitialized_read"):
        strict(a)                                       # eager: the simulator's own error
    with pytest.raises(Exception, match=r"wb_uninitialized_read[\s\S]*test_jax.py") as e:
        jax.jit(lambda x: strict(x))(a).block_until_ready()
    assert type(e.value).__name__ == "JaxRuntimeError"  # jit: XLA wraps the callback's error
