"""``%%nki --check EXPR``: compare the simulated outputs with a numpy expression.

``run_check(insp, "np.exp(a)", namespace)`` evaluates the expression (the kernel's arguments are
visible under their parameter names, plus ``np``), compares it output by output in float64 and
stores a :class:`CheckResult` as ``insp.check`` (the summaries show its max error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._src.errors import NkiError

__all__ = ["CheckResult", "run_check", "DEFAULT_ATOL", "DEFAULT_RTOL"]

DEFAULT_ATOL = 1e-3
DEFAULT_RTOL = 1e-3


@dataclass(frozen=True)
class CheckResult:
    """Outputs vs a numpy reference.

    Attributes:
        expr: the reference expression.
        max_abs_error: largest ``|out - ref|`` over all outputs.
        max_rel_error: largest ``|out - ref| / max(|ref|, tiny)``.
        atol: absolute tolerance used.
        rtol: relative tolerance used.
        passed: ``np.allclose``-style verdict for every element (NaN compares unequal).
        mismatches: elements outside the tolerance.
    """

    expr: str
    max_abs_error: float
    max_rel_error: float
    atol: float
    rtol: float
    passed: bool
    mismatches: int

    def line(self) -> str:
        """One summary line (deterministic: fixed number formats)."""
        verdict = "ok" if self.passed else f"FAILED, {self.mismatches} elements off"
        return (f"check vs {self.expr}: max error {self.max_abs_error:.3e} "
                f"(relative {self.max_rel_error:.3e}; atol {self.atol:g}, rtol {self.rtol:g}: "
                f"{verdict})")

    def as_dict(self) -> dict:
        """Plain data (the JSON view)."""
        return {"expr": self.expr, "max_abs_error": _num(self.max_abs_error),
                "max_rel_error": _num(self.max_rel_error), "atol": self.atol,
                "rtol": self.rtol, "passed": self.passed, "mismatches": self.mismatches}


def _num(x: float):
    # why: JSON has no NaN/inf; a NaN error is reported as the string "nan"
    return x if np.isfinite(x) else str(x)


def _as_list(v) -> list:
    return list(v) if isinstance(v, (tuple, list)) else [v]


def run_check(insp, expr: str, namespace: dict, atol: float = DEFAULT_ATOL,
              rtol: float = DEFAULT_RTOL) -> CheckResult:
    """Evaluate ``expr`` and compare it with ``insp.outputs``; store and return the result.

    Args:
        insp: a simulated Inspection.
        expr: a Python expression giving the expected output (a tuple for several outputs).
        namespace: names the expression may use (user namespace, kernel arguments, ``np``).
        atol: absolute tolerance.
        rtol: relative tolerance.

    Returns:
        CheckResult
    """
    if insp.outputs is None:
        raise NkiError("wb_check_needs_outputs", f"--check needs simulated outputs, but kernel "
                       f"'{insp.kernel_name}' was not simulated ({insp.not_simulated})",
                       hint="pass concrete arrays with --args instead of --shapes placeholders")
    ns = {"np": np, **namespace}
    try:
        ref = eval(expr, ns)  # noqa: S307 - the user's own expression, like any notebook cell
    except Exception as exc:
        raise NkiError("wb_check_expression", f"--check expression {expr!r} failed: "
                       f"{type(exc).__name__}: {exc}") from exc
    outs, refs = _as_list(insp.outputs), _as_list(ref)
    if len(outs) != len(refs):
        raise NkiError("wb_check_expression", f"--check expression {expr!r} gives {len(refs)} "
                       f"value(s), the kernel returns {len(outs)} output(s)")
    max_abs = max_rel = 0.0
    bad = 0
    any_nan = False
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        o64 = np.asarray(o, dtype=np.float64)
        try:
            r64 = np.broadcast_to(np.asarray(r, dtype=np.float64), o64.shape)
        except ValueError:
            raise NkiError("wb_check_expression", f"--check output {i}: reference shape "
                           f"{list(np.shape(r))} does not match the output shape "
                           f"{list(o64.shape)}") from None
        err = np.abs(o64 - r64)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = err / np.maximum(np.abs(r64), np.finfo(np.float64).tiny)
        nan = np.isnan(err)
        any_nan |= bool(nan.any())
        max_abs = max(max_abs, float(np.nanmax(err, initial=0.0)))
        max_rel = max(max_rel, float(np.nanmax(rel, initial=0.0)))
        bad += int(np.count_nonzero(nan | (err > atol + rtol * np.abs(r64))))
    if any_nan:  # why: a NaN output is never "close"; report it rather than the finite max
        max_abs = max_rel = float("nan")
    result = CheckResult(expr, max_abs, max_rel, atol, rtol, bad == 0, bad)
    insp.check = result
    return result
