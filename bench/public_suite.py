"""Run a folder of public NKI test files unmodified through the ``neuronxcc`` alias; print a table.

For anyone who has such a folder (the SDK's per-API doc tests ``general/nki/test/`` or
``nki/test/``, nki-samples' ``test/unit/``...)::

    .venv/bin/python bench/public_suite.py FOLDER [FOLDER ...] [--numerics nki-simulator]
        [--backend jax] [--path SRC] [--device-only REGEX] [-- PYTEST ARGS]

Each folder runs in its own pytest process with ``nki_workbench.compat.install()`` done first
(so ``import neuronxcc.nki`` resolves to the workbench), ``--path`` entries prepended to
``PYTHONPATH`` (nki-samples needs its ``src``), and each case's outcome recorded as it finishes
(a folder stopped at ``--timeout`` keeps the cases that finished; the one running then is an
error saying so). Test files or case ids given after ``--`` run alone; otherwise the whole
folder runs. The table has one row per test file (passed / failed / errors / skipped) and the
totals;
failing cases are listed with the first line of their message. Cases whose id matches a
``--device-only`` pattern or a :data:`KNOWN_DEVICE_ONLY` one (they need a Neuron device:
profiling on hardware, the machine's DMI product name...) are counted apart and named, and left
out of the pass rate.
Without a folder it prints how to use it and exits 0 (nothing to run is not a failure).
The public code is never copied: it is read where it lies.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[1]

_RUNNER = r"""
import json, sys
from nki_workbench import compat
compat.install()
import pytest

class _Record:
    # why: one line per finished phase, flushed at once, so a folder killed at its time limit
    # keeps every case that finished (a JUnit report is written only at the end)
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def pytest_runtest_logstart(self, nodeid, location):
        self.f.write(json.dumps({"id": nodeid, "start": True}) + "\n")

    def pytest_runtest_logreport(self, report):
        msg = ""
        if report.failed or report.skipped:
            rep = getattr(report, "longrepr", None)
            msg = rep[2] if isinstance(rep, tuple) else (
                getattr(getattr(rep, "reprcrash", None), "message", None) or str(rep or ""))
        self.f.write(json.dumps({"id": report.nodeid, "when": report.when,
                                 "outcome": report.outcome, "msg": str(msg)}) + "\n")

    def pytest_collection_finish(self, session):
        for it in session.items:
            self.f.write(json.dumps({"id": it.nodeid, "collected": True}) + "\n")

    def pytest_collectreport(self, report):
        if report.failed:
            self.f.write(json.dumps({"id": report.nodeid, "when": "collect", "outcome": "failed",
                                     "msg": str(report.longrepr)}) + "\n")

sys.exit(pytest.main(sys.argv[2:], plugins=[_Record(sys.argv[1])]))
"""

KNOWN_DEVICE_ONLY = {
    r"test_double_row_matmul\.py::.*numerical":
        "nki-samples: returns before checking anything unless the DMI product name is trn2",
    r"test_neuron_profile\.py::":
        "nki-samples: profiles on a Neuron device and reads the reports it writes",
}
"""Case-id patterns of public tests that need a Neuron device (with the reason); counted apart
unless ``--no-known-device-only``."""


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


def parse_records(path: pathlib.Path, device_only: list, *, timed_out: float | None = None,
                  died: str | None = None) -> dict:
    """``{file: FileResult}`` from the runner's per-phase records (one JSON object per line).

    Args:
        path: the records file.
        device_only: compiled regexes; a case whose id matches one is counted as device-only.
        timed_out: when the folder was stopped at its time limit (seconds), the case that was
            running then is counted as an error saying so.
        died: how the pytest process ended when it died before finishing (e.g. "killed by
            signal 9"): the case running then is an error saying so, and every collected case
            that never ran is an error "not run" (a crash never shrinks the table silently).

    Returns:
        dict: test file (relative, as pytest reports it) -> :class:`FileResult`.
    """
    cases: dict = {}  # id -> (outcome, message), in the order cases started
    collected: list = []
    running = None
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue  # why: a line cut short when the process was killed
        cid = r["id"]
        if r.get("collected"):
            collected.append(cid)
            continue
        if r.get("start"):
            running = cid
            continue
        out, msg = r["outcome"], (r.get("msg") or "").strip()
        first = msg.splitlines()[0][:160] if msg else out
        if r["when"] == "collect":
            cases[cid] = ("error", first)
        elif r["when"] == "call" or out != "passed":
            # why: a setup failure is an error, a teardown failure spoils a passed call
            prev = cases.get(cid)
            if prev is None or prev[0] == "passed":
                kind = "failed" if r["when"] == "call" and out == "failed" else (
                    "skipped" if out == "skipped" else "error" if out == "failed" else out)
                cases[cid] = (kind, first)
        if r["when"] == "teardown":
            running = None
    if timed_out is not None and running is not None and running not in cases:
        cases[running] = ("error", f"stopped at the folder's time limit ({timed_out:g} s)")
    if died is not None:
        if running is not None and running not in cases:
            cases[running] = ("error", f"the pytest process {died} while this case ran")
        for cid in collected:
            if cid not in cases:
                cases[cid] = ("error", f"not run: the pytest process {died} before it")
    out: dict = {}
    for cid, (kind, msg) in cases.items():
        res = out.setdefault(cid.split("::")[0], FileResult())
        if any(p.search(cid) for p in device_only):
            res.device += 1
        elif kind == "passed":
            res.passed += 1
        elif kind == "skipped":
            res.skipped += 1
        else:
            res.failed += kind == "failed"
            res.errors += kind == "error"
            res.failures.append((cid, msg))
    return out


def run_folder(folder: pathlib.Path, args) -> dict:
    """Run pytest on ``folder`` through the alias; returns :func:`parse_records`' table."""
    env = dict(os.environ)
    paths = [str(ROOT)] + [str(pathlib.Path(p).resolve()) for p in args.path]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if args.numerics:
        env["NKI_WORKBENCH_NUMERICS"] = args.numerics
    if args.backend:
        env["NKI_WORKBENCH_SIM_BACKEND"] = args.backend
    targets = [a for a in args.pytest_args if not a.startswith("-") and (
        "::" in a or (folder / a).exists())]
    patterns = list(args.device_only) + ([] if args.no_known_device_only else
                                         list(KNOWN_DEVICE_ONLY))
    with tempfile.TemporaryDirectory() as tmp:
        rec = pathlib.Path(tmp) / "records.jsonl"
        cmd = [sys.executable, "-c", _RUNNER, str(rec), "-q", "-p", "no:cacheprovider",
               "--continue-on-collection-errors", *args.pytest_args,
               *([] if targets else ["."])]  # why: test files named after '--' run alone
        timed_out = None
        try:
            run = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True,
                                 timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            timed_out, run = args.timeout, None
        if not rec.exists() and run is not None:
            tail = "\n".join((run.stdout + run.stderr).splitlines()[-15:])
            raise SystemExit(f"pytest produced no report for {folder}:\n{tail}")
        if timed_out is not None:
            print(f"public_suite: {folder} stopped at its time limit ({timed_out:g} s); "
                  "the cases that finished are counted", file=sys.stderr)
        died = None
        if run is not None and run.returncode < 0:
            died = f"was killed by signal {-run.returncode}" + (
                " (out of memory?)" if run.returncode == -9 else "")
            print(f"public_suite: {folder}: pytest {died}; the case running then and the ones "
                  "not reached are errors", file=sys.stderr)
        return parse_records(rec, [re.compile(p) for p in patterns], timed_out=timed_out,
                             died=died)


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
    ap.add_argument("--no-known-device-only", action="store_true",
                    help="count the known device-only public cases (KNOWN_DEVICE_ONLY) too")
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
