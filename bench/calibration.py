"""The cost model against published Trainium latencies (``nki_workbench/_src/hw/calibration.json``).

Run from the repository root::

    .venv/bin/python bench/calibration.py [--write | --doc] [--only SUBSTRING]

For every calibration row it builds our kernel of the measured kernel's structure
(``bench/calibration_kernels.py``), estimates it on the row's target and prints estimate /
measured, then per target the geometric mean of ``|log(estimate / measured)|`` (as a ratio)
and the worst rows. ``--write`` stores the estimates in ``calibration.json`` and regenerates the
table in ``docs/calibration.md`` (between its ``<!-- table -->`` markers); ``--doc`` only
regenerates that table from the stored estimates.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import calibration_kernels as ck  # noqa: E402

from nki_workbench._src.errors import NkiError  # noqa: E402
from nki_workbench._src.hw import calibration as cal  # noqa: E402
from nki_workbench._src.hw import get_target  # noqa: E402
from nki_workbench._src.runtime import get_traced  # noqa: E402
from nki_workbench._src.sim.timing import timeline  # noqa: E402

DOC = ROOT / "docs" / "calibration.md"


def estimate_us(row: dict) -> float:
    """The model's value of the row's metric, in microseconds.

    ``kernel_us`` (default): the kernel's estimated latency. ``chain_ii_ns``: the mean
    initiation interval of the kernel's ScalarE instructions. ``dma_engine_us``: how long the
    first DMA keeps its DMA engines busy.
    """
    fn, args = ck.build(row)
    kernel = get_traced(fn, args, {}, target=get_target(row["target"])).kernel
    tl = timeline(kernel, target=row["target"])
    metric = row.get("metric", "kernel_us")
    if metric == "kernel_us":
        return tl.latency_us
    if metric == "chain_ii_ns":
        starts = sorted(e.start_ns for e in tl.events if e.track == "Scalar")
        return (starts[-1] - starts[0]) / (len(starts) - 1) / 1000.0
    if metric == "dma_engine_us":
        first = min((e for e in tl.events if e.track.startswith("q")), key=lambda e: e.start_ns)
        return (first.end_ns - first.start_ns) / 1000.0
    raise ValueError(f"unknown metric {metric!r} in row {row['id']}")


def _ratio(r: dict) -> float | None:
    return None if r.get("estimate_us") is None else r["estimate_us"] / r["measured_us"]


def report(table: list[dict]) -> str:
    """Per-target summary: geomean ratio, worst rows, excluded rows."""
    acc = cal.accuracy(table)
    lines = []
    for target in sorted(acc):
        a = acc[target]
        if "geomean_ratio" not in a:
            continue
        lines.append(f"{target}: {a['rows']} rows, geomean |log(est/meas)| = "
                     f"log({a['geomean_ratio']:.3f}), worst {a['max_ratio']:.2f}x ({a['worst']}),"
                     f" {a['excluded']} excluded")
        live = [r for r in table if r["target"] == target and not r.get("excluded")
                and r.get("estimate_us") is not None]
        live.sort(key=lambda r: -cal.log_error(r["estimate_us"], r["measured_us"]))
        for r in live[:5]:
            lines.append(f"    worst: {r['id']:42s} est/meas = {_ratio(r):.2f}")
    return "\n".join(lines)


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def doc_table(table: list[dict]) -> str:
    """The markdown table of ``docs/calibration.md``."""
    head = ("| row | target | kind (statistic) | measured µs | estimate µs | est/meas | source |"
            " note |\n|---|---|---|---:|---:|---:|---|---|")
    out = [head]
    for r in table:
        s = r["source"]
        note = r.get("note", "")
        if r.get("excluded"):
            note = f"**excluded:** {r['excluded']} ({note})"
        out.append(f"| `{r['id']}` | {r['target']} | {r['kind']} ({r['statistic']}) | "
                   f"{r['measured_us']:g} | {_num(r.get('estimate_us'), '.4g')} | "
                   f"{_num(_ratio(r), '.2f')} | "
                   f"[{s['name']}]({s['url']}) `{s['path']}` | {note} |")
    return "\n".join(out)


def _write(table: list[dict]) -> None:
    data = json.loads(cal.DATA_PATH.read_text(encoding="utf-8"))
    est = {r["id"]: r["estimate_us"] for r in table}
    for r in data["rows"]:
        if r["id"] in est:
            r["estimate_us"] = None if est[r["id"]] is None else round(est[r["id"]], 4)
    cal.DATA_PATH.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    cal._data.cache_clear()
    _write_doc()


def _write_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    a, b = "<!-- table -->", "<!-- /table -->"
    i, j = text.index(a) + len(a), text.index(b)
    summary = report(cal.rows()).replace("\n    ", "\n  - ")
    DOC.write_text(text[:i] + "\n" + doc_table(cal.rows()) + "\n\n```text\n" + summary +
                   "\n```\n" + text[j:], encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="store estimates and the docs table")
    ap.add_argument("--only", default="", help="only rows whose id contains this")
    ap.add_argument("--doc", action="store_true",
                    help="only regenerate docs/calibration.md from the stored estimates")
    args = ap.parse_args(argv)
    if args.doc:
        _write_doc()
        return 0
    table = []
    for r in cal.rows():
        if args.only not in r["id"]:
            continue
        t0 = time.perf_counter()
        try:
            r["estimate_us"] = estimate_us(r)
        except NkiError as e:
            if not r.get("excluded"):
                raise
            r["estimate_us"] = None  # why: an excluded row the model cannot even run
            print(f"{r['id']:44s} {r['target']}  no estimate ({e.code}) (excluded)")
            table.append(r)
            continue
        flag = " (excluded)" if r.get("excluded") else ""
        print(f"{r['id']:44s} {r['target']}  est {r['estimate_us']:11.3f} us  meas "
              f"{r['measured_us']:11.3f} us  ratio {_ratio(r):5.2f}  "
              f"[{time.perf_counter() - t0:.1f} s]{flag}", flush=True)
        table.append(r)
    print(report(table))
    if args.write:
        if args.only:
            print("--write needs every row (drop --only)")
            return 2
        _write(table)
    worst = max((cal.log_error(r["estimate_us"], r["measured_us"]) for r in table
                 if not r.get("excluded") and r.get("estimate_us") is not None), default=0.0)
    return 0 if worst <= math.log(2) + 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
