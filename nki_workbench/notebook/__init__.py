"""The Jupyter workbench: ``%%nki`` magic, Inspector widget, compare, explorer, HTML report.

Public face (each name is imported on first use, so ``import nki_workbench`` stays light):

* ``compare(a, b)`` → :class:`Comparison` of two Inspections (IR diff, latency, utilisation,
  peak SBUF/PSUM, timelines on a shared time axis)
* ``explore(kernel, args, params={...})`` → :class:`Explorer` (sliders over compile-time
  constants; ``.panel()`` is the same explorer as a panel app); ``explore(sweep_result)`` or
  ``Explorer.run_sweep(workers=N)`` adds the sweep's sortable table, and a row jumps to it
* ``sweep(kernel, args, params={...}, client=None)`` → :class:`SweepResult` (every setting,
  in local worker processes or on a ``dask.distributed`` cluster; sortable table)
* ``Inspector`` — the ipywidgets ``Tab`` behind ``Inspection.widget()``
* ``MIME_TYPE`` / ``mimebundle`` — the static views (``docs/mime.md``)
* ``report_html(inspections)`` — one self-contained HTML page (the CLI's ``report``)
"""

_LAZY = {"compare": "comparison", "Comparison": "comparison", "explore": "explorer",
         "Explorer": "explorer", "Trial": "trials", "Inspector": "inspector",
         "MIME_TYPE": "mime", "mimebundle": "mime", "report_html": "report",
         "SimulationProgress": "progress", "CheckResult": "check", "sweep": "sweeps",
         "SweepResult": "sweeps", "SweepRow": "sweeps"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    # why: the views import matplotlib / ipywidgets / panel; pay for them only when used
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
