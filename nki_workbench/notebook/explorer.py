"""The tile-allocation explorer: sliders over a kernel's compile-time constants.

``explore(kernel, args, params={"TILE_N": [128, 256, 512]})`` builds an :class:`Explorer`. Each
setting is passed to the kernel as keyword arguments and evaluated by the workbench's own
pipeline: :func:`nki_workbench.inspect` (trace, allocate; no simulation), the occupancy model and
the time model. A setting is *infeasible* when the trace or the allocator rejects it (layout
errors, SBUF/PSUM over capacity); the views show it in red with the reason. Every setting tried
is kept in a table.

Views: ``Explorer.widget()`` (ipywidgets: selection sliders, SBUF map, timeline, latency,
table) and ``Explorer.panel()`` (the same as a panel app, served by
``nki-workbench explore FILE.py --kernel NAME``).

On a sweep: ``explore(sweep_result)`` (or ``Explorer.run_sweep(workers=N, client=...)``, which
runs :func:`~.sweeps.sweep` over the explorer's settings) keeps the
:class:`~.sweeps.SweepResult`; both views then show its results table (latency, SBUF/PSUM peak,
correctness, error code; the widget sorts it by any column) and choosing a row, or
:meth:`Explorer.jump`, moves the sliders and every view to that setting. Settings are evaluated
by :func:`.trials.evaluate_trial`, as a sweep's are, so a row and its trial agree.
"""

from __future__ import annotations

import itertools

from .._src.options import legacy_target
from . import mime, plots
from .arguments import kernel_function
from .sweeps import COLUMNS, SweepResult, SweepRow, sweep
from .trials import Trial, check_params, evaluate_trial

__all__ = ["Trial", "Explorer", "explore", "serve"]

OK_COLOUR, BAD_COLOUR = "#1a7f37", "#cf222e"


class Explorer:
    """Evaluates a kernel over settings of its compile-time constants.

    Args:
        kernel: an ``@nki.jit`` kernel or kernel function.
        args: positional kernel arguments (arrays or ``nt.tensor`` placeholders).
        params: ``{name: [values...]}``: keyword parameters of the kernel to sweep.
        kwargs: other keyword arguments, fixed.
        grid: launch grid.
        platform_target: platform target.
        target: deprecated spelling of ``platform_target``.

    Attributes:
        trials: the :class:`Trial` of every setting evaluated, in the order tried.
    """

    def __init__(self, kernel, args=(), params=None, kwargs=None, grid=None,
                 platform_target=None, target=None):
        platform_target = legacy_target(platform_target, target, "Explorer")
        self.params = check_params(kernel, params)
        self.kernel = kernel
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.grid = grid
        self.platform_target = platform_target
        self.trials: list = []
        self.sweep_result: SweepResult | None = None
        self.setting: dict = self.default()
        self._cache: dict = {}
        self._views: list = []

    @classmethod
    def from_sweep(cls, result: SweepResult) -> Explorer:
        """An explorer over a sweep's kernel and settings, with its table to jump from.

        Args:
            result: a :class:`~.sweeps.SweepResult` (kept as ``sweep_result``).
        """
        j = result.job
        ex = cls(j["kernel"], j["args"], result.params, j["kwargs"], j["grid"],
                 j["platform_target"])
        ex.sweep_result = result
        return ex

    def run_sweep(self, *, workers: int | None = None, client=None, reference=None,
                  atol: float = 1e-3, rtol: float = 1e-3, progress: bool = True) -> SweepResult:
        """Evaluate every setting with :func:`~.sweeps.sweep` (in parallel) and keep the table.

        Args:
            workers: local worker processes (default: the CPU count; ``0``: here, serially).
            client: a ``dask.distributed.Client`` to run the settings on.
            reference: ``reference(*args, **kwargs, **setting)`` to check each setting against.
            atol: absolute tolerance of the check.
            rtol: relative tolerance of the check.
            progress: show a progress bar.

        Returns:
            SweepResult (also ``self.sweep_result``; the widget shows it as a table to jump from).
        """
        self.sweep_result = sweep(self.kernel, self.args, self.params, kwargs=self.kwargs,
                                  grid=self.grid, platform_target=self.platform_target,
                                  reference=reference, atol=atol, rtol=rtol, client=client,
                                  workers=workers, progress=progress)
        for view in self._views:
            view.show_sweep()
        return self.sweep_result

    def jump(self, row) -> Trial:
        """Make a sweep row's setting the explorer's setting; every open widget follows.

        Args:
            row: a :class:`~.sweeps.SweepRow`, an index into ``sweep_result.rows``, or a
                setting dict.

        Returns:
            Trial of that setting (traced here, with its Inspection for the views).
        """
        if isinstance(row, int):
            if self.sweep_result is None:
                raise ValueError("jump(index) needs a sweep: call run_sweep() or "
                                 "explore(sweep_result) first")
            row = self.sweep_result.rows[row]
        setting = dict(row.setting) if isinstance(row, SweepRow) else dict(row)
        trial = self.evaluate(**setting)
        for view in self._views:
            view.set_setting(setting)
        return trial

    @property
    def name(self) -> str:
        """The kernel's name."""
        return kernel_function(self.kernel).__name__

    def settings(self) -> list:
        """Every combination of the parameter values, as dicts."""
        names = list(self.params)
        return [dict(zip(names, combo, strict=True))
                for combo in itertools.product(*self.params.values())]

    def default(self) -> dict:
        """The first value of every parameter."""
        return {k: v[0] for k, v in self.params.items()}

    def evaluate(self, **setting) -> Trial:
        """Trace, allocate and time one setting (cached).

        Args:
            **setting: a value for every parameter of the sweep.

        Returns:
            Trial
        """
        missing = [k for k in self.params if k not in setting]
        extra = [k for k in setting if k not in self.params]
        if missing or extra:
            raise ValueError(f"a setting needs exactly the parameters {list(self.params)}; "
                             f"missing {missing}, unknown {extra}")
        key = tuple((k, setting[k]) for k in self.params)
        self.setting = dict(key)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        trial = evaluate_trial(self.kernel, self.args, self.kwargs, self.grid,
                               self.platform_target, key)
        self._cache[key] = trial
        self.trials.append(trial)
        return trial

    def best(self) -> Trial | None:
        """The fastest feasible trial so far."""
        ok = [t for t in self.trials if t.feasible]
        return min(ok, key=lambda t: t.latency_us) if ok else None

    # ----------------------------------------------------------------------------- views
    def table_text(self) -> str:
        """Every trial as a text table."""
        head = [*self.params, "feasible", "latency us", "SBUF peak", "PSUM peak", "reason"]
        rows = [[repr(v) for _, v in t.setting]
                + ["yes" if t.feasible else "NO",
                   "" if t.latency_us is None else f"{t.latency_us:.3f}",
                   "" if t.sbuf_peak is None else str(t.sbuf_peak),
                   "" if t.psum_peak is None else str(t.psum_peak), t.reason or ""]
                for t in self.trials]
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
        return "\n".join("  ".join(f"{c:<{w}}" for c, w in zip(r, widths, strict=True)).rstrip()
                         for r in [head, *rows])

    def table_html(self) -> str:
        """Every trial as an HTML table; infeasible rows in red (all text escaped)."""
        head = "".join(f"<th>{mime.esc(h)}</th>" for h in
                       [*self.params, "latency (us)", "SBUF peak", "PSUM peak", "status"])
        best = self.best()
        rows = []
        for t in self.trials:
            colour = OK_COLOUR if t.feasible else BAD_COLOUR
            cells = [mime.esc(repr(v)) for _, v in t.setting]
            cells += ["" if t.latency_us is None else f"{t.latency_us:.3f}",
                      "" if t.sbuf_peak is None else str(t.sbuf_peak),
                      "" if t.psum_peak is None else str(t.psum_peak),
                      ("fastest" if t is best else "ok") if t.feasible
                      else mime.esc(t.reason)]
            rows.append(f"<tr style='color:{colour}'>"
                        + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        return (f"<table class='nkiw-trials'><thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>")

    def status_html(self, trial: Trial) -> str:
        """Latency line (green) or the infeasibility reason (red)."""
        colour = OK_COLOUR if trial.feasible else BAD_COLOUR
        return f"<div style='color:{colour};font-weight:bold'>{mime.esc(trial.status())}</div>"

    def images(self, trial: Trial, fixed_scale: bool = False) -> tuple:
        """``(sbuf_png, timeline_png)`` of a trial (a red message when infeasible).

        Args:
            trial: the evaluated setting.
            fixed_scale: draw the SBUF map up to the SBUF capacity, the same axis for every
                setting (a setting using twice the bytes looks twice as tall).
        """
        if not trial.feasible:
            msg = plots.message_png(f"infeasible: {trial.reason}", height=1.6,
                                    color=BAD_COLOUR)
            return msg, msg
        insp = trial.inspection
        return (plots.occupancy_png(mime.memory_of(insp).sbuf, full_scale=fixed_scale),
                plots.gantt_png(mime.timeline_of(insp)))

    def widget(self):
        """The explorer as ipywidgets (see :class:`ExplorerWidget`)."""
        return ExplorerWidget(self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = self.widget()._repr_mimebundle_()
        data["text/plain"] = repr(self)
        return data

    def __repr__(self) -> str:
        sweep = ", ".join(f"{k} in {v!r}" for k, v in self.params.items())
        return f"Explorer({self.name}: {sweep}; {len(self.trials)} settings tried)"

    def panel(self):
        """The explorer as a panel app (``pn.Column``; with a sweep, its table to jump from)."""
        import panel as pn
        start = self.setting
        sliders = {k: pn.widgets.DiscreteSlider(label=k, options=v, value=start[k])
                   for k, v in self.params.items()}
        fixed = pn.widgets.Checkbox(name="fixed scale (SBUF capacity)", value=False)
        status = pn.pane.HTML("", sizing_mode="stretch_width")
        sbuf = pn.pane.PNG(None, sizing_mode="scale_width", max_width=900)
        timeline = pn.pane.PNG(None, sizing_mode="scale_width", max_width=1100)
        table = pn.pane.HTML("", sizing_mode="stretch_width")

        hold = []

        def update(*_):
            if hold:
                return
            trial = self.evaluate(**{k: s.value for k, s in sliders.items()})
            images, rows = self.images(trial, fixed.value), self.table_html()
            with pn.io.hold():  # why: the browser gets status, images and table together
                status.object = self.status_html(trial)
                sbuf.object, timeline.object = images
                table.object = rows
        for s in (*sliders.values(), fixed):
            s.param.watch(update, "value")
        update()
        parts = [pn.pane.Markdown(f"## Tile-allocation explorer: `{self.name}`"),
                 pn.Row(*sliders.values(), fixed), status,
                 pn.Tabs(("SBUF", sbuf), ("Timeline", timeline)),
                 pn.pane.Markdown("### Settings tried"), table]
        res = self.sweep_result
        if res is not None:
            lines = res.table_text(by="latency_us").splitlines()
            ordered = res.sorted("latency_us")
            rows = pn.widgets.Select(label=f"jump to   {lines[0]}", size=min(12, len(lines)),
                                     options={"": None} | {line: res.rows.index(r) for line, r
                                                           in zip(lines[1:], ordered,
                                                                  strict=True)},
                                     sizing_mode="stretch_width",
                                     stylesheets=["select {font-family: monospace}"])

            def jump(event):
                if event.new is None:
                    return
                setting = dict(res.rows[event.new].setting)
                hold.append(1)
                try:
                    for k, sl in sliders.items():
                        sl.value = setting[k]
                finally:
                    hold.clear()
                update()
            rows.param.watch(jump, "value")
            parts += [pn.pane.Markdown("### Sweep results (fastest first; choose one to jump "
                                       "to it)"), rows,
                      pn.pane.HTML(res.table_html(by="latency_us"),
                                   sizing_mode="stretch_width")]
        return pn.Column(*parts, sizing_mode="stretch_width")


class ExplorerWidget:
    """ipywidgets view of an :class:`Explorer`.

    Attributes:
        explorer: the Explorer.
        sliders: ``{name: SelectionSlider}``.
        fixed_scale: ``Checkbox``: the SBUF map on the capacity axis for every setting.
        status: ``HTML`` with the latency or the reason (red).
        sbuf: ``Image`` of the SBUF occupancy map.
        timeline: ``Image`` of the timeline.
        table: ``HTML`` table of the settings tried.
        sort_by: ``Dropdown``: the column the sweep results are sorted by.
        rows: ``Select``: the sweep's rows (sorted); choosing one jumps the sliders to it.
        sweep_table: ``HTML`` table of the sweep's rows (same order as ``rows``).
        box: the ``VBox`` that holds them.
    """

    def __init__(self, explorer: Explorer):
        import ipywidgets as W
        self.explorer = explorer
        start = explorer.setting
        self.sliders = {k: W.SelectionSlider(options=v, value=start[k], description=k,
                                             continuous_update=False)
                        for k, v in explorer.params.items()}
        self.fixed_scale = W.Checkbox(value=False, description="fixed scale (SBUF capacity)",
                                      indent=False)
        self.status = W.HTML()
        self.sbuf = W.Image(format="png")
        self.timeline = W.Image(format="png")
        self.table = W.HTML()
        self.sort_by = W.Dropdown(options=[*explorer.params, *COLUMNS], value="latency_us",
                                  description="sort by")
        self.rows = W.Select(options=[], rows=8, description="jump to",
                             layout=W.Layout(width="100%"))
        self.sweep_table = W.HTML()
        self.sweep_box = W.VBox([W.HTML("<b>Sweep results</b> (choose a row to jump to it)"),
                                 self.sort_by, self.rows, self.sweep_table])
        self.sweep_box.layout.display = "none"
        tabs = W.Tab(children=[self.sbuf, self.timeline])
        tabs.titles = ("SBUF", "Timeline")
        self.box = W.VBox([W.HBox([*self.sliders.values(), self.fixed_scale]), self.status, tabs,
                           self.sweep_box, W.HTML("<b>Settings tried</b>"), self.table])
        for s in (*self.sliders.values(), self.fixed_scale):
            s.observe(self.update, "value")
        self.sort_by.observe(lambda _c: self.show_sweep(), "value")
        self.rows.observe(self._chosen, "value")
        explorer._views.append(self)
        self.show_sweep()
        self.update()

    def update(self, _change=None) -> Trial:
        """Evaluate the sliders' setting and refresh every view."""
        trial = self.explorer.evaluate(**{k: s.value for k, s in self.sliders.items()})
        self.status.value = self.explorer.status_html(trial)
        self.sbuf.value, self.timeline.value = self.explorer.images(trial,
                                                                    self.fixed_scale.value)
        self.table.value = self.explorer.table_html()
        return trial

    def set_setting(self, setting: dict) -> Trial:
        """Move the sliders to ``setting`` and refresh the views once."""
        with self.box.hold_trait_notifications():
            for k, s in self.sliders.items():
                s.unobserve(self.update, "value")
                s.value = setting[k]
                s.observe(self.update, "value")
        return self.update()

    def show_sweep(self) -> None:
        """Show the explorer's sweep results (if any), sorted by ``sort_by``."""
        res = self.explorer.sweep_result
        if res is None:
            return
        self.sweep_box.layout.display = None
        rows = res.sorted(self.sort_by.value)
        lines = res.table_text(by=self.sort_by.value).splitlines()[1:]
        self.rows.unobserve(self._chosen, "value")
        self.rows.options = [(line, res.rows.index(r)) for line, r in
                             zip(lines, rows, strict=True)]
        self.rows.value = None
        self.rows.observe(self._chosen, "value")
        self.sweep_table.value = res.table_html(by=self.sort_by.value)

    def _chosen(self, change) -> None:
        if change["new"] is not None:
            self.explorer.jump(change["new"])

    def _repr_mimebundle_(self, **kwargs):
        data = self.box._repr_mimebundle_(**kwargs)
        data["text/plain"] = repr(self.explorer)
        return data


def explore(kernel, args=(), params=None, *, kwargs=None, grid=None, platform_target=None,
            target=None) -> Explorer:
    """Explore a kernel's compile-time constants with sliders (or the rows of a sweep).

    ``explore(sweep_result)`` builds the explorer over a :class:`~.sweeps.SweepResult`'s
    kernel and settings: its widget shows the sortable results table, and choosing a row (or
    :meth:`Explorer.jump`) moves the sliders and views to that setting.

    Args:
        kernel: an ``@nki.jit`` kernel or kernel function, or a ``SweepResult``.
        args: its positional arguments (arrays or ``nt.tensor`` placeholders; only shapes and
            dtypes matter: settings are traced and timed, not simulated).
        params: ``{name: [values, ...]}`` keyword parameters to sweep.
        kwargs: other keyword arguments, fixed.
        grid: launch grid.
        platform_target: platform target.
        target: deprecated spelling of ``platform_target``.

    Returns:
        Explorer (displays as the widget).
    """
    if isinstance(kernel, SweepResult):
        return Explorer.from_sweep(kernel)
    platform_target = legacy_target(platform_target, target, "explore")
    return Explorer(kernel, args, params, kwargs, grid, platform_target)


def serve(explorer: Explorer, port: int = 5006, show: bool = False, **kwargs):
    """Serve ``explorer.panel()`` with panel on 127.0.0.1 (blocks until stopped).

    Args:
        explorer: the Explorer.
        port: TCP port.
        show: open a browser.
        **kwargs: passed to ``panel.serve``.
    """
    import panel as pn
    origins = [f"127.0.0.1:{port}", f"localhost:{port}"]
    return pn.serve(explorer.panel, address="127.0.0.1", port=port, show=show,
                    websocket_origin=origins, title=f"nki-workbench explore {explorer.name}",
                    **kwargs)
