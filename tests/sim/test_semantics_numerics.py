"""Each nki.language opcode's numerics, on both executors: against a float64 reference, and the
compiled result against the interpreter's (bit-identical, or within the ulps docs/semantics.md
states). The protocol's reduction order and casts are checked on their own at the end."""

import numpy as np
import pytest
from backends import err_in_ulps, run_both, ulps
from scipy import special

import nki_workbench.nki.language as nl
from nki_workbench._src import dtypes as D
from nki_workbench._src.semantics import NUMPY
from nki_workbench._src.semantics.nl import ELEMENTWISE_BINARY, UNARY

pytest.importorskip("jax")

RNG = np.random.default_rng(7)
SHAPE = (128, 384)
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal"}
_C = np.sqrt(2 / np.pi)


def _gelu(x):
    return 0.5 * x * (1 + special.erf(x / np.sqrt(2)))


REFERENCE = {  # float64 references of every unary opcode
    "abs": np.abs, "negative": np.negative, "sign": np.sign, "trunc": np.trunc,
    "floor": np.floor, "ceil": np.ceil, "exp": np.exp, "log": np.log, "cos": np.cos,
    "sin": np.sin, "tan": np.tan, "tanh": np.tanh, "arctan": np.arctan, "sqrt": np.sqrt,
    "square": np.square, "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": lambda x: 1 / x,
    "sigmoid": special.expit, "relu": lambda x: np.maximum(x, 0), "gelu": _gelu,
    "gelu_dx": lambda x: 0.5 * (1 + special.erf(x / np.sqrt(2))) +
    x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(_C * (x + 0.044715 * x ** 3))),
    "gelu_apprx_sigmoid": lambda x: x * special.expit(1.702 * x),
    "silu": lambda x: x * special.expit(x),
    "silu_dx": lambda x: special.expit(x) * (1 + x * (1 - special.expit(x))),
    "erf": special.erf, "erf_dx": lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x),
    "softplus": lambda x: np.logaddexp(0, x), "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
}

# compiled vs interpreter, in ulps of the result's largest magnitude (docs/semantics.md);
# every opcode not listed is bit-identical. Bounds are twice the measured distance.
ULPS = {"exp": 4, "log": 4, "cos": 2, "sin": 2, "tan": 2, "tanh": 8, "arctan": 4, "sigmoid": 4,
        "gelu": 4, "gelu_dx": 4, "gelu_apprx_tanh": 4, "gelu_apprx_sigmoid": 4, "silu": 4,
        "silu_dx": 8, "erf": 8, "erf_dx": 4, "softplus": 2, "mish": 8, "power": 2,
        "softmax": 4, "rms_norm": 0, "matmul": 8}


def _compare(op, out, ref):
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if op in ULPS:
        assert err_in_ulps(out, ref) <= ULPS[op], (op, err_in_ulps(out, ref))
    else:
        assert ulps(out, ref) == 0, (op, ulps(out, ref))


def _unary(op):
    def k(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=getattr(nl, op)(nl.load(a)))
        return out
    return k


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    lo, hi = (0.1, 4.0) if op in POSITIVE else (-4.0, 4.0)
    a = RNG.uniform(lo, hi, SHAPE).astype(np.float32)
    _, _, ref, out = run_both(_unary(op), a)
    np.testing.assert_allclose(ref["out"], REFERENCE[op](a.astype(np.float64)),
                               rtol=2e-6, atol=2e-6)
    _compare(op, out["out"], ref["out"])


def _binary(op):
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=getattr(nl, op)(nl.load(a), nl.load(b)))
        return out
    return k


_NP_BINARY = {"logical_and": lambda a, b: (a != 0) & (b != 0),
              "logical_or": lambda a, b: (a != 0) | (b != 0),
              "logical_xor": lambda a, b: (a != 0) ^ (b != 0)}


@pytest.mark.parametrize("op", ELEMENTWISE_BINARY)
def test_binary(op):
    if "shift" in op or "bitwise" in op:
        a = RNG.integers(-2 ** 31, 2 ** 31, SHAPE).astype(np.int32)
        b = RNG.integers(0, 32, SHAPE).astype(np.int32)
        want = {"left_shift": lambda: (a.astype(np.int64) << b) & 0xFFFFFFFF,
                "right_shift": lambda: (a.astype(np.int64) & 0xFFFFFFFF) >> b}.get(
            op, lambda: getattr(np, op)(a, b).astype(np.int64) & 0xFFFFFFFF)()
        want = want.astype(np.uint32).view(np.int32)  # the 32-bit pattern, read as int32
    else:
        a = RNG.uniform(-4, 4, SHAPE).astype(np.float32)
        b = RNG.uniform(0.5, 4, SHAPE).astype(np.float32)
        b[0, :8] = a[0, :8]  # equal operands for the comparisons
        f = _NP_BINARY.get(op, getattr(np, op))
        with np.errstate(invalid="ignore"):  # power of a negative base: NaN, as on device
            want = D.cast(f(a.astype(np.float64), b.astype(np.float64)), "float32")
    _, _, ref, out = run_both(_binary(op), a, b)
    if ref["out"].dtype.kind == "f":
        np.testing.assert_allclose(ref["out"], want, rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(ref["out"], want)
    _compare(op, out["out"], ref["out"])


def _reduction(op, keepdims):
    def k(a):
        shape = (a.shape[0], 1) if keepdims else (a.shape[0],)
        out = nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=getattr(nl, op)(nl.load(a), axis=1, keepdims=keepdims))
        return out
    return k


@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean", "var", "all"])
def test_reductions_are_bit_identical(op, keepdims):
    a = RNG.uniform(0.9, 1.1, (128, 300)).astype(np.float32)  # 300: a padded tree
    a[5, 7] = 0.0
    _, _, ref, out = run_both(_reduction(op, keepdims), a)
    f = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean,
         "var": np.var, "all": np.all}[op]
    want = f(a.astype(np.float64), axis=1, keepdims=keepdims)
    np.testing.assert_allclose(ref["out"], want, rtol=1e-5, atol=1e-6)
    _compare(op, out["out"], ref["out"])


def k_composites(a, g, b):
    sm = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    rn = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    mm = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(sm, value=nl.softmax(t, axis=1))
    w = nl.load(g.reshape((1, g.shape[0]))).broadcast_to(a.shape)
    nl.store(rn, value=nl.rms_norm(t, w, axis=1, n=a.shape[1]))
    nl.store(mm, value=nl.matmul(t, nl.load(b), transpose_x=True))
    return sm, rn, mm


def test_composites_and_matmul():
    a = RNG.uniform(-4, 4, (128, 128)).astype(np.float32)
    g = RNG.uniform(-1, 1, 128).astype(np.float32)
    b = RNG.uniform(-1, 1, (128, 256)).astype(np.float32)
    _, _, ref, out = run_both(k_composites, a, g, b)
    names = sorted(ref)
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = {"sm": e / e.sum(axis=1, keepdims=True),
            "rn": x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * g,
            "mm": x.T @ b.astype(np.float64)}
    for n, op in zip(names, ["matmul", "rms_norm", "softmax"], strict=True):
        key = {"matmul": "mm", "rms_norm": "rn", "softmax": "sm"}[op]
        np.testing.assert_allclose(ref[n], want[key], rtol=1e-4, atol=1e-5)
        _compare(op, out[n], ref[n])


# ----------------------------------------------------------------------------- the protocol
def _padded_tree(x, op=np.multiply, identity=1.0):
    """The documented halving tree, written out: pad with the identity to a power of two."""
    n = x.shape[-1]
    p = 1 << (n - 1).bit_length()
    x = np.concatenate([x, np.full(x.shape[:-1] + (p - n,), identity, np.float32)], axis=-1)
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        x = op(x[..., :h], x[..., h:])
    return x[..., 0]


_ORDER_CASES = [((128, 1024), (1,)), ((128, 1000), (1,)), ((16, 7, 9), (1, 2)), ((5, 33), (0,)),
                ((3, 5, 6), (2, 0)), ((4, 1), (1,)), ((2, 300, 3), (1,))]


@pytest.mark.parametrize("shape,axes", _ORDER_CASES)
def test_the_one_reduction_order_on_both_protocols(shape, axes):
    import jax

    from nki_workbench._src.semantics import jax_numerics
    x = RNG.standard_normal(shape).astype(np.float32)
    keep = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, keep + list(axes)).reshape([x.shape[d] for d in keep] + [-1])
    want = np.add.reduce(np.ascontiguousarray(moved), axis=-1)  # numpy's own order
    jx = jax_numerics(np.int32(0))
    got_np = NUMPY.sum(x, axes)
    got_jax = np.asarray(jax.jit(lambda v: jx.sum(v, axes))(x))
    assert ulps(got_np, want) == 0 and ulps(got_jax, want) == 0
    np.testing.assert_allclose(got_np, x.astype(np.float64).sum(axis=axes), atol=1e-4)
    assert NUMPY.sum(x, axes, keepdims=True).shape == np.sum(x, axis=axes, keepdims=True).shape


@pytest.mark.parametrize("shape,axes", _ORDER_CASES)
def test_products_follow_the_halving_tree_on_both_protocols(shape, axes):
    import jax

    from nki_workbench._src.semantics import jax_numerics
    x = RNG.uniform(0.9, 1.1, shape).astype(np.float32)
    keep = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, keep + list(axes)).reshape([x.shape[d] for d in keep] + [-1])
    want = _padded_tree(moved)
    jx = jax_numerics(np.int32(0))
    got_np = NUMPY.reduce("multiply", x, axes)
    got_jax = np.asarray(jax.jit(lambda v: jx.reduce("multiply", v, axes))(x))
    assert ulps(got_np, want) == 0 and ulps(got_jax, want) == 0
    np.testing.assert_allclose(got_np, x.astype(np.float64).prod(axis=axes), rtol=1e-4)


def k_selects(a, m):
    inv = nl.ndarray(m.shape, dtype=m.dtype, buffer=nl.shared_hbm)
    lnot = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    sel = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(inv, value=nl.invert(nl.load(m)))
    nl.store(lnot, value=nl.logical_not(t, dtype=nl.float32))
    nl.store(sel, value=nl.where(nl.greater(t, 0.0), t, nl.negative(t)))
    return inv, lnot, sel


def test_invert_logical_not_where_are_bit_identical():
    a = RNG.uniform(-2, 2, SHAPE).astype(np.float32)
    a[0, :16] = 0.0
    m = RNG.integers(0, 2 ** 32, SHAPE, dtype=np.uint64).astype(np.uint32)
    _, _, ref, out = run_both(k_selects, a, m)
    inv, lnot, sel = (ref[n] for n in sorted(ref))
    np.testing.assert_array_equal(inv, ~m)
    np.testing.assert_array_equal(lnot, (a == 0).astype(np.float32))
    np.testing.assert_array_equal(D.to_f32(sel), D.to_f32(D.cast(np.abs(a), "bfloat16")))
    for n in ref:
        assert ulps(out[n], ref[n]) == 0, n
