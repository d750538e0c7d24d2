"""IR: expression algebra, printer <-> parser round trip (incl. edge literals), parse errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nki_workbench import ir
from nki_workbench.ir import (
    Access,
    Alloc,
    Inst,
    IRParseError,
    Kernel,
    Loop,
    Scalar,
    TensorDecl,
    parse,
    parse_expr,
    print_kernel,
)

E = ir.expr
i, j = E.Var("i"), E.Var("j")
P = E.Iota(128, 0, 2)
F = E.Iota(512, 1, 2)


def test_affine_normal_form():
    a = E.add(E.mul(E.add(i, 1), 512), E.neg(E.mul(i, 512)))
    assert a == E.const(512)
    assert E.add(P, E.mul(i, 128)) == E.add(E.mul(128, i), P)
    assert E.to_str(E.add(E.mul(i, 128), P)) == "128*i + {128@0/2}"
    assert E.to_str(E.sub(P, 3)) == "{128@0/2} - 3"


def test_non_affine_atoms_and_bounds():
    e = E.floordiv(E.add(i, 3), 2)
    assert not E.is_affine(e) and E.free_vars(e) == {"i"}
    assert E.bounds(E.add(E.mul(i, 128), P), {"i": (0, 3)}) == (0, 511)
    assert E.bounds(E.mod(i, 4), {"i": (0, 100)}) == (0, 3)


def test_evaluate_broadcasts_iotas():
    v = E.evaluate(E.add(E.mul(P, 2), F), {})
    assert v.shape == (128, 512) and v[3, 5] == 11
    m = E.evaluate(E.land(E.compare("lt", P, 100), E.compare("ge", F, 10)), {})
    assert m.shape == (128, 512) and m.sum() == 100 * 502


def test_grid_shape_and_alignment():
    assert E.grid_shape([E.as_expr(P), E.as_expr(F)]) == (128, 512)
    e = E.align_iotas(E.as_expr(E.Iota(7, 0, 1)), 3)
    assert E.grid_shape([e]) == (1, 1, 7)


exprs = st.recursive(
    st.one_of(st.integers(-50, 50).map(E.const), st.sampled_from([i, j]).map(E.as_expr),
              st.sampled_from([P, F, E.Iota(4, 2, 3)]).map(E.as_expr)),
    lambda c: st.one_of(
        st.tuples(c, c).map(lambda t: E.add(*t)),
        st.tuples(c, st.integers(-5, 5)).map(lambda t: E.mul(*t)),
        st.tuples(c, st.integers(1, 9)).map(lambda t: E.floordiv(*t)),
        st.tuples(c, st.integers(1, 9)).map(lambda t: E.mod(*t))),
    max_leaves=8)
preds = st.recursive(
    st.tuples(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]), exprs, exprs).map(
        lambda t: E.compare(*t)),
    lambda c: st.one_of(st.tuples(c, c).map(lambda t: E.land(*t)),
                        st.tuples(c, c).map(lambda t: E.lor(*t)), c.map(E.lnot)),
    max_leaves=4)


@settings(max_examples=200, deadline=None)
@given(e=st.one_of(exprs, preds))
def test_expression_text_round_trips(e):
    assert parse_expr(E.to_str(e)) == e


def _kernel():
    a = TensorDecl("a", (256, 512), "bfloat16", "hbm", "input")
    out = TensorDecl("out", (256, 512), "float32", "shared_hbm", "output", loc="k.py:3")
    idx = TensorDecl("idx", (128, 1), "int32", "sbuf", loc="k.py:4")
    t = TensorDecl("t", (2, 128, 512), "float32", "sbuf", par_dim=1, loc="k.py:5")
    c = TensorDecl("c", (2, 2), "float32", "shared_hbm", "const", data="AAAAAAAAAAAAAAAAAAAAAA==")
    v = TensorDecl("v", (512, 256), "bfloat16", "hbm", base="a", view="reshape")
    acc_idx = (E.add(E.mul(i, 128), P), E.as_expr(F))
    body = (
        Alloc(out), Alloc(idx), Alloc(c), Alloc(v),
        Loop("i", 0, 2, 1, "affine", (
            Alloc(t),
            Inst("load", (Access("t", (E.const(0), E.as_expr(P), E.as_expr(F))),),
                 (Access("a", acc_idx),), (("dtype", "float32"),),
                 E.compare("lt", E.add(E.mul(i, 128), P), 200), "k.py:7"),
            Inst("exp", (Access("out", acc_idx),), (Access("t", (E.const(0), E.as_expr(P),
                                                                    E.as_expr(F))),),
                 (("acc", "add"), ("dtype", "float32"), ("note", "it's \"quoted\" # x")),
                 None, None),
            Inst("load", (Access("idx", None),), (Access("a", (
                E.as_expr(E.Dyn("idx", (E.as_expr(P), E.const(0)), (128, 1))), E.as_expr(F))),),
                (), None, "k.py:9"),
            Loop("j", 3, 0, -1, "sequential", (), None, (("directives", ("no_reorder",)),)),
        ), "k.py:6"),
        Inst("memset", (Access("t", (E.const(1), E.as_expr(P), E.as_expr(F)), (1, 128, 512)),),
             (Scalar(float("nan")), Scalar(-0.5, "float16"), Scalar(True), Scalar(-3),
              Scalar(float("-inf")), E.add(i, 1)), (("shape", (1, (2, 3), ())), ("x", None),
                                                    ("e", E.compare("lt", i, 3))), None, None),
        Inst("device_print", (), (Access("out", None),), (("prefix", "out:"),), None, None),
    )
    return Kernel("k", (a,), body, ("out",), (2, 3), "trn2",
                  (("has_collectives", True), ("returns", "single")))


def test_kernel_round_trip_with_edge_literals():
    k = _kernel()
    text = print_kernel(k)
    # the edge-literal attributes (shape=, x=, e=) are no front end's: read without validating
    back = parse(text, validate=False)
    # NaN != NaN: compare the text forms, then everything else structurally
    assert print_kernel(back) == text
    assert back.replace(body=()) == k.replace(body=())
    assert "  for i in affine_range(0, 2, 1):  # k.py:6" in text
    assert "alloc t: sbuf float32[2, 128, 512] local par_dim=1  # k.py:5" in text
    assert "mask=(128*i + {128@0/2} < 200)" in text
    assert "dyn(idx[{128@0/2}, 0]:(128, 1))" in text


def test_empty_loop_body_prints_pass():
    k = Kernel("e", (), (Loop("i", 0, 4, 1, "affine", ()),), ())
    assert parse(print_kernel(k)) == k and "pass" in print_kernel(k)


@pytest.mark.parametrize("text,line", [
    ("", None),
    ("kernel k grid=() target=trn1\n  oops ( \n  return ()\n", 2),
    ("kernel k grid=() target=trn1\n  t = load(a[1 +]) \n  return ()\n", 2),
    ("kernel k grid=() target=trn1\n  alloc t: sbuf float32[4] local\n", 2),
])
def test_parse_errors_name_the_line(text, line):
    with pytest.raises(IRParseError) as info:
        parse(text)
    if line is not None:
        assert f"line {line}" in str(info.value)


def test_opcode_table():
    assert ir.opinfo("matmul").engine == "tensor"
    assert ir.opinfo("exp").engine == "scalar"
    assert ir.opinfo("load").engine == "dma"
    with pytest.raises(KeyError, match="nonexistent"):
        ir.opinfo("nonexistent")


def test_loop_trip_count():
    assert Loop("i", 0, 10, 3, "affine", ()).trip_count == 4
    assert Loop("i", 5, 0, -1, "sequential", ()).trip_count == 5


def test_eval_matches_numpy_for_random_affine():
    rng = np.random.default_rng(0)
    for _ in range(20):
        c = rng.integers(-5, 5, 3)
        e = E.add(E.add(E.mul(P, int(c[0])), E.mul(F, int(c[1]))), E.mul(i, int(c[2])))
        v = E.evaluate(e, {"i": 7})
        ref = c[0] * np.arange(128)[:, None] + c[1] * np.arange(512)[None, :] + c[2] * 7
        np.testing.assert_array_equal(np.broadcast_to(v, ref.shape), ref)
