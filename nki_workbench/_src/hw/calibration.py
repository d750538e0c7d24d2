"""The cost model's calibration table: published Trainium latencies and our estimates of them.

``calibration.json`` (next to this module) holds one row per public measurement: the kernel,
its shapes and dtype, the target, the measured value (or the upper bound a device test
asserts), the statistic, the source (repository, commit, path, URL) and the estimate the cost
model gave when ``bench/calibration.py --write`` last ran. Rows the model cannot explain carry
an ``excluded`` reason and stay out of the accuracy figures. :func:`accuracy` summarises the
recorded estimates per target and :func:`accuracy_sentence` turns that into the sentence the
timeline and ``nki.benchmark`` print.
"""

from __future__ import annotations

import functools
import json
import math
import pathlib

__all__ = ["DATA_PATH", "accuracy", "accuracy_sentence", "log_error", "rows"]

DATA_PATH = pathlib.Path(__file__).with_name("calibration.json")
# why: below this many rows a target's geometric mean is one or two kernels, not a model check
_FEW_ROWS = 8


@functools.lru_cache(maxsize=1)
def _data() -> dict:
    with open(DATA_PATH, encoding="utf-8") as f:
        return json.load(f)


def rows() -> list[dict]:
    """The calibration rows (dicts, as stored)."""
    return [dict(r) for r in _data()["rows"]]


def log_error(estimate: float, measured: float) -> float:
    """``|log(estimate / measured)|``."""
    return abs(math.log(estimate / measured))


def accuracy(table: list[dict] | None = None) -> dict:
    """Per-target accuracy of the recorded estimates.

    Args:
        table: rows with ``estimate_us`` (default: the stored rows).

    Returns:
        ``{target: {"rows", "excluded", "geomean_ratio", "max_ratio", "worst"}}`` where
        ``geomean_ratio`` is ``exp(mean |log(est/meas)|)`` over the rows that are not excluded,
        ``max_ratio`` the largest single ``max(est/meas, meas/est)`` and ``worst`` its row id.
    """
    out: dict = {}
    for r in rows() if table is None else table:
        t = out.setdefault(r["target"], {"rows": 0, "excluded": 0, "_errs": []})
        if r.get("excluded"):
            t["excluded"] += 1
            continue
        if r.get("estimate_us") is None:
            continue
        t["rows"] += 1
        t["_errs"].append((log_error(r["estimate_us"], r["measured_us"]), r["id"]))
    for t in out.values():
        errs = t.pop("_errs")
        if errs:
            t["geomean_ratio"] = math.exp(sum(e for e, _ in errs) / len(errs))
            worst = max(errs)
            t["max_ratio"], t["worst"] = math.exp(worst[0]), worst[1]
    return out


def accuracy_sentence() -> str:
    """One sentence on the model's measured accuracy, from the calibration table."""
    parts = []
    for target, a in sorted(accuracy().items()):
        if "geomean_ratio" not in a:
            continue
        pct = (a["geomean_ratio"] - 1) * 100
        few = ", too few to judge" if a["rows"] < _FEW_ROWS else ""
        parts.append(f"{target} typically within ±{pct:.0f} % (geometric mean over "
                     f"{a['rows']} rows, worst {a['max_ratio']:.2f}x{few})")
    if not parts:
        return "cost-model accuracy: no calibration rows recorded"
    return ("estimates vs published Trainium measurements: " + "; ".join(parts)
            + "; see docs/calibration.md")
