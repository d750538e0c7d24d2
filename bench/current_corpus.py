"""Run a public corpus of ``import nki`` kernels on the workbench and print a pass/fail table.

Usage::

    python bench/current_corpus.py FOLDER [--deps DIR] [--per-file N] [--timeout S] [-j J]
                                   [-k SUBSTR] [--markers fast] [--recollect] [--only ROWS]

``FOLDER`` is a checkout of aws-neuron/nki-library (kernels under ``src/``, pytest integration
tests under ``test/integration`` with PyTorch goldens). Its harness has a CPU-simulation mode
(``--test-mode=simulation``) that imports a ``nki_cpu_simulator`` package and calls
``nki.cpu_simulate(kernel)[lnc](**inputs)``; this script writes that package as a thin shim
over ``nki_workbench.current``, so every kernel runs unmodified through the ``import nki``
alias (``compat.install()``), on the workbench's IR and simulator, against the harness's own
goldens and tolerances.

The test files are collected once (one pytest ``--collect-only`` run, cached as JSON next to
the folder; ``--recollect`` refreshes it). Then the ``--per-file`` smallest cases of each file
(by the product of the integers in the case id; the harness's own simulation skips excluded;
round-robin over the files, so a run stopped early still samples every file)
run one per subprocess under ``--timeout`` seconds, ``-j`` at a time. The table has one row per
case with the first line of the reason for each failure, then the files that do not import,
then the pass rate and the reasons ranked by count. ``--deps`` names a ``pip install
--target`` folder holding the harness's infrastructure packages (pytest-html, fabric2, boto3,
aws-embedded-metrics, plotext, allpairspy); nothing is installed here.

A ``.py`` file or folder of plain scripts is run as ``python FILE`` instead (exit 0 = pass),
for kernels whose goldens are checked in their ``__main__`` (SDK / nki-samples tutorials); a
script that prints a verdict with "differ" or "mismatch" fails too.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from current_corpus_shim import BOOT, write_shim  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
_HARNESS = ["-q", "-p", "no:cacheprovider", "--test-mode=simulation", "-o", "addopts=",
            "--disable-warnings", "-p", "no:randomly"]


def _env(shim: pathlib.Path, folder: pathlib.Path, deps: str | None, root: pathlib.Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(shim)] + ([deps] if deps else []) + [str(folder), str(folder / "src"), str(root)])
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _pytest(folder, env, args, report, timeout):
    """Run the harness's pytest with the recorder plugin; returns the JSON report or None."""
    cmd = [sys.executable, "-c", BOOT, report, json.dumps(args)]
    try:
        r = subprocess.run(cmd, cwd=folder, env=env, timeout=timeout, check=False,
                           capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout} s"
    if not os.path.exists(report):
        tail = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or [""])[-1]
        return None, f"no report (rc {r.returncode}): {tail[:140]}"
    with open(report) as f:
        return json.load(f), ""


def collect(folder, env, markers, cache: pathlib.Path, timeout: int, refresh: bool) -> dict:
    """Collect the harness's test files once: ``{"cases": [...], "errors": {file: reason}}``."""
    if cache.exists() and not refresh:
        return json.loads(cache.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "collect.json")
        args = ["test/integration", "--collect-only", "-m", markers,
                "--continue-on-collection-errors"] + _HARNESS
        data, why = _pytest(folder, env, args, rep, timeout)
    if data is None:
        raise SystemExit(f"collection failed: {why}")
    cache.write_text(json.dumps(data))
    return data


def size_key(case_id: str) -> tuple:
    """Order cases by the product of the integers in their parameter id (smallest first)."""
    params = case_id.partition("[")[2]
    ints = [int(x) for x in re.findall(r"\d+", params) if int(x) > 0][:12]
    return (math.prod(ints) if ints else 0, len(case_id), case_id)


def pick(cases: list, per_file: int, substr: str | None, skip: int = 0) -> list:
    """The ``per_file`` smallest runnable cases of each file, less its ``skip`` smallest."""
    by_file = collections.defaultdict(list)
    for c in cases:
        if c["skip"] or (substr and substr not in c["id"]):
            continue
        by_file[c["file"]].append(c)
    ranked = {f: sorted(cs, key=lambda c: size_key(c["id"]))[:per_file]
              for f, cs in sorted(by_file.items())}
    # why: round-robin over the files (every file's smallest case first), so a run stopped
    # early is still a sample of the whole corpus
    return [cs[i] for i in range(skip, per_file) for cs in ranked.values() if i < len(cs)]


def run_case(folder, env, case, timeout) -> tuple:
    """Run one case in its own process; ``(status, reason)``."""
    with tempfile.TemporaryDirectory() as tmp:
        rep = os.path.join(tmp, "run.json")
        data, why = _pytest(folder, env, [case["run"]] + _HARNESS, rep, timeout)
    if data is None:
        return "error", why
    res = [r for r in data["results"] if r["when"] == "call" or r["outcome"] != "passed"]
    if not res:
        errs = list(data["errors"].values())
        return "error", (f"collection: {errs[0]}" if errs else "case not run (deselected?)")
    for r in res:
        if r["outcome"] == "failed":
            return ("FAIL" if r["when"] == "call" else "error"), r["reason"]
        if r["outcome"] == "skipped":
            return "skip", r["reason"]
    return "pass", ""


def run_library(folder: pathlib.Path, a) -> tuple:
    """Collect, pick and run; returns ``(rows, import_errors, n_collected)``."""
    with tempfile.TemporaryDirectory() as tmp:
        shim = pathlib.Path(tmp) / "shim"
        write_shim(shim)
        # why: the cases run for minutes; a copy keeps edits to the checkout out of the run
        snap = pathlib.Path(tmp) / "snap"
        shutil.copytree(ROOT / "nki_workbench", snap / "nki_workbench",
                        ignore=shutil.ignore_patterns("__pycache__", "*.ipynb", "node_modules"))
        env = _env(shim, folder, a.deps, snap)
        tag = re.sub(r"\W+", "_", a.markers)
        cache = a.cache or folder.parent / f"{folder.name}.{tag}.collect.json"
        data = collect(folder, env, a.markers, cache, a.timeout * 20, a.recollect)
        cases = pick(data["cases"], a.per_file, a.expr, a.skip)
        if a.only:
            # why: re-run exactly the rows an earlier table listed (e.g. its failures)
            want = {ln.split()[0] for ln in a.only.read_text().splitlines() if ln.strip()}
            cases = [c for c in data["cases"]
                     if c["file"].rsplit("/", 1)[-1] + "::" + c["id"] in want]
        rows = [None] * len(cases)
        with cf.ThreadPoolExecutor(max(1, a.jobs)) as pool:
            futs = {pool.submit(run_case, folder, env, c, a.timeout): i
                    for i, c in enumerate(cases)}
            for fut in cf.as_completed(futs):
                i = futs[fut]
                status, why = fut.result()
                rows[i] = (cases[i]["file"].rsplit("/", 1)[-1] + "::" + cases[i]["id"],
                           status, why)
                if a.verbose:
                    print(f"{status:<5} {rows[i][0]}  {why[:100]}", flush=True)
    return rows, data["errors"], len(data["cases"])


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
            # why: the SDK tutorials print their golden check ("NKI and Torch differ")
            # instead of exiting non-zero
            differ = re.search(r"^.*\b(differ|mismatch)\b.*$", r.stdout, re.I | re.M)
            ok = r.returncode == 0 and not differ
            why = tail if r.returncode else (f"printed: {differ.group(0)[:140]}" if differ else "")
            rows.append((f.name, "pass" if ok else "FAIL", why))
        except subprocess.TimeoutExpired:
            rows.append((f.name, "FAIL", f"timeout after {timeout} s"))
    return rows


def _short(reason: str) -> str:
    """A reason with its numbers and names blurred, to rank causes."""
    r = re.sub(r"\(at [^)]*\)", "", reason)
    r = re.sub(r"'[^']*'", "'…'", r)
    return re.sub(r"\d+", "N", r).strip()[:90]


def print_table(rows, errors=None, collected=None) -> None:
    """One line per case, the files that do not import, the pass rate and ranked reasons."""
    errors = errors or {}
    width = max([len(r[0]) for r in rows] + [4])
    for name, status, reason in rows:
        print(f"{name:<{width}}  {status:<5}  {reason[:160] if status != 'pass' else ''}")
    if errors:
        print(f"\n{len(errors)} test files do not import:")
        for f, why in sorted(errors.items()):
            print(f"  {f}: {why[:150]}")
    ran = [r for r in rows if r[1] != "skip"]
    passed = sum(r[1] == "pass" for r in ran)
    pct = 100.0 * passed / len(ran) if ran else 0.0
    files = len({r[0].split('::')[0] for r in rows})
    head = f"{collected} cases collected; " if collected is not None else ""
    print(f"\n{head}{files} files run: {passed}/{len(ran)} cases passed ({pct:.0f} %), "
          f"{len(rows) - len(ran)} skipped")
    causes = collections.Counter(_short(r[2]) for r in ran if r[1] != "pass")
    causes.update(_short(w) for w in errors.values())
    if causes:
        print("reasons (cases and non-importing files):")
        for why, n in causes.most_common(25):
            print(f"  {n:>4}  {why}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=pathlib.Path)
    ap.add_argument("--deps", default=None, help="pip --target folder of the harness's deps")
    ap.add_argument("-k", dest="expr", default=None, help="only cases whose id contains this")
    ap.add_argument("--markers", default="fast and not trace_only and not compile_only",
                    help="pytest -m expression (default: the fast cases that run the kernel; "
                         "trace_only/compile_only cases have no golden)")
    ap.add_argument("--per-file", type=int, default=2, help="smallest cases run per file")
    ap.add_argument("--skip-smallest", dest="skip", type=int, default=0,
                    help="leave out each file's N smallest cases (measured before)")
    ap.add_argument("--only", type=pathlib.Path, default=None,
                    help="file of case rows (FILE.py::ID, first word of a line) to run instead "
                         "of a sample")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per case")
    ap.add_argument("-j", dest="jobs", type=int, default=1, help="cases run at once")
    ap.add_argument("--cache", type=pathlib.Path, default=None, help="collection JSON")
    ap.add_argument("--recollect", action="store_true", help="collect again")
    ap.add_argument("-v", dest="verbose", action="store_true", help="print rows as they end")
    a = ap.parse_args(argv)
    folder = a.folder.resolve()
    if (folder / "test" / "integration").is_dir():
        rows, errors, n = run_library(folder, a)
        print_table(rows, errors, n)
    else:
        print_table(run_scripts(folder, a.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
