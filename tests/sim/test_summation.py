"""The one float32 summation order (semantics/summation.py): numpy's pairwise sum.

The explicit model must give ``np.add.reduce``'s bits on every length and layout, on both
executors; the interpreter's shortcut (numpy's own reduce) must only run where it gives the
model's bits.
"""

import numpy as np
import pytest
from backends import pairwise_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from nki_workbench._src.semantics import NUMPY, numerics
from nki_workbench._src.semantics.summation import (
    native_matches,
    native_sum,
    pairwise_plan,
    pairwise_sum,
)

F = np.float32


def _wide(rng, shape):
    """Normal values over 8 decades: rounding differs between orders on nearly every row."""
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 4, shape)).astype(F)


def _bits(a):
    return np.asarray(a, F).view(np.int32)


def test_installed_numpy_sums_in_the_documented_order():
    assert native_matches()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 3000), rows=st.integers(1, 4), seed=st.integers(0, 2 ** 32 - 1))
def test_model_is_numpy_add_reduce_bit_for_bit(n, rows, seed):
    x = _wide(np.random.default_rng(seed), (rows, n))
    np.testing.assert_array_equal(_bits(pairwise_sum(NUMPY, x, n)),
                                  _bits(np.add.reduce(x, axis=-1)))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 300), seed=st.integers(0, 2 ** 32 - 1))
def test_model_is_the_scalar_recursion(n, seed):
    x = _wide(np.random.default_rng(seed), (2, n))
    with np.errstate(all="ignore"):
        want = np.array([pairwise_reference(r) for r in x], F)
    np.testing.assert_array_equal(_bits(pairwise_sum(NUMPY, x, n)), _bits(want))


@pytest.mark.parametrize("n", [8, 128, 129, 136, 249, 256, 257, 1000, 1024, 4099])
def test_plan_covers_the_row_in_order(n):
    plan = pairwise_plan(n)
    lo = 0
    for start, m in plan.leaves:
        assert start == lo and 0 < m <= 128
        lo += m
    assert lo == n
    assert plan.uniform == (len({m for _, m in plan.leaves}) == 1)
    assert plan.blocks == max(m // 8 for _, m in plan.leaves)


def test_plans_reach_every_branch():
    # uneven leaves (gathered with padding) and leaves at two depths (combined node by node)
    assert not pairwise_plan(136).uniform and pairwise_plan(136).depth >= 0
    assert pairwise_plan(249).depth == -1
    assert pairwise_plan(1024).uniform and pairwise_plan(1024).depth == 3
    with pytest.raises(ValueError, match="n >= 8"):
        pairwise_plan(7)


def test_signed_zeros_and_specials():
    x = np.full((5, 300), -0.0, F)
    x[1, 17] = np.inf
    x[2, 3], x[2, 200] = np.inf, -np.inf
    x[3, 250] = np.nan
    x[4, :] = 1e-45  # subnormals, kept by numpy
    with np.errstate(all="ignore"):
        want = np.add.reduce(x, axis=-1)
        got = pairwise_sum(NUMPY, x, 300)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert _bits(got)[0] == 0  # +0.0: numpy's reduce starts from the identity +0.0
    for n in range(0, 8):
        assert _bits(pairwise_sum(NUMPY, np.full((1, n), -0.0, F), n))[0] == 0


@pytest.mark.parametrize("layout", ["transposed", "strided", "reversed", "column"])
def test_native_sum_takes_any_view_in_the_documented_order(layout):
    rng = np.random.default_rng(3)
    base = _wide(rng, (300, 260))
    view = {"transposed": base.T, "strided": base[:, ::2], "reversed": base[:, ::-1],
            "column": base[:, :1]}[layout]
    want = pairwise_sum(NUMPY, np.ascontiguousarray(view), view.shape[-1])
    np.testing.assert_array_equal(_bits(native_sum(view)), _bits(want))


def test_interpreter_sum_falls_back_to_the_model(monkeypatch):
    x = _wide(np.random.default_rng(5), (128, 1000))
    fast = NUMPY.sum(x, 1)
    monkeypatch.setattr(numerics, "native_matches", lambda: False)
    np.testing.assert_array_equal(_bits(NUMPY.sum(x, 1)), _bits(fast))
    np.testing.assert_array_equal(_bits(fast), _bits(np.sum(x, axis=1)))


@pytest.mark.parametrize("n", [0, 5, 8, 129, 136, 249, 1000, 4099])
def test_compiled_model_is_numpy_bit_for_bit(n):
    jax = pytest.importorskip("jax")
    from nki_workbench._src.semantics import jax_numerics

    x = _wide(np.random.default_rng(n), (6, n))
    if n:
        x[0] = -0.0
        x[1, n // 2] = np.nan
        x[2, 0] = np.inf
    got = jax.jit(lambda v, z: jax_numerics(z).sum(v, 1))(x, np.int32(0))
    with np.errstate(all="ignore"):
        want = np.add.reduce(x, axis=-1)
    np.testing.assert_array_equal(_bits(np.asarray(got)), _bits(want))
