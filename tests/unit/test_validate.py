"""The IR validator: one test per rule, the budget and the debug switch (its mutation fuzzing
lives in ``tests/reliability/test_ir_fuzz.py``)."""


import ir_mutations as M
import numpy as np
import pytest

import nki_workbench._src.ir.budget as B
import nki_workbench._src.ir.validate as V
import nki_workbench.nki.language as nl
from nki_workbench import simulate_backend_config
from nki_workbench._src.alloc import passes as trace_kernel_mod
from nki_workbench._src.alloc.passes import trace_kernel
from nki_workbench._src.ir import OPCODES, IRParseError, format_inst, parse, print_kernel
from nki_workbench._src.ir import expr as E
from nki_workbench._src.ir.nodes import Access, Alloc, Inst, Kernel, Loop, TensorDecl
from nki_workbench.nki import NkiError

CASES = M.base_cases()
BY_NAME = {name: (cfg, arrays) for name, cfg, arrays in CASES}


def _text(name):
    return BY_NAME[name][0]["serialize_ir_string"]


def _line_of(text, fragment):
    """1-based line of the first line of ``text`` containing ``fragment``."""
    for n, line in enumerate(text.splitlines(), 1):
        if fragment in line:
            return n
    raise AssertionError(f"{fragment!r} not in the IR")


def _rejects(text, old, new, *, expect, at=None):
    """Replace ``old`` by ``new`` (once) and check parse names the rule, the line and the node."""
    assert old in text, old
    bad = text.replace(old, new, 1)
    line = _line_of(bad, at if at is not None else new)
    with pytest.raises(V.InvalidIRError) as info:
        parse(bad)
    err = info.value
    assert isinstance(err, NkiError) and err.code == "wb_invalid_ir"
    assert err.line == line, (err.line, line, str(err))
    assert f"IR line {line}" in str(err) and expect in str(err)
    return err


# ----------------------------------------------------------------------------- one test per rule
def test_valid_configs_pass_and_run():
    for name, cfg, arrays in CASES:
        k = parse(cfg["serialize_ir_string"])
        assert V.validate(k) is k
        assert M.run_case(cfg, cfg["serialize_ir_string"], arrays)[0] == "ran", name


def test_undeclared_tensor():
    err = _rejects(_text("add"), "t_3 = add(t_1, t_2)", "t_3 = add(t_1, ghost)",
                   expect="names tensor 'ghost', which is not declared")
    assert err.inst.startswith("t_3 = add(t_1, ghost)")


def test_tensor_used_before_its_declaration():
    text = _text("add")
    bad = text.replace("  t = load(a) [dtype='float32']", "  t_9 = load(t_1) [dtype='float32']")
    with pytest.raises(V.InvalidIRError, match="'t_9'"):
        parse(bad)


def test_index_arity_differs_from_rank():
    err = _rejects(_text("matmul"), "load(a_t[32*k + {32@0/2}, {32@1/2}])",
                   "load(a_t[32*k + {32@0/2}, {32@1/2}, 0])",
                   expect="indexes 'a_t' with 3 expression(s), but 'a_t' has rank 2")
    assert "at = load(a_t[" in err.inst


def test_access_shape_must_hold_the_indexed_elements():
    _rejects(_text("matmul"), "  acc = memset(0)", "  acc:(1, 10000000) = memset(0)",
             at="acc:(1, 10000000)", expect="access shape (1, 10000000) of 'acc' does not hold "
             "the 2048 elements its index selects")


def test_index_grids_stay_within_bounds():
    big = "{" + str(1 << 40) + "@0/2}"
    _rejects(_text("masked"), "mask=(32*i + {32@0/2} < 80)  # unit/ir_mutations.py:65",
             f"mask=(32*i + {big} < 80)  # unit/ir_mutations.py:65", at=big,
             expect="malformed index grid")
    _rejects(_text("masked"), "t = load(a[32*i + {32@0/2}, {16@1/2}])",
             "t = load(a[32*i + {32@0/2}, {16@0/2}])", at="{16@0/2}",
             expect="operand 0: its index grids do not broadcast together")


def test_unknown_opcode():
    err = _rejects(_text("add"), "t_1 = exp(t)", "t_1 = frobnicate(t)",
                   expect="unknown opcode 'frobnicate'")
    assert "frobnicate(t)" in err.inst


def test_unknown_attribute():
    _rejects(_text("add"), "t_1 = exp(t) [dtype='float32']",
             "t_1 = exp(t) [dtype='float32', transpose_x=True]",
             expect="opcode 'exp' has no attribute 'transpose_x'")


def test_attribute_of_the_wrong_type():
    _rejects(_text("masked"), "keepdims=True", "keepdims=1", at="keepdims=1",
             expect="attribute 'keepdims' must be bool, got 1")


def test_bad_dtype_in_a_declaration_and_in_an_attribute():
    _rejects(_text("add"), "alloc t_1: sbuf float32[32, 16]", "alloc t_1: sbuf float64[32, 16]",
             expect="unknown dtype 'float64' of 't_1'")
    _rejects(_text("add"), "t_1 = exp(t) [dtype='float32']", "t_1 = exp(t) [dtype='fp32']",
             expect="unknown dtype 'fp32'")
    _rejects(_text("spmd"), "multiply(t, 2.0)", "multiply(t, float77(2.0))",
             expect="unknown dtype 'float77'")


def test_unbound_variable_in_an_index_and_in_a_mask():
    _rejects(_text("matmul"), "load(b[32*k + {32@0/2}", "load(b[32*j + {32@0/2}",
             expect="uses variable 'j', which no enclosing loop binds")
    _rejects(_text("masked"), "mask=(32*i + {32@0/2} < 80)  # unit/ir_mutations.py:65",
             "mask=(32*q + {32@0/2} < 80)  # unit/ir_mutations.py:65",
             at="mask=(32*q", expect="the mask uses variable 'q'")
    # a loop variable is bound only inside its loop; pid1 does not exist on a 1-D grid
    _rejects(_text("spmd"), "load(a[16*pid0", "load(a[16*pid1",
             expect="uses variable 'pid1', which no enclosing loop binds (bound: pid0)")


def test_shapes_are_positive_integers():
    _rejects(_text("add"), "alloc t_2: sbuf float32[32, 16]", "alloc t_2: sbuf float32[32, 0]",
             expect="shape (32, 0) of 't_2' is not a tuple of at most 8 positive integers")
    _rejects(_text("add"), "param b: hbm float32[32, 16]", "param b: hbm float32[32, -16]",
             expect="shape (32, -16) of 'b'")


def test_loops_rules():
    _rejects(_text("matmul"), "affine_range(0, 2, 1)", "affine_range(0, 2, 0)",
             expect="non-zero step")
    _rejects(_text("matmul"), "affine_range(0, 2, 1)", "parallel_range(0, 2, 1)",
             expect="unknown loop kind 'parallel'")
    a = TensorDecl("a", (8, 4), "float32", "hbm", "input")
    rebinds = Kernel("k", (a,), (Loop("pid0", 0, 2, 1, "affine", ()),), (), grid=(2,))
    with pytest.raises(V.InvalidIRError, match="'pid0' is already bound") as info:
        V.validate(rebinds)
    assert info.value.line == 3 and info.value.inst.startswith("for pid0 in affine_range")


def test_buffer_kind_and_par_dim():
    _rejects(_text("add"), "alloc t: sbuf", "alloc t: gpu", expect="unknown buffer 'gpu'")
    _rejects(_text("add"), "alloc t_1: sbuf float32[32, 16] local",
             "alloc t_1: sbuf float32[32, 16] weird", expect="unknown tensor kind 'weird'")
    _rejects(_text("add"), "alloc t_1: sbuf float32[32, 16] local",
             "alloc t_1: sbuf float32[32, 16] local par_dim=2", expect="par_dim 2 of 't_1'")


def test_kernel_level_rules():
    text = _text("add")
    for old, new, expect in [("return ('out',)", "return ('ghost',)", "returns 'ghost'"),
                             ("target=trn1", "target=trn9", "unknown target 'trn9'"),
                             ("[returns='single']", "[returns='single', bogus=1]",
                              "unknown kernel attribute")]:
        with pytest.raises(V.InvalidIRError, match=expect):
            parse(text.replace(old, new))


def test_indirect_index_and_views_name_declared_tensors():
    a = TensorDecl("a", (8, 4), "float32", "hbm", "input")
    t = TensorDecl("t", (8, 4), "float32", "sbuf")
    dyn = E.as_expr(E.Dyn("idx", (E.const(0), E.const(0)), (1, 1)))
    load = Inst("load", (Access("t"),), (Access("a", (dyn, E.as_expr(E.Iota(4, 1, 2)))),),
                (("dtype", "float32"),))
    with pytest.raises(V.InvalidIRError, match="run-time indices from undeclared tensor 'idx'"):
        V.validate(Kernel("k", (a,), (Alloc(t), load), ("t",)))
    view = TensorDecl("v", (4, 8), "float32", "sbuf", base="nope", view="reshape")
    with pytest.raises(V.InvalidIRError, match="'v' views undeclared tensor 'nope'"):
        V.validate(Kernel("k", (a,), (Alloc(view),), ()))


def test_line_numbers_follow_the_printed_ir():
    k = parse(_text("matmul"))
    lines = V.printed_lines(k)
    printed = print_kernel(k).splitlines()
    for s in (k.body[-1], k.body[3].body[-1]):
        assert printed[lines[id(s)] - 1].strip() == format_inst(s)


def test_every_opcode_has_an_attribute_entry_and_every_attribute_a_type():
    assert set(V.ATTRIBUTES) == set(OPCODES), set(V.ATTRIBUTES) ^ set(OPCODES)
    names = set().union(*V.ATTRIBUTES.values())
    assert names <= set(V.ATTR_TYPES), names - set(V.ATTR_TYPES)


def test_a_partial_opcode_table_can_be_passed():
    with pytest.raises(V.InvalidIRError, match="unknown opcode 'exp'"):
        parse(_text("add"), opcodes={k: v for k, v in OPCODES.items() if k != "exp"})


# ----------------------------------------------------------------------------- parse errors
@pytest.mark.parametrize("old,new", [
    ("float32[32, 16] input", "float32[32, 16] input shape=5"),     # unknown decl field
    ("t_1 = exp(t)", "t_1 = exp(" + "(" * 5000 + "t"),               # deep nesting
    ("load(a)", "load(a[mod(1, 0)])"),                              # modulo zero
    ("return ('out',)", "return 5"),                                # not a tuple
    ("grid=()", "grid=7"),
])
def test_unreadable_text_is_an_ir_parse_error_with_a_line(old, new):
    with pytest.raises(IRParseError, match="line"):
        parse(_text("add").replace(old, new, 1))


# ------------------------------------------------------------------- simulate_backend_config
def test_simulate_backend_config_rejects_bad_ir_before_running():
    cfg, arrays = BY_NAME["add"]
    text = cfg["serialize_ir_string"].replace("add(t_1, t_2)", "add(t_1, ghost)")
    outcome, exc, _ = M.run_case(cfg, text, arrays)
    assert outcome == "rejected" and exc.code == "wb_invalid_ir" and "ghost" in str(exc)


def test_what_the_validator_cannot_see_still_becomes_an_nki_error():
    cfg, arrays = BY_NAME["isa"]
    text = cfg["serialize_ir_string"].replace("op0='multiply'", "op0='frobnicate'")
    outcome, exc, _ = M.run_case(cfg, text, arrays)
    assert outcome == "rejected" and isinstance(exc, NkiError), exc


@pytest.mark.timeout(30)  # refused before running: never 10**7 trips
def test_budget_refuses_a_huge_trip_count_at_once():
    cfg, arrays = BY_NAME["masked"]
    text = cfg["serialize_ir_string"].replace("sequential_range(0, 3, 1)",
                                              "sequential_range(0, 10000000, 1)")
    outcome, exc, _ = M.run_case(cfg, text, arrays)
    assert outcome == "rejected" and exc.code == "wb_invalid_ir"
    assert "40,000,000 steps, over the budget of 1,000,000" in str(exc)


def test_work_estimate_and_explicit_budgets():
    cfg, arrays = BY_NAME["matmul"]
    k = parse(cfg["serialize_ir_string"])
    est = B.estimate_work(k)
    assert est["steps"] == 1 + 2 * 3 + 1
    assert est["bytes"] == 4 * (64 * 32 + 64 * 64 + 2 * 32 * 64 + 32 * 32 + 32 * 64)
    with pytest.raises(V.InvalidIRError, match="8 steps, over the budget of 3"):
        B.check_budget(k, B.Budget(steps=3))
    s = M._config(cfg, cfg["serialize_ir_string"])
    with pytest.raises(NkiError, match="budget"):
        simulate_backend_config(s, *arrays, budget=B.Budget(bytes=1000))
    ok = simulate_backend_config(s, *arrays, budget=None)
    np.testing.assert_allclose(ok, arrays[0].T @ arrays[1], rtol=1e-4, atol=1e-4)


def test_ir_that_contradicts_its_config_is_refused():
    cfg, arrays = BY_NAME["matmul"]  # 4 loop trips instead of 2: twice the MACs the config says
    text = cfg["serialize_ir_string"].replace("affine_range(0, 2, 1)", "affine_range(0, 4, 1)")
    outcome, exc, _ = M.run_case(cfg, text, arrays)
    assert outcome == "rejected" and "matmul_mac_count does not match" in str(exc)
    cfg, arrays = BY_NAME["add"]  # the output grows: serialize_dims says [32, 16]
    text = cfg["serialize_ir_string"].replace("alloc out: shared_hbm float32[32, 16]",
                                              "alloc out: shared_hbm float32[32, 1000000]")
    outcome, exc, _ = M.run_case(cfg, text, arrays)
    assert outcome == "rejected" and "serialize_dims does not match" in str(exc)


def test_on_chip_tiles_must_fit_the_target():
    _rejects(_text("add"), "alloc t_1: sbuf float32[32, 16]", "alloc t_1: sbuf float32[256, 16]",
             expect="'t_1' spans 256 partitions, more than the 128 of trn1")
    _rejects(_text("matmul"), "alloc acc: psum float32[32, 64]",
             "alloc acc: psum float32[32, 1024]",
             expect="psum tensor 'acc' needs 4096 bytes per partition, more than the 2048")


# ----------------------------------------------------------------------------- debug switch
def _tiny(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) * 2.0)
    return out


def test_env_switch_validates_every_trace(monkeypatch):
    seen = []
    monkeypatch.setattr(trace_kernel_mod, "validate", lambda k: seen.append(k.name))
    a = np.ones((4, 4), np.float32)
    monkeypatch.delenv(V.VALIDATE_ENV, raising=False)
    trace_kernel(_tiny, (a,))
    assert seen == []
    monkeypatch.setenv(V.VALIDATE_ENV, "1")
    trace_kernel(_tiny, (a,))
    assert seen == ["tiny"]


# Mutation fuzzing (10 000 mutated configs and a hypothesis twin): tests/reliability/test_ir_fuzz.py
