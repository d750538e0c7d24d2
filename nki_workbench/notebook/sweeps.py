"""``sweep(kernel, args, params)``: evaluate many settings of compile-time constants in parallel.

Each setting (one combination of the ``params`` values) is traced, allocated and timed by the
explorer's own evaluation (:func:`.trials.evaluate_trial`); with ``reference=`` and concrete
arrays it is also simulated and compared with the numpy reference. Settings run

* in local worker processes (default: one per CPU core; ``workers=0`` runs them here, one after
  another), or
* on a ``dask.distributed`` cluster when ``client=`` is given (``Client(LocalCluster(...))`` or a
  scheduler address of many machines); the kernel and its arguments travel with cloudpickle, so
  a kernel defined in a notebook cell works as well as one in a module.

The result is a :class:`SweepResult`: one :class:`SweepRow` per setting, in the order of the
settings (whatever order they finished in), with a progress bar while it runs (tqdm), a text
table, an HTML table sortable by clicking a column (and ``sorted(by)``), and
``inspect(row)`` for one setting's full Inspection; ``nki_workbench.explore(result)`` is the
explorer with this table, where choosing a row jumps the sliders and views to it (the explorer
imports this module, never the other way round).
"""

from __future__ import annotations

import html
import itertools
import os
from dataclasses import asdict, dataclass

from .trials import check_params, evaluate_trial

__all__ = ["sweep", "SweepRow", "SweepResult", "COLUMNS"]

COLUMNS = ("latency_us", "sbuf_peak", "psum_peak", "correct", "max_abs_error", "code")
"""Result columns after the parameters (what ``sorted(by=...)`` accepts, plus the names)."""


@dataclass(frozen=True)
class SweepRow:
    """One evaluated setting.

    Attributes:
        setting: ``((name, value), ...)`` in parameter order.
        feasible: the kernel traced and fits in SBUF/PSUM.
        latency_us: estimated latency (feasible settings).
        sbuf_peak: peak SBUF bytes per partition.
        psum_peak: peak PSUM bytes per partition.
        correct: the simulated output matched ``reference`` (``None``: not checked).
        max_abs_error: largest ``|out - ref|`` (``None``: not checked).
        code: the error code when infeasible (``err_...`` / ``wb_...``), else ``None``.
        reason: why it is infeasible, else ``None``.
    """

    setting: tuple
    feasible: bool
    latency_us: float | None = None
    sbuf_peak: int | None = None
    psum_peak: int | None = None
    correct: bool | None = None
    max_abs_error: float | None = None
    code: str | None = None
    reason: str | None = None

    def label(self) -> str:
        """``TILE_N=256, TILE_M=128``."""
        return ", ".join(f"{k}={v!r}" for k, v in self.setting)


def _evaluate(payload: bytes, setting: tuple) -> SweepRow:
    """Evaluate one setting (runs in a worker: the payload is the cloudpickled job)."""
    import cloudpickle
    job = cloudpickle.loads(payload)
    return evaluate_setting(setting=setting, **job)


def evaluate_setting(kernel, args, params, kwargs, grid, platform_target, reference,
                     atol, rtol, setting) -> SweepRow:
    """One setting's row: the explorer's evaluation, plus the check against ``reference``."""
    trial = evaluate_trial(kernel, args, kwargs, grid, platform_target, tuple(setting))
    if not trial.feasible:
        return SweepRow(setting, False, code=trial.code, reason=trial.reason)
    correct = err = None
    if reference is not None:
        from .._src.inspection import inspect
        from .check import run_check
        insp = inspect(kernel, *args, grid=grid, platform_target=platform_target,
                       **kwargs, **dict(setting))
        expected = reference(*args, **kwargs, **dict(setting))
        res = run_check(insp, "reference", {"reference": expected}, atol, rtol)
        correct, err = res.passed, res.max_abs_error
    return SweepRow(setting, True, trial.latency_us, trial.sbuf_peak, trial.psum_peak, correct,
                    err)


class SweepResult:
    """The rows of a sweep, in settings order.

    Attributes:
        params: ``{name: [values]}`` swept.
        rows: one :class:`SweepRow` per setting.
        job: what evaluated them (kernel, arguments, ...), for :meth:`inspect` and
            ``explore(result)``.
    """

    def __init__(self, params: dict, rows: list, job: dict):
        self.params = params
        self.rows = rows
        self.job = job

    def best(self) -> SweepRow | None:
        """The fastest feasible (and, when checked, correct) row."""
        ok = [r for r in self.rows if r.feasible and r.correct is not False]
        return min(ok, key=lambda r: r.latency_us) if ok else None

    def sorted(self, by: str = "latency_us", reverse: bool = False) -> list:
        """Rows sorted by a parameter or a column of :data:`COLUMNS` (missing values last)."""
        if by not in self.params and by not in COLUMNS:
            raise ValueError(f"cannot sort by {by!r}; choose from "
                             f"{', '.join([*self.params, *COLUMNS])}")

        def key(r):
            v = dict(r.setting)[by] if by in self.params else getattr(r, by)
            return (v is None, v if v is not None else 0)
        return sorted(self.rows, key=key, reverse=reverse)

    def records(self) -> list:
        """Plain dicts: parameters, then the columns (what the tables show)."""
        out = []
        for r in self.rows:
            d = dict(r.setting)
            d.update({k: v for k, v in asdict(r).items() if k != "setting"})
            out.append(d)
        return out

    def table_text(self, by: str | None = None) -> str:
        """A fixed-width table (optionally sorted)."""
        rows = self.rows if by is None else self.sorted(by)
        head = [*self.params, "latency us", "SBUF peak", "PSUM peak", "correct", "code"]
        body = [[repr(v) for _, v in r.setting]
                + ["" if r.latency_us is None else f"{r.latency_us:.3f}",
                   _s(r.sbuf_peak), _s(r.psum_peak),
                   "" if r.correct is None else ("yes" if r.correct else "NO"),
                   r.code or ("" if r.feasible else "infeasible")] for r in rows]
        widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
        return "\n".join("  ".join(f"{c:<{w}}" for c, w in zip(line, widths, strict=True))
                         .rstrip() for line in [head, *body])

    def table_html(self, by: str | None = None) -> str:
        """An HTML table (optionally sorted); clicking a column header sorts it in the browser."""
        head = [*self.params, "latency (us)", "SBUF peak", "PSUM peak", "correct",
                "error code"]
        ths = "".join(f"<th style='cursor:pointer' onclick='nkiwSort(this,{i})'>"
                      f"{html.escape(h)} &#8597;</th>" for i, h in enumerate(head))
        trs = []
        for r in (self.rows if by is None else self.sorted(by)):
            colour = "#1a7f37" if r.feasible and r.correct is not False else "#cf222e"
            cells = [repr(v) for _, v in r.setting] + [
                "" if r.latency_us is None else f"{r.latency_us:.3f}", _s(r.sbuf_peak),
                _s(r.psum_peak), "" if r.correct is None else ("yes" if r.correct else "NO"),
                r.code or ("" if r.feasible else "infeasible")]
            title = f" title='{html.escape(r.reason, quote=True)}'" if r.reason else ""
            trs.append(f"<tr style='color:{colour}'{title}>"
                       + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        return (f"<table class='nkiw-sweep'><thead><tr>{ths}</tr></thead>"
                f"<tbody>{''.join(trs)}</tbody></table>{_SORT_JS}")

    def inspect(self, row: SweepRow):
        """The full :class:`~nki_workbench.Inspection` of one row's setting (traced here)."""
        from .._src.inspection import inspect
        j = self.job
        return inspect(j["kernel"], *j["args"], grid=j["grid"],
                       platform_target=j["platform_target"], simulate=False, **j["kwargs"],
                       **dict(row.setting))

    def __repr__(self) -> str:
        best = self.best()
        return (f"SweepResult({len(self.rows)} settings, "
                f"{sum(r.feasible for r in self.rows)} feasible; fastest: "
                f"{best.label() + f' {best.latency_us:.3f} us' if best else 'none'})")

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(repr(self))}</p>{self.table_html()}"


_SORT_JS = """<script>
function nkiwSort(th, col) {
  const body = th.closest('table').tBodies[0];
  const rows = Array.from(body.rows);
  const asc = th.dataset.asc !== '1'; th.dataset.asc = asc ? '1' : '0';
  const val = (r) => { const t = r.cells[col].textContent; const n = parseFloat(t);
                       return isNaN(n) ? t : n; };
  rows.sort((a, b) => { const x = val(a), y = val(b);
    if (x === y) return 0; if (x === '') return 1; if (y === '') return -1;
    return (x < y ? -1 : 1) * (asc ? 1 : -1); });
  rows.forEach((r) => body.appendChild(r));
}
</script>"""


def _s(v) -> str:
    return "" if v is None else str(v)


def _settings(params: dict) -> list:
    names = list(params)
    return [tuple(zip(names, combo, strict=True)) for combo in itertools.product(*params.values())]


def sweep(kernel, args=(), params=None, *, kwargs=None, grid=None, platform_target=None,
          reference=None, atol: float = 1e-3, rtol: float = 1e-3, client=None,
          workers: int | None = None, progress: bool = True) -> SweepResult:
    """Evaluate every combination of ``params`` in parallel.

    Args:
        kernel: an ``@nki.jit`` kernel or kernel function.
        args: positional arguments (``nt.tensor`` placeholders, or arrays with ``reference``).
        params: ``{name: [values, ...]}``: keyword parameters to sweep.
        kwargs: other keyword arguments, fixed.
        grid: launch grid.
        platform_target: platform target.
        reference: ``reference(*args, **kwargs, **setting)`` → expected output: each feasible
            setting is also simulated and checked (``atol``/``rtol``).
        atol: absolute tolerance of the check.
        rtol: relative tolerance of the check.
        client: a ``dask.distributed.Client``: run the settings on its cluster.
        workers: local worker processes (default: the CPU count; ``0``: run here, serially).
        progress: show a progress bar (tqdm).

    Returns:
        SweepResult (rows in settings order).
    """
    job = {"kernel": kernel, "args": tuple(args), "params": check_params(kernel, params),
           "kwargs": dict(kwargs or {}), "grid": grid, "platform_target": platform_target,
           "reference": reference, "atol": atol, "rtol": rtol}
    settings = _settings(job["params"])
    bar = _bar(len(settings), progress, kernel)
    try:
        if client is not None:
            rows = _on_dask(client, job, settings, bar)
        elif workers == 0 or len(settings) == 1:
            rows = []
            for s in settings:
                rows.append(evaluate_setting(setting=s, **job))
                bar.update(1)
        else:
            rows = _on_processes(job, settings, workers or os.cpu_count() or 1, bar)
    finally:
        bar.close()
    return SweepResult(job["params"], rows, job)


def _bar(total: int, show: bool, kernel):
    from tqdm.auto import tqdm

    from .arguments import kernel_function
    return tqdm(total=total, disable=not show, unit="setting",
                desc=f"sweep {kernel_function(kernel).__name__}")


def _on_processes(job: dict, settings: list, workers: int, bar) -> list:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    import cloudpickle
    payload = cloudpickle.dumps(job)
    # why: spawn, not fork: a forked copy of a process running JAX (threads) can deadlock
    ctx = mp.get_context("spawn")
    rows: list = [None] * len(settings)
    with ProcessPoolExecutor(max_workers=min(workers, len(settings)), mp_context=ctx) as pool:
        futures = {pool.submit(_evaluate, payload, s): i for i, s in enumerate(settings)}
        for fut in as_completed(futures):
            rows[futures[fut]] = fut.result()
            bar.update(1)
    return rows


def _on_dask(client, job: dict, settings: list, bar) -> list:
    import cloudpickle
    from distributed import as_completed
    payload = client.scatter(cloudpickle.dumps(job), broadcast=True)
    futures = client.map(_evaluate, [payload] * len(settings), settings, pure=False)
    index = {f.key: i for i, f in enumerate(futures)}
    rows: list = [None] * len(settings)
    for fut in as_completed(futures):
        rows[index[fut.key]] = fut.result()
        bar.update(1)
    return rows
