"""``%%nki --check EXPR``: compare the simulated outputs with a numpy expression.

``run_check(insp, "np.exp(a)", namespace)`` evaluates the expression (the kernel's arguments are
visible under their parameter names, plus ``np``), compares it output by output in float64 and
stores a :class:`CheckResult` as ``insp.check`` (the summaries show its max error). A failed
check names where it fails first: the output, the partition tile (rows ``128*k .. 128*k+127``) of
the first element off, and the largest error inside that tile. ``strict=True`` (``%%nki --check
... --strict``) raises ``NkiError("wb_check_failed")`` with the same text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._src.errors import NkiError

__all__ = ["CheckResult", "Mismatch", "run_check", "DEFAULT_ATOL", "DEFAULT_RTOL", "TILE_ROWS"]

DEFAULT_ATOL = 1e-3
DEFAULT_RTOL = 1e-3
TILE_ROWS = 128
"""Rows of one partition tile: a mismatch is located by the tile its row falls in."""


@dataclass(frozen=True)
class Mismatch:
    """Where a failed check goes wrong first.

    Attributes:
        output: index of the output (in return order).
        index: the first element outside the tolerance (row-major order).
        rows: ``(first, last)`` rows of its partition tile (axis 0, :data:`TILE_ROWS` rows).
        tile: the tile's number along axis 0.
        max_abs_error: largest ``|out - ref|`` inside that tile.
        worst_index: where that largest error is.
        got: the output value at ``worst_index``.
        expected: the reference value there.
        bad_in_tile: elements of the tile outside the tolerance.
    """

    output: int
    index: tuple
    rows: tuple
    tile: int
    max_abs_error: float
    worst_index: tuple
    got: float
    expected: float
    bad_in_tile: int

    def text(self) -> str:
        """``output 0, rows 128..255 (tile 1): 12 elements off, max error 2.0e+00 at [130, 7]``."""
        return (f"output {self.output}, rows {self.rows[0]}..{self.rows[1]} (tile {self.tile}): "
                f"first off at {list(self.index)}, {self.bad_in_tile} elements off in the tile, "
                f"max error there {self.max_abs_error:.3e} at {list(self.worst_index)} (got "
                f"{self.got:.6g}, expected {self.expected:.6g})")

    def as_dict(self) -> dict:
        """Plain data (the JSON view)."""
        return {"output": self.output, "index": list(self.index), "rows": list(self.rows),
                "tile": self.tile, "max_abs_error": _num(self.max_abs_error),
                "worst_index": list(self.worst_index), "got": _num(self.got),
                "expected": _num(self.expected), "bad_in_tile": self.bad_in_tile}


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
        first: the :class:`Mismatch` where it fails first (``None`` when passed).
    """

    expr: str
    max_abs_error: float
    max_rel_error: float
    atol: float
    rtol: float
    passed: bool
    mismatches: int
    first: Mismatch | None = None

    def line(self) -> str:
        """One summary line (deterministic: fixed number formats)."""
        verdict = "ok" if self.passed else f"FAILED, {self.mismatches} elements off"
        return (f"check vs {self.expr}: max error {self.max_abs_error:.3e} "
                f"(relative {self.max_rel_error:.3e}; atol {self.atol:g}, rtol {self.rtol:g}: "
                f"{verdict})")

    def where(self) -> str | None:
        """Where a failed check fails first (``None`` when it passed)."""
        return None if self.first is None else "first mismatch: " + self.first.text()

    def as_dict(self) -> dict:
        """Plain data (the JSON view)."""
        return {"expr": self.expr, "max_abs_error": _num(self.max_abs_error),
                "max_rel_error": _num(self.max_rel_error), "atol": self.atol,
                "rtol": self.rtol, "passed": self.passed, "mismatches": self.mismatches,
                "first_mismatch": None if self.first is None else self.first.as_dict()}


def _num(x: float):
    # why: JSON has no NaN/inf; a NaN error is reported as the string "nan"
    return x if np.isfinite(x) else str(x)


def _as_list(v) -> list:
    return list(v) if isinstance(v, (tuple, list)) else [v]


def _first_mismatch(output: int, o64, r64, bad) -> Mismatch:
    """The tile of the first element off and the worst error inside it."""
    flat = int(np.flatnonzero(bad.reshape(-1))[0])
    index = tuple(int(i) for i in np.unravel_index(flat, bad.shape)) if bad.ndim else ()
    row = index[0] if index else 0
    tile = row // TILE_ROWS
    lo, hi = tile * TILE_ROWS, min((tile + 1) * TILE_ROWS, bad.shape[0] if bad.ndim else 1)
    sl = (slice(lo, hi),) if bad.ndim else ()
    err = np.abs(o64[sl] - r64[sl])
    err = np.where(np.isnan(err), np.inf, err)  # why: a NaN is the worst error there is
    k = int(np.argmax(err))
    local = np.unravel_index(k, err.shape) if err.ndim else ()
    worst = tuple(int(i) for i in local)
    if worst:
        worst = (worst[0] + lo,) + worst[1:]
    return Mismatch(output, index, (lo, hi - 1), tile, float(err.reshape(-1)[k]), worst,
                    float(o64[worst]), float(r64[worst]), int(np.count_nonzero(bad[sl])))


def run_check(insp, expr: str, namespace: dict, atol: float = DEFAULT_ATOL,
              rtol: float = DEFAULT_RTOL, strict: bool = False) -> CheckResult:
    """Evaluate ``expr`` and compare it with ``insp.outputs``; store and return the result.

    Args:
        insp: a simulated Inspection.
        expr: a Python expression giving the expected output (a tuple for several outputs).
        namespace: names the expression may use (user namespace, kernel arguments, ``np``).
        atol: absolute tolerance.
        rtol: relative tolerance.
        strict: raise when the check fails (after storing the result).

    Returns:
        CheckResult

    Raises:
        NkiError: ``wb_check_failed`` with ``strict`` when an element is outside the tolerance.
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
    first = None
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        o64 = np.asarray(o, dtype=np.float64)
        try:
            r64 = np.broadcast_to(np.asarray(r, dtype=np.float64), o64.shape)
        except ValueError:
            raise NkiError("wb_check_expression", f"--check output {i}: reference shape "
                           f"{list(np.shape(r))} does not match the output shape "
                           f"{list(o64.shape)}") from None
        err = np.abs(o64 - r64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rel = err / np.maximum(np.abs(r64), np.finfo(np.float64).tiny)
        nan = np.isnan(err)
        any_nan |= bool(nan.any())
        max_abs = max(max_abs, float(np.nanmax(err, initial=0.0)))
        max_rel = max(max_rel, float(np.nanmax(rel, initial=0.0)))
        off = nan | (err > atol + rtol * np.abs(r64))
        n_off = int(np.count_nonzero(off))
        if n_off and first is None:
            first = _first_mismatch(i, o64, r64, off)
        bad += n_off
    if any_nan:  # why: a NaN output is never "close"; report it rather than the finite max
        max_abs = max_rel = float("nan")
    result = CheckResult(expr, max_abs, max_rel, atol, rtol, bad == 0, bad, first)
    insp.check = result
    if strict and not result.passed:
        raise NkiError("wb_check_failed", f"kernel '{insp.kernel_name}' does not match "
                       f"{expr}: {result.line()}; {result.where()}",
                       hint="the tile named is where to look first (its rows and loop "
                            "iteration); loosen --atol/--rtol only if the error is expected")
    return result
