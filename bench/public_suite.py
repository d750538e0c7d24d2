"""Run a folder of public NKI test files unmodified through the ``neuronxcc`` alias; print a table.

For anyone who has such a folder (the SDK's per-API doc tests ``general/nki/test/`` or
``nki/test/``, nki-samples' ``test/unit/``...)::

    .venv/bin/python bench/public_suite.py FOLDER [FOLDER ...] [--numerics nki-simulator]
        [--backend jax] [--path SRC] [--device-only REGEX] [-- PYTEST ARGS]

Each folder runs in its own pytest process with ``nki_workbench.compat.install()`` done first
(so ``import neuronxcc.nki`` resolves to the workbench), ``--path`` entries prepended to
``PYTHONPATH`` (nki-samples needs its ``src``), and the results read back from pytest's JUnit
XML. The table has one row per test file (passed / failed / errors / skipped) and the totals;
failing cases are listed with the first line of their message. Cases whose id matches a
``--device-only`` pattern (they need a Neuron device: profiling on hardware, the machine's DMI
product name...) are counted apart and named, and left out of the pass rate.
Without a folder it prints how to use it and exits 0 (nothing to run is not a failure).
The public code is never copied: it is read where it lies.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[1]

_RUNNER = ("import sys; from nki_workbench import compat; compat.install(); import pytest; "
           "sys.exit(pytest.main(sys.argv[1:]))")


@dataclass
class FileResult:
    """Outcomes of one test file."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    device: int = 0
    failures: list = field(default_factory=list)  # (case id, first line of the message)

    @property
    def counted(self) -> int:
        """Cases that count for the pass rate (device-only and skipped ones excluded)."""
        return self.passed + self.failed + self.errors


def parse_junit(path: pathlib.Path, device_only: list) -> dict:
    """``{file: FileResult}`` from a pytest JUnit XML report.

    Args:
        path: the XML file.
        device_only: compiled regexes; a case whose id matches one is counted as device-only.

    Returns:
        dict: test file (relative, as pytest reports it) -> :class:`FileResult`.
    """
    out: dict = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        cls = case.get("classname", "")
        name = case.get("name", "")
        file = case.get("file") or cls.split(".")[0].replace(".", "/") + ".py"
        cid = f"{cls}::{name}"
        res = out.setdefault(file, FileResult())
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if any(p.search(cid) for p in device_only):
            res.device += 1
            continue
        if case.find("skipped") is not None:
            res.skipped += 1
        elif bad is None:
            res.passed += 1
        else:
            res.failed += bad.tag == "failure"
            res.errors += bad.tag == "error"
            msg = (bad.get("message") or bad.text or "").strip().splitlines()
            res.failures.append((cid, msg[0][:160] if msg else bad.tag))
    return out


def run_folder(folder: pathlib.Path, args) -> dict:
    """Run pytest on ``folder`` through the alias; returns :func:`parse_junit`'s table."""
    env = dict(os.environ)
    paths = [str(ROOT)] + [str(pathlib.Path(p).resolve()) for p in args.path]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if args.numerics:
        env["NKI_WORKBENCH_NUMERICS"] = args.numerics
    if args.backend:
        env["NKI_WORKBENCH_SIM_BACKEND"] = args.backend
    with tempfile.TemporaryDirectory() as tmp:
        xml = pathlib.Path(tmp) / "report.xml"
        cmd = [sys.executable, "-c", _RUNNER, "-q", "-p", "no:cacheprovider",
               "--continue-on-collection-errors", "-o", "junit_family=xunit1",
               f"--junitxml={xml}", *args.pytest_args, "."]
        run = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True,
                             timeout=args.timeout, check=False)
        if not xml.exists():
            tail = "\n".join((run.stdout + run.stderr).splitlines()[-15:])
            raise SystemExit(f"pytest produced no report for {folder}:\n{tail}")
        return parse_junit(xml, [re.compile(p) for p in args.device_only])


def table(results: dict) -> str:
    """The pass/fail table of ``{folder: {file: FileResult}}`` as text."""
    lines = [f"{'file':58} {'pass':>5} {'fail':>5} {'err':>4} {'skip':>5} {'device':>6}"]
    tot = FileResult()
    for folder, files in results.items():
        lines.append(f"# {folder}")
        for name, r in sorted(files.items()):
            lines.append(f"{name[-58:]:58} {r.passed:5} {r.failed:5} {r.errors:4} {r.skipped:5} "
                         f"{r.device:6}")
            for k in ("passed", "failed", "errors", "skipped", "device"):
                setattr(tot, k, getattr(tot, k) + getattr(r, k))
            tot.failures += [(f"{name}::{c.split('::', 1)[1]}", m) for c, m in r.failures]
    rate = 100.0 * tot.passed / tot.counted if tot.counted else 100.0
    lines.append(f"{'TOTAL':58} {tot.passed:5} {tot.failed:5} {tot.errors:4} {tot.skipped:5} "
                 f"{tot.device:6}")
    lines.append(f"pass rate {tot.passed}/{tot.counted} = {rate:.1f} % (device-only cases "
                 f"excluded: {tot.device}; skipped: {tot.skipped})")
    for cid, msg in tot.failures:
        lines.append(f"FAILED {cid}: {msg}")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", help="folders of public test files")
    ap.add_argument("--numerics", choices=("hardware", "nki-simulator"), default=None,
                    help="NKI_WORKBENCH_NUMERICS for the run (default: the environment's)")
    ap.add_argument("--backend", choices=("numpy", "jax"), default=None,
                    help="NKI_WORKBENCH_SIM_BACKEND for the run")
    ap.add_argument("--path", action="append", default=[],
                    help="a folder prepended to PYTHONPATH (e.g. nki-samples/src)")
    ap.add_argument("--device-only", action="append", default=[], metavar="REGEX",
                    help="case ids that need a Neuron device (counted apart)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per folder")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.pytest_args = argv[cut + 1:]  # after '--': extra pytest arguments
    if not args.folders:
        print("public_suite: no folder given; nothing to run.\n"
              "usage: bench/public_suite.py FOLDER [...] [--numerics nki-simulator] "
              "[--path SRC] [--device-only REGEX] [-- PYTEST ARGS]")
        return 0
    results = {}
    for f in args.folders:
        folder = pathlib.Path(f).resolve()
        if not folder.is_dir():
            print(f"public_suite: {f} is not a folder", file=sys.stderr)
            return 2
        results[str(folder)] = run_folder(folder, args)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
