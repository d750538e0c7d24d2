"""The Inspector: an ipywidgets ``Tab`` over one Inspection.

Tabs: Summary | Config | IR | SBUF | PSUM | Timeline | HLO.

* Summary: the text summary (kernel, shapes, latency, peak SBUF/PSUM, max error).
* Config: the decoded backend_config as a collapsible tree of its 14 keys.
* IR: the IR text with line numbers and colouring.
* SBUF / PSUM: the occupancy maps (PNG) and their allocation tables; SBUF can be drawn to full
  scale.
* Timeline: the Gantt chart with a zoom range slider (µs) and engine / DMA filters, and the
  per-engine utilisation table.
* HLO: the custom-call text the jax or torchxla bridge emits, or why it is not available.

Every view reads the Inspection; images are :mod:`.plots` PNGs (deterministic bytes), no
``Output`` widgets (their messages leak into stored outputs under nbval).
"""

from __future__ import annotations

import ipywidgets as W

from .._src.inspection import FRAMEWORKS
from . import mime, plots

__all__ = ["Inspector", "TimelineView", "TAB_TITLES", "VIEWS", "CHECK_FAILED_TITLE"]

TAB_TITLES = mime.TAB_TITLES
VIEWS = ("config", "ir", "sbuf", "psum", "timeline", "hlo")
"""Names ``--show`` accepts (the Summary tab is always there)."""
CHECK_FAILED_TITLE = mime.CHECK_FAILED_TITLE

# engine filter label -> predicate on a timeline row name (DMA queues are q0..q15)
_ROW_GROUPS = {"Tensor": "Tensor", "Vector": "Vector", "Scalar": "Scalar", "GpSimd": "GpSimd",
               "Sync": "Sync", "DMA": "q"}


def _pre(text: str) -> W.HTML:
    return W.HTML(f"<pre style='margin:0;font-size:12px'>{mime.esc(text)}</pre>")


def _unavailable(what: str, reason: str) -> W.HTML:
    return W.HTML(f"<div style='color:#b00020'><b>{mime.esc(what)} not available</b>: "
                  f"<pre style='white-space:pre-wrap'>{mime.esc(reason)}</pre></div>")


def _group_of(row: str) -> str:
    name = row.split("/")[-1]
    return "DMA" if name.startswith("q") else name


def _interactive(page_and_height) -> W.HTML:
    from . import interactive
    page, height = page_and_height
    return W.HTML(interactive.iframe_html(page, height), layout=W.Layout(width="100%"))


class _ModeSwitch:
    """``interactive`` (Bokeh, client-side) or ``static`` (PNG) view of one tab."""

    def _mode_widgets(self, interactive_box, static_box):
        self.interactive = interactive_box
        self.static = static_box
        self.mode = W.ToggleButtons(options=["interactive", "static"], value="interactive",
                                    description="view", style={"button_width": "90px"})
        self.mode.observe(self._show_mode, "value")
        self._show_mode()
        return self.mode

    def _show_mode(self, _change=None) -> None:
        on = self.mode.value == "interactive"
        self.interactive.layout.display = None if on else "none"
        self.static.layout.display = "none" if on else None


class TimelineView(W.VBox, _ModeSwitch):
    """The timeline: interactive (Bokeh: hover, zoom, filters, click-to-source) or a PNG.

    Attributes:
        timeline: the :class:`~nki_workbench._src.sim.timing.Timeline` shown.
        mode: ``ToggleButtons``: ``interactive`` (default) or ``static``.
        interactive: the ``HTML`` widget holding the Bokeh page (drawn in the browser: zoom
            and pan need no kernel round trip).
        window: ``FloatRangeSlider`` of the static view's time range, in µs.
        filters: ``{group: Checkbox}`` per engine present (``DMA`` = all queues).
        image: the ``Image`` widget with the current PNG.
    """

    def __init__(self, tl):
        from . import interactive
        self.timeline = tl
        total_us = max(tl.total_ns / 1000.0, 1e-3)
        self.window = W.FloatRangeSlider(
            value=(0.0, total_us), min=0.0, max=total_us, step=total_us / 200,
            description="window (µs)", readout_format=".3f", continuous_update=False,
            layout=W.Layout(width="95%"), style={"description_width": "initial"})
        groups = []
        for row in tl.tracks():
            g = _group_of(row)
            if g not in groups:
                groups.append(g)
        self.filters = {g: W.Checkbox(value=True, description=g, indent=False,
                                      layout=W.Layout(width="auto")) for g in groups}
        self.image = W.Image(format="png", value=self._render())
        self.window.observe(self._update, "value")
        for cb in self.filters.values():
            cb.observe(self._update, "value")
        report = _pre(tl.report())
        static = W.VBox([self.window, W.HBox(list(self.filters.values())), self.image,
                         W.HTML(f"<small>{mime.esc(interactive.dma_note(tl))}</small>")])
        mode = self._mode_widgets(_interactive(interactive.timeline_page(tl)), static)
        super().__init__([mode, self.interactive, static, report])

    def rows(self) -> list:
        """Timeline rows whose engine filter is on."""
        on = {g for g, cb in self.filters.items() if cb.value}
        return [r for r in self.timeline.tracks() if _group_of(r) in on]

    def _render(self) -> bytes:
        lo, hi = self.window.value
        return plots.gantt_png(self.timeline, lo * 1000.0, hi * 1000.0, self.rows())

    def _update(self, _change=None) -> None:
        self.image.value = self._render()


class _OccupancyView(W.VBox, _ModeSwitch):
    """Occupancy map (interactive or PNG) and allocation table of one buffer.

    SBUF has a full-scale toggle (the y axis up to the capacity).
    """

    def __init__(self, buf):
        from . import interactive
        self.buffer = buf
        self.image = W.Image(format="png", value=plots.occupancy_png(buf))
        mode = self._mode_widgets(_interactive(interactive.memory_page(buf)),
                                  W.VBox([self.image]))
        children = [mode, self.interactive, self.static, _pre(buf.text())]
        if buf.buffer == "sbuf":
            self.full_scale = W.Checkbox(value=False, description="full scale", indent=False)
            self.full_scale.observe(self._update, "value")
            children.insert(1, self.full_scale)
        super().__init__(children)

    def _update(self, change) -> None:
        from . import interactive
        self.image.value = plots.occupancy_png(self.buffer, full_scale=change["new"])
        self.interactive.value = _interactive(
            interactive.memory_page(self.buffer, full_scale=change["new"])).value


class _HloView(W.VBox):
    """Custom-call text per framework (or why the bridge cannot give it)."""

    def __init__(self, insp, framework: str):
        self.inspection = insp
        self.framework = W.ToggleButtons(options=list(FRAMEWORKS), value=framework,
                                         description="framework")
        self.text = W.HTML(self._render(framework))
        self.framework.observe(lambda ch: setattr(self.text, "value", self._render(ch["new"])),
                               "value")
        super().__init__([self.framework, self.text])

    def _render(self, framework: str) -> str:
        try:
            text = self.inspection.custom_call(framework)
        except Exception as exc:  # noqa: BLE001 - the reason is the content of this tab
            return _unavailable(f"{framework} custom call", f"{type(exc).__name__}: {exc}").value
        return f"<pre style='font-size:12px;white-space:pre-wrap'>{mime.esc(text)}</pre>"


def _summary_tab(insp, _):
    return W.HTML(f"{mime.check_banner_html(insp)}"
                  f"<pre style='margin:0'>{mime.esc(mime.summary_text(insp))}</pre>")


def _config_tab(insp, _):
    return W.HTML(mime.config_html(insp.config))


def _ir_tab(insp, _):
    return W.HTML(mime.ir_html(insp.ir))


def _sbuf_tab(insp, _):
    return _OccupancyView(mime.memory_of(insp).sbuf)


def _psum_tab(insp, _):
    return _OccupancyView(mime.memory_of(insp).psum)


def _timeline_tab(insp, _):
    return TimelineView(mime.timeline_of(insp))


def _hlo_tab(insp, opts):
    return _HloView(insp, opts.get("framework", "jax"))


# tab title -> builder(inspection, options) -> widget
_BUILDERS = {"Summary": _summary_tab, "Config": _config_tab, "IR": _ir_tab, "SBUF": _sbuf_tab,
             "PSUM": _psum_tab, "Timeline": _timeline_tab, "HLO": _hlo_tab}


class Inspector(W.Tab):
    """The Inspector widget of an Inspection (an ipywidgets ``Tab``).

    Args:
        inspection: the :class:`~nki_workbench.Inspection` to show.
        show: views to include (names of :data:`VIEWS`; default all); Summary is always first.
        selected: title of the tab to open first (default Summary).
        framework: framework shown first in the HLO tab (``"jax"`` or ``"torchxla"``).

    Attributes:
        inspection: the Inspection.
        views: ``{title: widget}`` of the tabs built.
    """

    def __init__(self, inspection, show=None, selected: str | None = None,
                 framework: str = "jax"):
        names = VIEWS if show is None else tuple(show)
        bad = sorted(set(names) - set(VIEWS))
        if bad:
            raise ValueError(f"unknown views {bad}; choose from {', '.join(VIEWS)}")
        titles = ["Summary"] + [t for t in TAB_TITLES[1:] if t.lower() in names]
        self.inspection = inspection
        self.views = {}
        for t in titles:
            try:
                self.views[t] = _BUILDERS[t](inspection, {"framework": framework})
            except Exception as exc:  # noqa: BLE001 - a failing view says why in its tab
                self.views[t] = _unavailable(t, f"{type(exc).__name__}: {exc}")
        super().__init__(children=list(self.views.values()))
        self.check_failed = mime.check_failed(inspection)
        self._names = names
        # why: a failed check marks its tab, so it is seen with another tab open
        self.titles = mime.tab_titles(inspection, names)
        if selected is not None:
            if selected not in titles:
                raise ValueError(f"no tab {selected!r}; tabs: {', '.join(titles)}")
            self.selected_index = titles.index(selected)

    def summary(self) -> str:
        """One deterministic line naming the kernel and the tabs (the widget's text/plain)."""
        return (f"Inspector({self.inspection.kernel_name}): tabs="
                f"{'|'.join(self.titles)}")

    def __repr__(self) -> str:
        return self.summary()

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs)
        data["text/plain"] = self.summary()
        # why: a saved notebook without widget state (GitHub, nbviewer) shows the same tabs
        data["text/html"] = mime.inspector_html(self.inspection, self._names)
        return data
