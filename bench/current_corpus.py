"""Run a public corpus of ``import nki`` kernels on the workbench and print a pass/fail table.

Usage::

    python bench/current_corpus.py FOLDER [--deps DIR] [-k EXPR] [--markers fast] [--timeout S]

``FOLDER`` is a checkout of aws-neuron/nki-library (kernels under ``src/``, pytest integration
tests under ``test/integration`` with PyTorch goldens). Its harness has a CPU-simulation mode
(``--test-mode=simulation``) that imports a ``nki_cpu_simulator`` package and calls
``nki.cpu_simulate(kernel)[lnc](**inputs)``; this script writes that package as a thin shim
over ``nki_workbench.current`` (so every kernel runs unmodified through the ``import nki``
alias, on the workbench's IR and simulator, with the harness's own goldens and tolerances),
runs the harness's fast tests, and prints one row per case with the first line of the reason
for each failure. ``--deps`` names a ``pip install --target`` folder holding the harness's own
infrastructure packages (fabric2, boto3, pytest-html, plotext); nothing is installed here.
A ``.py`` file or folder of plain scripts is run as ``python FILE`` instead (exit 0 = pass),
for kernels whose goldens are checked in their ``__main__`` (SDK / nki-samples tutorials).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[1]

# module of the shim -> source (the harness imports these names; see its simulation_setup.py)
_SHIM = {
    "nki_cpu_simulator/__init__.py": "",
    "nki_cpu_simulator/nki/__init__.py": """
        import sys
        import nki_workbench.current as _cur
        from nki_workbench.current import *  # noqa
        from nki_workbench.current import isa, language, simulate  # noqa

        class _Sim:
            def __init__(self, kernel):
                self.kernel = kernel
            def __getitem__(self, lnc):
                k = self.kernel if isinstance(self.kernel, _cur.Kernel) else _cur.jit(self.kernel)
                return simulate(k[lnc] if int(lnc) > 1 else k)
            def __call__(self, *a, **kw):
                return self[1](*a, **kw)

        def cpu_simulate(kernel):
            return _Sim(kernel)

        from nki_cpu_simulator.nki.language import dtypes as dtype  # noqa: E402

        def __getattr__(name):
            return getattr(_cur, name)
    """,
    "nki_cpu_simulator/nki/isa/__init__.py": """
        from nki_workbench.current.isa import *  # noqa
        from nki_workbench.current.isa import constants  # noqa
    """,
    "nki_cpu_simulator/nki/isa/constants.py": "from nki_workbench.current.isa.constants import *",
    "nki_cpu_simulator/nki/language/__init__.py": """
        import nki_workbench.current.language as _nl
        globals().update({k: v for k, v in vars(_nl).items() if not k.startswith("__")})
    """,
    "nki_cpu_simulator/nki/language/dtypes.py":
        "from nki_workbench.current.language import *  # noqa",
    "nki_cpu_simulator/nki/builtin.py": "",
    "nki_cpu_simulator/nki/compiler.py": "",
    "nki_cpu_simulator/nki/tensor.py": "from nki_workbench.current.language import tensor  # noqa",
    "nki_cpu_simulator/nki/typing.py": "from nki_workbench.nki.typing import *  # noqa",
    # the harness casts with AWS's neuron_dtypes; ml_dtypes covers the dtypes it names
    "neuron_dtypes/__init__.py": """
        import ml_dtypes, numpy as np
        from ml_dtypes import bfloat16, float8_e4m3, float8_e4m3fn, float8_e5m2  # noqa
        finfo = ml_dtypes.finfo
        class _Packed:  # the MX x4 containers: named only (no workbench support)
            def __init__(self, name):
                self.name = name
        float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4 = (
            _Packed(n) for n in ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"))
        def static_cast(x, dtype):
            return np.asarray(x).astype(dtype)
        def is_float_type(dtype):
            return np.dtype(dtype).kind == "f" or "float" in str(dtype)
        def sizeinbytes(dtype):
            return np.dtype(dtype).itemsize
    """,
}


# why: the harness's host-locking helpers (hardware runs only) import a module its public
# checkout does not ship; simulation never calls them
_LOCK_STUB = (
    "m = types.ModuleType('test.utils.scripts.remote_lock_scripts'); "
    "m.LockStatus = enum.Enum('LockStatus', 'ALLOCATED RELEASED DRAINED DRAINING UNDRAINED "
    "NO_CORES ERROR FLOCK_TIMEOUT'); m.LockResult = type('LockResult', (), {}); "
    "pkg = types.ModuleType('test.utils.scripts'); pkg.remote_lock_scripts = m; "
    "sys.modules['test.utils.scripts'] = pkg; "
    "sys.modules['test.utils.scripts.remote_lock_scripts'] = m; "
    "pa = types.ModuleType('test.utils.perf_analysis_private'); "
    "pa.analyze_trace = lambda *a, **k: None; sys.modules[pa.__name__] = pa; ")


# why: the harness's Orchestrator sets `_compiled_kernel` only when it compiles, which simulation
# mode skips, and then reads it after the simulated inference
_ORCH_FIX = ("import test.utils.test_orchestrator as _o; "
             "_o.Orchestrator._compiled_kernel = None; ")


def write_shim(where: pathlib.Path) -> None:
    """Write the ``nki_cpu_simulator`` shim (and a ``neuron_dtypes`` stand-in) under ``where``."""
    for rel, src in _SHIM.items():
        p = where / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src).lstrip())


def _reason(case) -> str:
    for tag in ("failure", "error"):
        el = case.find(tag)
        if el is not None:
            text = (el.get("message") or el.text or "").strip().splitlines()
            return (text[0] if text else tag)[:150]
    el = case.find("skipped")
    if el is not None:
        return "skipped: " + (el.get("message") or "")[:120]
    return ""


def run_library(folder: pathlib.Path, deps: str | None, expr: str | None, markers: str,
                timeout: int, verbose: bool = False) -> list:
    """Run the harness's tests in simulation mode; returns ``(case, status, reason)`` rows."""
    with tempfile.TemporaryDirectory() as tmp:
        shim = pathlib.Path(tmp) / "shim"
        write_shim(shim)
        xml = pathlib.Path(tmp) / "junit.xml"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(shim)] + ([deps] if deps else []) + [str(folder), str(folder / "src"),
                                                       str(ROOT)])
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        args = ["test/integration", "-q", "-p", "no:cacheprovider", "--test-mode=simulation",
                "-m", markers, f"--junitxml={xml}", "-o", "addopts=", "--disable-warnings",
                "--continue-on-collection-errors"]
        if expr:
            args += ["-k", expr]
        # why: the harness imports `nki` before it switches to simulation mode: the alias first
        boot = ("import sys, types, enum, pytest; from nki_workbench import compat; "
                "compat.install(); " + _LOCK_STUB + _ORCH_FIX + f"sys.exit(pytest.main({args!r}))")
        cmd = [sys.executable, "-c", boot]
        subprocess.run(cmd, cwd=folder, env=env, timeout=timeout, check=False,
                       stdout=None if verbose else subprocess.DEVNULL,
                       stderr=None if verbose else subprocess.DEVNULL)
        if not xml.exists():
            return [("<collection>", "error", "pytest produced no report")]
        rows = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
            status = "pass"
            if case.find("failure") is not None or case.find("error") is not None:
                status = "FAIL"
            elif case.find("skipped") is not None:
                status = "skip"
            rows.append((name, status, _reason(case)))
        return rows


def run_scripts(path: pathlib.Path, timeout: int) -> list:
    """Run each script (its ``__main__`` checks its golden); exit status 0 = pass."""
    files = [path] if path.is_file() else sorted(path.rglob("*.py"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)]))
    boot = ("import runpy, sys; from nki_workbench import compat; compat.install(); "
            "sys.argv = [sys.argv[1]]; runpy.run_path(sys.argv[0], run_name='__main__')")
    rows = []
    for f in files:
        try:
            r = subprocess.run([sys.executable, "-c", boot, str(f)], cwd=f.parent, env=env,
                               timeout=timeout, capture_output=True, text=True, check=False)
            tail = (r.stderr.strip().splitlines() or [""])[-1][:150]
            rows.append((f.name, "pass" if r.returncode == 0 else "FAIL", tail))
        except subprocess.TimeoutExpired:
            rows.append((f.name, "FAIL", f"timeout after {timeout} s"))
    return rows


def print_table(rows) -> None:
    """One line per case, then the counts (skips excluded from the pass rate)."""
    width = max([len(r[0]) for r in rows] + [4])
    for name, status, reason in rows:
        print(f"{name:<{width}}  {status:<4}  {reason if status != 'pass' else ''}")
    ran = [r for r in rows if r[1] != "skip"]
    passed = sum(r[1] == "pass" for r in ran)
    pct = 100.0 * passed / len(ran) if ran else 0.0
    print(f"\n{passed}/{len(ran)} passed ({pct:.0f} %), {len(rows) - len(ran)} skipped")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=pathlib.Path)
    ap.add_argument("--deps", default=None, help="pip --target folder of the harness's deps")
    ap.add_argument("-k", dest="expr", default=None, help="pytest -k expression")
    ap.add_argument("--markers", default="fast", help="pytest -m expression (default: fast)")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("-v", dest="verbose", action="store_true", help="show pytest's output")
    a = ap.parse_args(argv)
    folder = a.folder.resolve()
    if (folder / "test" / "integration").is_dir():
        rows = run_library(folder, a.deps, a.expr, a.markers, a.timeout, a.verbose)
    else:
        rows = run_scripts(folder, a.timeout)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
