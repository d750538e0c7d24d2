"""The opcode registry: every opcode has one value rule (or a declared special path), one cost
entry, and the opcodes that cannot compile are exactly the declared INTERPRETER_ONLY table."""

import warnings

import numpy as np
import pytest

import nki_workbench
import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench._src.hw.cost import COSTS
from nki_workbench._src.ir import OPCODES
from nki_workbench._src.semantics import VALUE_RULES, Ex, Unsupported
from nki_workbench._src.semantics.registry import (
    COMPILED_SPECIAL,
    EXECUTOR_SPECIAL,
    INTERPRETER_ONLY,
    LOWERED_SPECIAL,
    props,
    registry,
)
from nki_workbench._src.sim.interp import SPECIAL

ALL = sorted(OPCODES)


def test_registry_covers_every_opcode_once():
    reg = registry()
    assert sorted(reg) == ALL
    assert len(ALL) > 100  # nl + nisa + collectives
    assert all(p.name == n and p.engine == OPCODES[n].engine for n, p in reg.items())
    assert set(VALUE_RULES) <= set(OPCODES), set(VALUE_RULES) - set(OPCODES)


@pytest.mark.parametrize("op", ALL)
def test_one_value_rule_or_a_declared_special_path(op):
    has_rule, special = op in VALUE_RULES, EXECUTOR_SPECIAL.get(op)
    assert has_rule != (special is not None), f"'{op}': rule={has_rule}, special={special!r}"
    if special is not None:
        assert op in SPECIAL, f"'{op}' is declared special but the interpreter has no path"
        assert props(op).special == special


@pytest.mark.parametrize("op", ALL)
def test_one_cost_entry(op):
    assert op in COSTS, f"opcode '{op}' has no cost entry (hw/cost_table.py)"


def test_what_cannot_compile_is_declared():
    # structurally interpreter-only: no value rule, or an interpreter path with no lowering
    structural = {op for op in OPCODES if op != "all_reduce" and (
        op not in LOWERED_SPECIAL and
        (op not in VALUE_RULES or (op in SPECIAL and op not in COMPILED_SPECIAL)))}
    assert structural <= set(INTERPRETER_ONLY), structural - set(INTERPRETER_ONLY)
    assert all(isinstance(why, str) and why for why in INTERPRETER_ONLY.values())
    assert {op for op, p in registry().items() if not p.compiles} == set(INTERPRETER_ONLY)


@pytest.mark.parametrize("op", ["rand", "dropout", "random_seed", "device_print"])
def test_declared_nl_rules_refuse_to_lower(op):
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from nki_workbench._src.ir import Inst
    from nki_workbench._src.semantics import jax_numerics
    inst = Inst(op, (), ())
    ex = Ex(inst, [jnp.ones((4, 2), jnp.float32), jnp.float32(0.5)], None, None, [(4, 2)])
    with pytest.raises(Unsupported):
        VALUE_RULES[op](jax_numerics(), ex)


def test_registry_properties_drive_the_written_masks():
    assert props("exp").lanewise and props("tensor_tensor").lanewise and props("load").lanewise
    assert not props("load_transpose2d").lanewise and not props("atomic_rmw").lanewise
    assert props("matmul").cross_partition and props("nc_matmul").cross_partition
    assert not props("bn_stats").cross_partition
    assert props("softmax").rowwise and not props("tensor_reduce").rowwise
    assert props("no_such_op") is None


def _rand_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, value=nl.multiply(t, nl.rand((128, 64), dtype=nl.float32)))
    return out


def test_fallback_is_a_compiled_fallback_warning_not_a_print(capsys):
    pytest.importorskip("jax")
    from nki_workbench._src.sim import jax_exec
    a = np.ones((128, 64), np.float32)
    k = nki.trace_kernel(_rand_kernel, a).kernel
    jax_exec._NOTICED.clear()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = jax_exec.run_compiled(k, {k.params[0].name: a})
    got = [w for w in rec if issubclass(w.category, nki_workbench.CompiledFallbackWarning)]
    assert len(got) == 1 and "'rand'" in str(got[0].message), [str(w.message) for w in rec]
    assert issubclass(nki_workbench.CompiledFallbackWarning, nki_workbench.NkiWarning)
    out = next(iter(out.values()))
    assert out.shape == (128, 64) and 0.0 <= out.min() and out.max() < 1.0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("op", sorted(LOWERED_SPECIAL))
def test_lowered_special_has_a_compiled_lowering(op):
    from nki_workbench._src.sim.jax_dma import LOWERINGS
    assert op in LOWERINGS, f"'{op}' is declared LOWERED_SPECIAL but sim/jax_dma.py has no lowering"
    assert op in SPECIAL and op not in INTERPRETER_ONLY
