"""Consistent options: SimParams(backend=), platform_target=, opt-in process settings, seams."""

import collections
import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

import nki_workbench
import nki_workbench.nki.language as nl
from nki_workbench import SimParams, nki, simulate_backend_config
from nki_workbench._src import execution, tree
from nki_workbench._src.dispatch import kernel_parts
from nki_workbench._src.encode import UnifiedKernel

A = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)


def triple(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), 3.0))
    return out


@pytest.fixture
def compiled_calls(monkeypatch):
    from nki_workbench._src.sim import jax_exec
    monkeypatch.delenv("NKI_WORKBENCH_SIM_BACKEND", raising=False)
    calls = []
    real = jax_exec.run_compiled

    def counting(*args, **kwargs):
        calls.append(args[0].kernel.name)
        return real(*args, **kwargs)
    monkeypatch.setattr(jax_exec, "run_compiled", counting)
    return calls


def test_simparams_backend_picks_the_executor(compiled_calls):
    # (the suite's round-trip hook may re-run a kernel's first simulation, same backend)
    out = nki.simulate_kernel(triple, A, params=SimParams(backend="jax"))
    np.testing.assert_array_equal(out, 3 * A)
    assert compiled_calls and set(compiled_calls) == {"triple"}
    seen = len(compiled_calls)
    np.testing.assert_array_equal(
        nki.simulate_kernel(triple, A, params=SimParams(backend="numpy")), 3 * A)
    assert len(compiled_calls) == seen
    with pytest.raises(ValueError, match="SimParams.backend must be"):
        SimParams(backend="torch")


def test_old_backend_keywords_still_work_with_a_deprecation_warning(compiled_calls):
    counts = []
    with pytest.warns(DeprecationWarning, match=r"simulate_kernel\(backend=\.\.\.\)"):
        np.testing.assert_array_equal(nki.simulate_kernel(triple, A, backend="jax"), 3 * A)
    counts.append(len(compiled_calls))
    with pytest.warns(DeprecationWarning, match=r"inspect\(sim_backend=\.\.\.\)"):
        insp = nki_workbench.inspect(triple, A, platform_target="trn1", sim_backend="jax")
    np.testing.assert_array_equal(insp.outputs, 3 * A)
    counts.append(len(compiled_calls))
    with pytest.warns(DeprecationWarning, match=r"simulate_backend_config\(backend=\.\.\.\)"):
        back = simulate_backend_config(insp.backend_config, A, backend="jax")
    np.testing.assert_array_equal(back, 3 * A)
    counts.append(len(compiled_calls))
    assert 0 < counts[0] < counts[1] < counts[2]  # each call ran the compiled program


def test_platform_target_is_the_one_spelling():
    one = nki_workbench.simulate_ranks(triple, [(A,), (A + 1,)], platform_target="trn2")
    np.testing.assert_array_equal(one[1], 3 * (A + 1))
    with pytest.warns(DeprecationWarning, match=r"simulate_ranks\(target=\.\.\.\)"):
        old = nki_workbench.simulate_ranks(triple, [(A,)], target="trn2")
    np.testing.assert_array_equal(old[0], one[0])
    with pytest.raises(TypeError, match="both platform_target= and"):
        nki_workbench.simulate_ranks(triple, [(A,)], platform_target="trn2", target="trn2")


def _python(code: str, **env) -> str:
    full = {k: v for k, v in os.environ.items() if k != "NKI_WORKBENCH_TUNE_MALLOC"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, check=True).stdout.strip()


def test_malloc_tuning_only_when_asked():
    code = ("import numpy as np, nki_workbench, nki_workbench.nki.language as nl\n"
            "from nki_workbench import nki\nfrom nki_workbench._src import platform\n"
            "def k(a):\n    o = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)\n"
            "    nl.store(o, nl.load(a))\n    return o\n"
            "nki.simulate_kernel(k, np.ones((4, 4), np.float32))\n"
            "print(platform.malloc_tuning_applied())")
    assert _python(code) == "False"
    expected = "True" if sys.platform.startswith("linux") else "False"
    assert _python(code, NKI_WORKBENCH_TUNE_MALLOC="1") == expected


Pair = collections.namedtuple("Pair", "x y")


@dataclasses.dataclass(frozen=True)
class Cfg:
    w: object
    scale: float = 1.0


def test_the_tree_helper_walks_and_rebuilds_every_container():
    v = {"a": [1, (2, 3)], "p": Pair(4, Cfg(5, 6.0))}
    assert tree.leaves_with_paths(v, "arg") == [
        ("arg_a_0", 1), ("arg_a_1_0", 2), ("arg_a_1_1", 3), ("arg_p_0", 4), ("arg_p_1_w", 5),
        ("arg_p_1_scale", 6.0)]
    doubled = tree.map_leaves(lambda x: 2 * x, v)
    assert doubled == {"a": [2, (4, 6)], "p": Pair(8, Cfg(10, 12.0))}
    assert isinstance(doubled["p"], Pair) and isinstance(doubled["p"].y, Cfg)
    named = tree.map_leaves(lambda p, x: p, v, lambda x: isinstance(x, int), "arg")
    assert named["p"].y == Cfg("arg_p_1_w", 6.0)
    assert tree.any_leaf(lambda x: x == 5, v) and not tree.any_leaf(lambda x: x == 7, v)


def test_kernel_parts_is_the_one_split_of_kernel_like_values():
    jitted = nki.jit(triple, platform_target="trn2")[2]
    parts = kernel_parts(jitted)
    assert (parts.func, parts.grid, parts.platform_target) == (triple, (2,), "trn2")
    assert parts.cache is jitted.trace_cache
    bm = kernel_parts(nki.baremetal(triple, platform_target="trn2"))
    assert bm.func is triple and bm.options == {"platform_target": "trn2"}
    assert kernel_parts(triple).cache is None
    with pytest.raises(TypeError, match="expected an NKI kernel"):
        kernel_parts(42)


def test_compiled_programs_are_a_bounded_cache_keyed_on_the_kernel(monkeypatch):
    monkeypatch.setattr(execution._PROGRAMS, "size", 2)
    traced = [UnifiedKernel(triple, platform_target="trn1").dump_config(
        np.zeros((128, n), np.float32)).traced for n in (1, 2, 3)]
    progs = [execution.program_for(t) for t in traced]
    assert execution.program_for(traced[2]) is progs[2]
    assert execution.program_for(traced[2].kernel) is progs[2]
    assert len(execution._PROGRAMS) <= 2
    assert execution.program_for(traced[0]) is not progs[0]  # dropped, compiled again
