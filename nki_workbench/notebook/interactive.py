"""Interactive timeline and memory map, drawn in the browser by Bokeh (panel's plotting library).

Everything runs client-side once the page is drawn: hover (opcode, operands, bytes, the cost
formula, the source line, what the instruction waited for — the Perfetto export's data), wheel
and drag zoom and pan, engine filters, the critical path as an outlined overlay, and a click on a
bar or tile highlights its line in the kernel's source listing below the plot. No kernel round
trip: the views work in a saved HTML page as well as in a notebook.

* :func:`timeline_figure` / :func:`memory_figure`: the Bokeh layouts;
* :func:`standalone_html`: a self-contained page (Bokeh's JS inline, no network), which the
  widget shows in an ``<iframe srcdoc>`` and the report embeds;
* :func:`compare_html`: both timelines of a ``compare`` on one linked time axis.

Colours come from :func:`~nki_workbench._src.sim.palette.opcode_colour` (one colour per opcode
in every plot) and, for memory tiles, the variable's colour in the static map's palette.
"""

from __future__ import annotations

import ast
import html

from .._src.sim.palette import opcode_colour
from .sources import source_line as _source_line
from .sources import source_listing

__all__ = ["timeline_figure", "memory_figure", "standalone_html", "compare_html",
           "timeline_page", "memory_page", "compare_layout",
           "iframe_html", "event_rows", "source_listing", "user_names", "ENGINE_GROUPS",
           "dma_note"]

ENGINE_GROUPS = ("Tensor", "Vector", "Scalar", "GpSimd", "Sync", "DMA")
"""Engine filter groups (``DMA`` = the 16 queue rows)."""

_TOOLTIPS = [("op", "@op"), ("row", "@row"), ("time", "@start_us{0.000}–@end_us{0.000} us"),
             ("operands", "@operands"), ("bytes", "@bytes"), ("cost", "@formula"),
             ("source", "@loc: @src"), ("waited for", "@wait")]


def dma_note(tl) -> str:
    """What the DMA rows mean in the time model (shown under every timeline)."""
    t = tl.target
    queues = getattr(t, "dma_queues", 16)
    engines = getattr(t, "dma_engines", 16)
    ppe = getattr(t, "partitions_per_dma_engine", 8)
    return (f"DMA rows q0..q{queues - 1} are the {queues} queues transfers are issued to, "
            f"round-robin. A transfer's bytes move on the {engines} DMA engines that serve its "
            f"partitions ({ppe} partitions per engine: a 128-partition tile is spread over all "
            f"{engines}), so bars on several queues at once share that bandwidth: they overlap "
            "only when their partitions are on different engines.")


def _group(row: str) -> str:
    name = row.split("/")[-1]
    return "DMA" if name.startswith("q") else name


def event_rows(tl) -> dict:
    """Column data of the timeline's events (what the hover and filters read)."""
    crit = {e.idx for e in tl.critical_path()}
    cols = {k: [] for k in ("row", "op", "start_us", "end_us", "operands", "bytes", "formula",
                            "loc", "src", "wait", "colour", "group", "critical", "line")}
    for e in tl.events:
        row = e.track if tl.cores == 1 else f"core{e.core}/{e.track}"
        cols["row"].append(row)
        cols["op"].append(e.op)
        cols["start_us"].append(e.start_ns / 1000.0)
        cols["end_us"].append(max(e.end_ns, e.start_ns + 1e-3) / 1000.0)
        cols["operands"].append(e.operands)
        cols["bytes"].append(int(e.bytes) if e.engine == "dma" else 0)
        cols["formula"].append(e.formula)
        cols["loc"].append(e.loc or "")
        cols["src"].append(_source_line(e.loc))
        cols["wait"].append(f"{e.wait}" + (f" (event {e.after})" if e.after >= 0 else ""))
        cols["colour"].append(opcode_colour(e.op))
        cols["group"].append(_group(row))
        cols["critical"].append(e.idx in crit)
        cols["line"].append(int(e.loc.rpartition(":")[2]) if e.loc and ":" in e.loc else 0)
    return cols


_TAP_JS = """
const i = src.selected.indices[0];
if (i === undefined) { return; }
const loc = src.data.loc[i];
const cut = loc.lastIndexOf(':');
const file = loc.slice(0, cut), line = parseInt(loc.slice(cut + 1));
const lines = listing[file] || [];
const esc = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
let out = '<div class="nkiw-src-file"><b>' + esc(file) + '</b></div><pre class="nkiw-src">';
for (let n = 1; n <= lines.length; n++) {
  const text = esc(lines[n - 1]);
  const mark = n === line
    ? ' class="nkiw-hl" data-line="' + n + '" style="background:#fff3b0"' : '';
  out += '<span' + mark + '>' + String(n).padStart(3) + '  ' + text + '</span>\\n';
}
div.text = out + '</pre>';
"""


def _source_div(width: int):
    from bokeh.models import Div
    return Div(text="<i>click a bar or tile to see its source line</i>", width=width,
               css_classes=["nkiw-source"])


def _tap(fig, source, listing, div) -> None:
    from bokeh.models import CustomJS, TapTool
    fig.select(type=TapTool).callback = CustomJS(
        args={"src": source, "listing": listing, "div": div}, code=_TAP_JS)


def timeline_figure(tl, title: str | None = None, x_range=None, width: int = 980,
                    filters: bool = True, source_panel: bool = True):
    """The timeline as a Bokeh layout: bars per row, hover, zoom, filters, critical path.

    Args:
        tl: a :class:`~nki_workbench._src.sim.perfetto.Timeline`.
        title: the plot title (default: kernel, target and latency).
        x_range: a shared Bokeh range (``compare`` links two timelines through it).
        width: plot width in pixels.
        filters: add the engine filter checkboxes.
        source_panel: add the click-to-source listing.

    Returns:
        A Bokeh layout (``column``).
    """
    from bokeh.layouts import column, row
    from bokeh.models import (
        BooleanFilter,
        CDSView,
        CheckboxGroup,
        ColumnDataSource,
        CustomJS,
        Div,
        HoverTool,
        Range1d,
    )
    from bokeh.plotting import figure

    rows = tl.tracks()[::-1]
    data = event_rows(tl)
    source = ColumnDataSource(data, name="nkiw-events")
    end = max(tl.total_ns / 1000.0, 1e-3)
    xr = x_range if x_range is not None else Range1d(0, end * 1.02, bounds=(0, end * 1.05),
                                                     name="nkiw-x")
    fig = figure(y_range=rows, x_range=xr, width=width, height=max(160, 22 * len(rows) + 90),
                 title=title or f"{tl.kernel_name} on {tl.target.name}: {tl.latency_us:.3f} us "
                 "(estimate)", tools="xpan,xwheel_zoom,box_zoom,tap,reset,save",
                 active_scroll="xwheel_zoom", active_drag="xpan", name="nkiw-timeline",
                 x_axis_label="time (us, estimated)", sizing_mode="fixed")
    mask = BooleanFilter([True] * len(data["op"]))
    view = CDSView(filter=mask)
    bars = fig.hbar(y="row", left="start_us", right="end_us", height=0.8, fill_color="colour",
                    line_color=None, source=source, view=view, legend_field="op",
                    name="nkiw-bars")
    crit_mask = BooleanFilter(list(data["critical"]))
    crit = fig.hbar(y="row", left="start_us", right="end_us", height=0.95, fill_alpha=0,
                    line_color="black", line_width=2, source=source,
                    view=CDSView(filter=crit_mask), name="nkiw-critical")
    fig.add_tools(HoverTool(renderers=[bars], tooltips=_TOOLTIPS))
    fig.legend.location = "top_left"
    fig.legend.label_text_font_size = "8pt"
    fig.add_layout(fig.legend[0], "right")
    fig.ygrid.grid_line_color = None
    parts = []
    if filters:
        groups = [g for g in ENGINE_GROUPS if g in set(data["group"])]
        boxes = CheckboxGroup(labels=groups, active=list(range(len(groups))), inline=True,
                              name="nkiw-filters")
        show_crit = CheckboxGroup(labels=["critical path"], active=[0], inline=True,
                                  name="nkiw-critical-toggle")
        boxes.js_on_change("active", CustomJS(args={"src": source, "mask": mask, "boxes": boxes},
                                              code="""
const on = new Set(boxes.active.map((i) => boxes.labels[i]));
mask.booleans = src.data.group.map((g) => on.has(g));
src.change.emit();
"""))
        show_crit.js_on_change("active", CustomJS(args={"r": crit, "t": show_crit},
                                                  code="r.visible = t.active.length > 0;"))
        parts.append(row(boxes, show_crit))
    parts.append(fig)
    parts.append(Div(text=f"<small>{html.escape(dma_note(tl))}</small>", width=width))
    if source_panel:
        div = _source_div(width)
        _tap(fig, source, source_listing(data["loc"]), div)
        parts.append(div)
    return column(*parts, name="nkiw-timeline-layout")


def _assigned_name(text: str) -> str | None:
    """The variable a source line assigns (``e = ...``, ``t[...] = ...``), else ``None``."""
    try:
        node = ast.parse(text).body[0] if text else None
    except SyntaxError:
        return None
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        tgt = node.targets[0]
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        tgt = node.target
    else:
        return None
    while isinstance(tgt, ast.Subscript):
        tgt = tgt.value
    return tgt.id if isinstance(tgt, ast.Name) else None


def user_names(buf) -> dict:
    """``{allocation name: label}``: the user's variable where the source line names one.

    The IR names temporaries ``t_1``, ``t_2``; the kernel's line ``e = nl.exp(t - m)`` names
    its result ``e``. Of several tiles a line creates, the last one (the assigned value) gets
    the variable's name; the intermediate ones and lines that assign nothing keep the IR name.
    """
    by_loc: dict = {}
    for a in buf.allocations:
        by_loc.setdefault(a.loc, []).append(a)
    out = {a.name: a.name for a in buf.allocations}
    for loc, allocs in by_loc.items():
        var = _assigned_name(_source_line(loc))
        if var is None:
            continue
        last = max(allocs, key=lambda a: (a.live[0], a.live[1]))
        for a in allocs:
            if a.tensor == var or a.tensor.startswith(var + "[") or a is last:
                suffix = a.name[len(a.tensor):]  # why: keep [block] / #copy markers
                out[a.name] = var + suffix
    return out


def memory_figure(buf, full_scale: bool = False, width: int = 980, ymax: int | None = None,
                  source_panel: bool = True):
    """An SBUF or PSUM map as a Bokeh layout: one labelled rectangle per allocation.

    x: instruction positions (one loop iteration); y: bytes per partition. Tiles keep a
    minimum drawn height (``1.5%`` of the axis) so small ones stay visible; the hover gives the
    exact bytes.

    Args:
        buf: a :class:`~nki_workbench._src.alloc.occupancy.BufferOccupancy`.
        full_scale: y axis up to the buffer's capacity.
        width: plot width in pixels.
        ymax: fixed y extent in bytes (the explorer's fixed-scale option).
        source_panel: add the click-to-source listing.

    Returns:
        A Bokeh layout (``column``).
    """
    from bokeh.layouts import column
    from bokeh.models import ColumnDataSource, HoverTool, LabelSet
    from bokeh.plotting import figure

    from .._src.alloc.occupancy import PALETTE
    names = user_names(buf)
    top = max(max((a.offset + a.size_bytes for a in buf.allocations), default=0), 1)
    extent = ymax or (buf.capacity_bytes if full_scale else int(top * 1.1) + 1)
    min_h = extent * 0.015
    cols = {k: [] for k in ("x0", "x1", "y0", "y1", "name", "ir", "bytes", "partitions",
                            "loc", "src", "colour", "live", "xm", "ym", "label")}
    for i, a in enumerate(buf.allocations):
        h = max(a.size_bytes, min_h)
        cols["x0"].append(a.live[0] - 0.45)
        cols["x1"].append(a.live[1] + 0.45)
        cols["y0"].append(a.offset)
        cols["y1"].append(a.offset + h)
        cols["name"].append(names[a.name])
        cols["ir"].append(a.name)
        cols["bytes"].append(a.size_bytes)
        last = a.start_partition + a.num_partitions - 1
        cols["partitions"].append(f"{a.start_partition}..{last}")
        cols["loc"].append(a.loc or "")
        cols["src"].append(_source_line(a.loc))
        cols["colour"].append(PALETTE[i % len(PALETTE)])
        cols["live"].append(f"{a.live[0]}..{a.live[1]}")
        cols["xm"].append((a.live[0] + a.live[1]) / 2)
        cols["ym"].append(a.offset + h / 2)
        cols["label"].append(names[a.name])
    source = ColumnDataSource(cols, name=f"nkiw-{buf.buffer}")
    fig = figure(width=width, height=420, x_range=(-0.5, max(buf.num_positions, 1) - 0.5),
                 y_range=(0, extent), tools="pan,wheel_zoom,box_zoom,tap,reset,save",
                 title=f"{buf.buffer.upper()}: peak {buf.peak_bytes_per_partition} / "
                 f"{buf.capacity_bytes} B per partition ({100 * buf.utilization:.1f}%)",
                 x_axis_label="instruction position (one loop iteration)",
                 y_axis_label="bytes per partition", name=f"nkiw-{buf.buffer}-map")
    quads = fig.quad(left="x0", right="x1", bottom="y0", top="y1", fill_color="colour",
                     fill_alpha=0.8, line_color="black", line_width=0.5, source=source)
    fig.add_layout(LabelSet(x="xm", y="ym", text="label", source=source, text_align="center",
                            text_baseline="middle", text_font_size="9pt"))
    fig.add_tools(HoverTool(renderers=[quads], tooltips=[
        ("tile", "@name (IR @ir)"), ("bytes/partition", "@bytes"),
        ("partitions", "@partitions"), ("live", "positions @live"),
        ("source", "@loc: @src")]))
    parts = [fig]
    if source_panel:
        div = _source_div(width)
        _tap(fig, source, source_listing(cols["loc"]), div)
        parts.append(div)
    return column(*parts)


_PAGE_CSS = ("body{font-family:system-ui,sans-serif;margin:4px} .nkiw-src{font-size:12px;"
             "margin:0} .nkiw-src-file{font-size:12px;color:#555}")


def standalone_html(layout, title: str = "nki-workbench") -> str:
    """A self-contained HTML page of a Bokeh layout (BokehJS inline: works offline)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    page = file_html(layout, INLINE, title)
    return page.replace("</head>", f"<style>{_PAGE_CSS}</style></head>", 1)


def iframe_html(page: str, height: int) -> str:
    """``page`` in an ``<iframe srcdoc>`` (what the widget and notebooks show)."""
    return (f"<iframe class='nkiw-interactive' style='width:100%;height:{height}px;border:0' "
            f"sandbox='allow-scripts allow-same-origin' srcdoc=\"{html.escape(page, quote=True)}\">"
            "</iframe>")


def _listing_height(layout) -> int:
    from bokeh.models import CustomJS
    listings = [cb.args["listing"] for cb in layout.select({"type": CustomJS})
                if "listing" in cb.args]
    lines = max((len(v) for d in listings for v in d.values()), default=0)
    return min(420, 18 * lines + 40) if listings else 0


def timeline_page(tl) -> tuple:
    """``(html page, height px)`` of the interactive timeline (for an iframe)."""
    layout = timeline_figure(tl)
    fig = layout.select_one({"name": "nkiw-timeline"})
    return standalone_html(layout, f"{tl.kernel_name} timeline"), \
        fig.height + 110 + _listing_height(layout)


def memory_page(buf, full_scale: bool = False, ymax: int | None = None) -> tuple:
    """``(html page, height px)`` of the interactive SBUF/PSUM map (for an iframe)."""
    layout = memory_figure(buf, full_scale=full_scale, ymax=ymax)
    return standalone_html(layout, f"{buf.buffer} map"), 440 + _listing_height(layout)


def compare_layout(cmp):
    """Both timelines of a ``compare`` on one shared time axis (zooming one zooms both)."""
    from bokeh.layouts import column
    from bokeh.models import Div, Range1d
    ta, tb = cmp.timelines()
    end = max(ta.total_ns, tb.total_ns, 1.0) / 1000.0
    shared = Range1d(0, end * 1.02, bounds=(0, end * 1.05), name="nkiw-x")
    na, nb = cmp.names()
    figs = [timeline_figure(ta, title=f"{na}: {ta.latency_us:.3f} us (estimate)",
                            x_range=shared, source_panel=False),
            timeline_figure(tb, title=f"{nb}: {tb.latency_us:.3f} us (estimate)",
                            x_range=shared, source_panel=False)]
    head = Div(text=f"<b>{html.escape(cmp.verdict())}</b>")
    return column(head, *figs)


def compare_html(cmp) -> str:
    """:func:`compare_layout` as a standalone page."""
    return standalone_html(compare_layout(cmp), "nki-workbench compare")
