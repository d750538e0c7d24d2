"""Every kernel that exists in both APIs in our tests and tutorials traces to the same IR and
simulates to bit-identical outputs, on the interpreter and on the compiled executor (conftest
runs this module once per executor; on the compiled one each pair must really run compiled).

The pairs are ``kernels_current.PAIRS`` plus each tutorial notebook cell that defines a kernel
for both APIs (``@legacy.jit def X_legacy`` next to ``@nki.jit def X_today``), executed from
the notebook itself, so the tutorial's claims are checked here too.
"""

import json
import linecache
import pathlib
import re
import warnings

import numpy as np
import pytest
from kernels_current import PAIRS, nki

from nki_workbench import SimParams, inspect
from nki_workbench._src.sim.jax_static import why_interpreted
from nki_workbench.ir import print_kernel
from nki_workbench.nki import simulate_kernel, trace_kernel

_LOC = re.compile(r"\s+# \S+:\d+$", re.M)
_NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
_LEGACY_DEF = re.compile(r"@legacy\.jit[^\n]*\ndef (\w+)_legacy\(")
_TODAY_DEF = re.compile(r"@nki\.jit[^\n]*\ndef (\w+)_today\(")

_RNG = np.random.default_rng(11)
# why: the tutorials' kernels take these inputs (keyed "notebook stem:kernel stem")
TUTORIAL_INPUTS = {
    "09_today_nki:matmul": ((_RNG.standard_normal((256, 256)).astype(np.float32),
                             _RNG.standard_normal((256, 1024)).astype(np.float32)),
                            lambda a, b: a.T @ b),
}


def _tutorial_pairs() -> tuple:
    """``(pairs, names)``: the notebooks' two-API kernels, defined by running their cells."""
    pairs, found = [], []
    for nb in sorted(_NOTEBOOKS.glob("*.ipynb")):
        doc = json.loads(nb.read_text())
        cells = [("".join(c["source"]), i) for i, c in enumerate(doc["cells"])
                 if c["cell_type"] == "code"]
        both = sorted({f"{nb.stem}:{k}" for src, _ in cells
                       for k in set(_LEGACY_DEF.findall(src)) & set(_TODAY_DEF.findall(src))})
        if not both:
            continue
        found += both
        ns: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for src, i in cells:
                if src.lstrip().startswith(("%", "!")) or "NkiError" in src or "try:" in src:
                    continue  # why: magics and the error demonstrations are not definitions
                fn = f"{nb.stem}.ipynb-cell{i}"
                linecache.cache[fn] = (len(src), None, src.splitlines(True), fn)
                try:
                    exec(compile(src, fn, "exec"), ns)
                except NameError:
                    continue  # why: a cell using inputs defined later in the tutorial
                if all(f"{k.split(':')[1]}_today" in ns for k in both):
                    break
        for key in both:
            stem = key.split(":")[1]
            if key in TUTORIAL_INPUTS:
                args, ref = TUTORIAL_INPUTS[key]
                pairs.append((key, ns[f"{stem}_legacy"], ns[f"{stem}_today"], args, ref, ()))
    return pairs, found


TUTORIAL_PAIRS, TUTORIAL_FOUND = _tutorial_pairs()
ALL_PAIRS = PAIRS + TUTORIAL_PAIRS
_IDS = [p[0] for p in ALL_PAIRS]


def _ir(kernel, args):
    text = print_kernel(trace_kernel(kernel, *args).kernel)
    text = _LOC.sub("", text)
    return re.sub(r"^kernel \w+", "kernel K", text)


def _launch(k, grid):
    return k[grid] if grid else k


def _compiled_runs(kernel, args) -> int:
    """How often the compiled program of ``kernel``'s IR ran (equal IRs share one program)."""
    from nki_workbench._src.sim import jax_exec
    return jax_exec.compiled(trace_kernel(kernel, *args).kernel).runs


def test_every_two_api_kernel_of_the_tutorials_is_a_pair():
    assert TUTORIAL_FOUND, "notebooks/09_today_nki.ipynb writes one kernel in both APIs"
    assert sorted(p[0] for p in TUTORIAL_PAIRS) == TUTORIAL_FOUND, \
        "give each tutorial pair its inputs in TUTORIAL_INPUTS"
    assert len(ALL_PAIRS) == len(set(_IDS)) == len(PAIRS) + len(TUTORIAL_FOUND)


@pytest.mark.parametrize("name,legacy,current,args,ref,grid", ALL_PAIRS, ids=_IDS)
def test_same_ir(name, legacy, current, args, ref, grid):
    assert _ir(_launch(legacy, grid), args) == _ir(_launch(current, grid), args)


@pytest.mark.parametrize("name,legacy,current,args,ref,grid", ALL_PAIRS, ids=_IDS)
def test_same_outputs_and_reference(name, legacy, current, args, ref, grid, executor):
    runs = [_compiled_runs(_launch(k, grid), args) for k in (legacy, current)]
    old = simulate_kernel(_launch(legacy, grid), *args)
    new = nki.simulate(_launch(current, grid))(*args)
    if executor == "jax":  # why: each kernel ran as its compiled program, not interpreted
        assert [_compiled_runs(_launch(k, grid), args) for k in (legacy, current)] == \
            [r + 1 for r in runs]
    np.testing.assert_array_equal(old, new)
    np.testing.assert_allclose(new, ref(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,legacy,current,args,ref,grid", ALL_PAIRS, ids=_IDS)
def test_every_pair_compiles(name, legacy, current, args, ref, grid):
    """None of the pairs needs the interpreter: the jax run above really is compiled."""
    assert why_interpreted(trace_kernel(_launch(current, grid), *args).kernel, SimParams()) is None


@pytest.mark.parametrize("name,legacy,current,args,ref,grid", ALL_PAIRS[:2] + TUTORIAL_PAIRS,
                         ids=[p[0] for p in ALL_PAIRS[:2] + TUTORIAL_PAIRS])
def test_same_timeline(name, legacy, current, args, ref, grid):
    a = inspect(legacy, *args)
    b = inspect(current, *args)
    assert a.latency_us == pytest.approx(b.latency_us, rel=0, abs=0)
    assert [e.engine for e in a.timeline.events] == [e.engine for e in b.timeline.events]
