"""The stand-ins that let nki-library's harness run on the workbench (used by current_corpus.py).

``write_shim`` writes a ``nki_cpu_simulator`` package (the harness's CPU-simulation hook) as a
thin layer over :mod:`nki_workbench.current`, and a ``neuron_dtypes`` stand-in over ml_dtypes.
``BOOT`` is the program each subprocess runs: it installs the ``import nki`` alias, stubs the
harness's hardware-only helpers, and runs pytest with a plugin that records the collected cases,
the files that fail to import and each case's outcome with its reason as JSON.
"""

from __future__ import annotations

import pathlib
import textwrap

__all__ = ["BOOT", "write_shim"]


# module of the shim -> source (the harness imports these names; see its simulation_setup.py)
_SHIM = {
    "nki_cpu_simulator/__init__.py": "",
    "nki_cpu_simulator/nki/__init__.py": """
        import sys
        import nki_workbench.current as _cur
        from nki_workbench.current import *  # noqa
        from nki_workbench.current import isa, language, simulate  # noqa

        # AWS's simulator has no memory cap; the workbench's default is 1 GiB of tensors
        _PARAMS = _cur.SimParams(max_bytes=4 << 30)

        class _Sim:
            def __init__(self, kernel):
                self.kernel = kernel
            def __getitem__(self, lnc):
                k = self.kernel if isinstance(self.kernel, _cur.Kernel) else _cur.jit(self.kernel)
                return simulate(k[lnc] if int(lnc) > 1 else k, _PARAMS)
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
    "import enum, sys, types; "
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


# why: the harness's simulation mode runs one rank (AWS's simulator has no collectives); a
# multi-rank case (InferenceArgs.collective_ranks > 1, inputs per rank) runs here on every
# rank with nki_workbench.simulate_ranks, each rank's outputs dumped where the harness's
# validator looks for them (output_worker_<r>/)
_RANKS_FIX = textwrap.dedent("""
    import os as _os
    import test.utils.test_orchestrator as _to

    _single = _to.Orchestrator._run_simulator_inference

    def _run_ranks(self, kut):
        n = int(getattr(kut.inference_args, "collective_ranks", 1) or 1)
        if n <= 1:
            return _single(self, kut)
        import numpy as _np
        import nki_workbench
        from test.utils.common_dataclasses import normalize_golden_output
        inp = kut.kernel_input or {}
        per = [inp.for_rank(r) if hasattr(inp, "for_rank") else dict(inp) for r in range(n)]
        per = [{k.removesuffix(".must_alias_input"): v for k, v in d.items()} for d in per]
        lnc = int(kut.compiler_input.logical_nc_config or 1)
        k = kut.kernel_func if lnc <= 1 else kut.kernel_func[lnc]
        try:
            outs = nki_workbench.simulate_ranks(k, per)
        except Exception as e:
            raise _to.InferenceException(str(e)) from e
        root = _os.path.join(self.fs_config.artifacts_output_directory_path,
                             _to.INF_ARTIFACT_DIR_NAME)
        for r, out in enumerate(outs):
            out = list(out) if isinstance(out, (list, tuple)) else [out]
            golden = normalize_golden_output(kut.validation_args.golden_output, rank_id=r)
            tensors = {name: _np.asarray(o, dtype=g.dtype)
                       for name, o, g in zip(golden, out, golden.values())}
            self.__dump_tensors__(_os.path.join(root, f"output_worker_{r}"), tensors,
                                  lambda name: name)
        return root

    _to.Orchestrator._run_simulator_inference = _run_ranks
    """)


def write_shim(where: pathlib.Path) -> None:
    """Write the ``nki_cpu_simulator`` shim (and a ``neuron_dtypes`` stand-in) under ``where``."""
    for rel, src in _SHIM.items():
        p = where / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src).lstrip())


# argv: report path, JSON list of pytest args
BOOT = textwrap.dedent("""
    import enum, json, sys, types
    import pytest
    from nki_workbench import compat
    compat.install()  # why: the harness imports `nki` before it switches to simulation mode
    """) + _LOCK_STUB + "\n" + _ORCH_FIX + "\n" + _RANKS_FIX + textwrap.dedent("""
    def _why(rep):
        crash = getattr(getattr(rep, "longrepr", None), "reprcrash", None)
        if crash is not None and crash.message:
            return crash.message.strip().splitlines()[0]
        if isinstance(rep.longrepr, tuple):
            return str(rep.longrepr[2])
        lines = [ln for ln in str(rep.longreprtext).splitlines() if ln.strip()]
        errs = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
        return (errs or lines or [""])[-1]

    class Recorder:
        def __init__(self):
            self.data = {"cases": [], "errors": {}, "results": []}

        def pytest_collectreport(self, report):
            if report.failed:
                self.data["errors"][str(report.nodeid or report.fspath)] = _why(report)

        def pytest_collection_finish(self, session):
            for it in session.items:
                tail = it.nodeid.split("::", 1)[1] if "::" in it.nodeid else ""
                self.data["cases"].append({
                    "file": it.nodeid.split("::")[0], "id": tail, "run": f"{it.path}::{tail}",
                    "skip": any(m.name == "skip" for m in it.iter_markers())})

        def pytest_runtest_logreport(self, report):
            reason = "" if report.passed else _why(report)
            self.data["results"].append(
                {"when": report.when, "outcome": report.outcome, "reason": reason})

    rec = Recorder()
    try:
        pytest.main(json.loads(sys.argv[2]), plugins=[rec])
    finally:
        with open(sys.argv[1], "w") as f:
            json.dump(rec.data, f)
    """)
