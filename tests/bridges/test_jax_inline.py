"""The JAX bridge runs the compiled simulator inline on cpu: no host callback under jit, vmap
or scan; the same results as the interpreter; a callback only where the compiled program
cannot run the kernel; no hang from many threads."""

import re
import threading
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import nki_workbench.nki.language as nl  # noqa: E402
from nki_workbench import SimParams, nki  # noqa: E402
from nki_workbench._src.bridges.jax import with_vjp  # noqa: E402
from nki_workbench._src.bridges.jax_lowering import lower_for_neuron  # noqa: E402

RNG = np.random.default_rng(7)


def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        s = slice(i * 128, (i + 1) * 128)
        nl.store(out[s, :], value=nl.add(nl.load(a[s, :]), nl.load(b[s, :])))
    return out


def softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        e = nl.exp(nl.subtract(t, nl.max(t, axis=1, keepdims=True)))
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.divide(e, nl.sum(e, axis=1,
                                                                             keepdims=True)))
    return out


def matmul(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        acc = nl.zeros((128, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            lt = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
            rt = nl.load(rhs[k * 128:(k + 1) * 128, :])
            acc += nl.matmul(lt, rt, transpose_x=True)
        nl.store(out[m * 128:(m + 1) * 128, :], value=nl.copy(acc, dtype=nl.float32))
    return out


def rmsnorm_masked(a, g):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.arange(128)[:, None], nl.arange(a.shape[1])[None, :]
    g_tile = nl.load(g.reshape((1, g.shape[0]))[nl.arange(1)[:, None], iy])
    rows = a.shape[0]
    for i in nl.affine_range((rows + 127) // 128):
        keep = i * 128 + ix < rows
        t = nl.load(a[i * 128 + ix, iy], mask=keep)
        r = nl.rsqrt(nl.sum(nl.square(t), axis=[1]) / a.shape[1])
        o = nl.multiply(nl.multiply(t, r), g_tile.broadcast_to((128, g.shape[0])), mask=keep)
        nl.store(out[i * 128 + ix, iy], value=o, mask=keep)
    return out


def _sim(kernel, *arrays, backend="numpy"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(nki.simulate_kernel(nki.jit(kernel), *arrays,
                                              params=SimParams(backend=backend)))


def _same_as_the_simulators(got, kernel, *arrays):
    """The interpreter's result: bit for bit for element-wise arithmetic, else within the
    documented executor differences (transcendentals a few ulps, contracted matmuls one bf16
    ulp; XLA may fuse a transcendental differently inside a caller's program)."""
    interp = _sim(kernel, *arrays)
    assert got.dtype == interp.dtype and got.shape == interp.shape
    if kernel is add:
        assert got.tobytes() == interp.tobytes()
    np.testing.assert_allclose(got.astype(np.float32), interp.astype(np.float32),
                               rtol=1e-4, atol=1e-4)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "add": (add, lambda: (_f32(256, 64), _f32(256, 64))),
    "softmax": (softmax, lambda: (_f32(256, 96),)),
    "matmul_fp32": (matmul, lambda: (_f32(256, 128), _f32(256, 64))),
    "matmul_bf16": (matmul, lambda: (_f32(256, 128).astype(jnp.bfloat16),
                                     _f32(256, 64).astype(jnp.bfloat16))),
    "rmsnorm_masked": (rmsnorm_masked, lambda: (_f32(200, 64), _f32(64))),
}


def _hlo(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text()


def _outside_the_check_branch(text: str) -> str:
    """The module text without its ``stablehlo.case`` regions (the branch a set check flag
    takes: the host interpreter reports the diagnostic)."""
    return re.sub(r"stablehlo\.case.*?\}\) : \(tensor<i32>\)", "", text, flags=re.S)


@pytest.mark.parametrize("name", sorted(CASES))
def test_jit_inline_equals_the_simulators(name):
    kernel, make = CASES[name]
    arrays = make()
    k = nki.jit(kernel, mode="jax")
    f = jax.jit(lambda *xs: k(*xs))
    text = _hlo(f, *arrays)
    # rmsnorm_masked's masks leave its output's coverage to a run-time check
    assert ("callback" in text) == (name == "rmsnorm_masked")
    assert "callback" not in _outside_the_check_branch(text)
    _same_as_the_simulators(np.asarray(f(*[jnp.asarray(a) for a in arrays])), kernel, *arrays)


@pytest.mark.parametrize("name", ["softmax", "matmul_bf16", "rmsnorm_masked"])
def test_vmap_over_eight_inputs_is_one_batched_computation(name):
    kernel, make = CASES[name]
    batch = [make() for _ in range(8)]
    k = nki.jit(kernel, mode="jax")
    stacked = [np.stack([b[i] for b in batch]) for i in range(len(batch[0]))]
    f = jax.jit(jax.vmap(lambda *xs: k(*xs)))
    jaxpr = str(jax.make_jaxpr(jax.vmap(lambda *xs: k(*xs)))(*stacked))
    assert "nki_call" in jaxpr and "callback" not in jaxpr and "while" not in jaxpr
    text = _outside_the_check_branch(_hlo(f, *stacked))
    assert "callback" not in text and "stablehlo.while" not in text
    got = np.asarray(f(*stacked))
    assert got.shape[0] == 8
    for i, b in enumerate(batch):
        _same_as_the_simulators(got[i], kernel, *b)


def test_vmap_with_an_unbatched_operand_and_nested_vmap():
    a, b = _f32(4, 3, 128, 64), _f32(128, 64)
    k = nki.jit(add, mode="jax")
    f = jax.jit(jax.vmap(jax.vmap(lambda x, y: k(x, y), in_axes=(0, None)), in_axes=(0, None)))
    assert "callback" not in _hlo(f, a, b)
    np.testing.assert_array_equal(np.asarray(f(a, b)), a + b)
    eager = jax.vmap(lambda x, y: k(x, y), in_axes=(1, None))(a[0].transpose(1, 0, 2), b)
    np.testing.assert_array_equal(np.asarray(eager), a[0] + b)


def test_scan_and_grad_compose_with_the_inline_kernel():
    x = _f32(128, 64)
    k = nki.jit(add, mode="jax")

    def step(c, _):
        return k(c, c), None

    f = jax.jit(lambda c: jax.lax.scan(step, c, None, length=3)[0])
    assert "callback" not in _hlo(f, x)
    np.testing.assert_allclose(np.asarray(f(x)), x * 8, rtol=1e-6)
    dadd = with_vjp(k, lambda args, out, g: (g, g))
    g = jax.jit(jax.grad(lambda a, b: (dadd(a, b) * b).sum(), argnums=(0, 1)))(x, x)
    np.testing.assert_allclose(np.asarray(g[0]), x, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g[1]), 3 * x, rtol=1e-6)


def test_neuron_lowering_of_vmap_is_a_loop_of_custom_calls():
    x = jax.ShapeDtypeStruct((8, 128, 64), jnp.float32)
    k = nki.jit(add, mode="jax", platform_target="trn1")
    text = lower_for_neuron(jax.vmap(lambda a: k(a, a)), x)
    assert "stablehlo.while" in text and "@AwsNeuronCustomNativeKernel" in text
    assert "callback" not in text


def test_callback_fallback_when_the_compiled_program_cannot_run_the_kernel():
    a = _f32(256, 64)
    for params in (SimParams(backend="numpy"), SimParams(shuffle_affine=True, seed=3)):
        k = nki.jit(add, mode="jax", sim_params=params)
        f = jax.jit(lambda x, k=k: k(x, x))
        assert "callback" in _hlo(f, a)
        np.testing.assert_array_equal(np.asarray(f(a)), a + a)
        batched = np.stack([a, 2 * a])
        g = jax.jit(jax.vmap(lambda x, k=k: k(x, x)))
        np.testing.assert_array_equal(np.asarray(g(batched)), batched + batched)


def _hammer(f, x, threads=8, calls=20):
    errors, done = [], []

    def work():
        try:
            for _ in range(calls):
                f(x).block_until_ready()
            done.append(1)
        except Exception as exc:  # noqa: BLE001 - every failure is collected and shown
            errors.append(repr(exc))

    ts = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=240)
    return [t for t in ts if t.is_alive()], errors, len(done)


@pytest.mark.parametrize("params", [None, SimParams(backend="numpy")],
                         ids=["inline", "callback"])
def test_eight_threads_calling_a_jitted_kernel_finish(params):
    x = _f32(256, 64)
    k = nki.jit(softmax, mode="jax", sim_params=params)
    f = jax.jit(lambda a: k(a) * 2.0)
    alive, errors, done = _hammer(f, jnp.asarray(x))
    assert not alive, "a thread calling the jitted kernel hung"
    assert errors == [] and done == 8
    np.testing.assert_array_equal(np.asarray(f(x)), _sim(softmax, x, backend=(
        params or SimParams(backend="jax")).backend) * np.float32(2))
