"""The interactive (Bokeh) timeline and memory map, and one colour per opcode everywhere."""

import re

import numpy as np
import pytest
from nb_cells import ADD_CELL

from nki_workbench._src.sim.palette import opcode_colour
from nki_workbench.notebook import interactive, plots


@pytest.fixture(scope="module")
def insp(ip):
    ip.run_cell_magic("nki", "--args x,y --quiet --out inter_insp", ADD_CELL)
    return ip.user_ns["inter_insp"]


def test_event_rows_carry_the_perfetto_details(insp):
    tl = insp.timeline
    cols = interactive.event_rows(tl)
    trace = [e for e in tl.to_perfetto()["traceEvents"] if e.get("ph") == "X"]
    assert cols["op"] == [e["name"] for e in trace]
    assert cols["loc"] == [e["args"]["loc"] for e in trace]
    assert cols["formula"] == [e["args"]["formula"] for e in trace]
    assert cols["operands"] == [e["args"]["operands"] for e in trace]
    assert [b for b, e in zip(cols["bytes"], tl.events, strict=True) if e.engine == "dma"] == [
        e["args"]["bytes"] for e in trace if e["cat"] == "dma"]
    exp = cols["op"].index("exp")
    assert cols["src"][exp] == "nl.store(out[i * 128:(i + 1) * 128, :], nl.exp(t) + u)"
    assert cols["start_us"][exp] == pytest.approx(tl.events[exp].start_ns / 1000)
    assert sum(cols["critical"]) == len(tl.critical_path())
    assert set(cols["group"]) == {"DMA", "Vector", "Scalar"}


def test_one_colour_per_opcode_in_every_kernel_and_filter(insp):
    cols = interactive.event_rows(insp.timeline)
    for op, colour in zip(cols["op"], cols["colour"], strict=True):
        assert colour == opcode_colour(op)
    # the static Gantt uses the same colour, also with rows filtered out
    fig = plots.filter_timeline(insp.timeline, ["Scalar"]).plot()
    legend = {t.get_text(): h.get_facecolor() for t, h in
              zip(fig.axes[0].get_legend().get_texts(), fig.axes[0].get_legend().legend_handles,
                  strict=True)}
    from matplotlib.colors import to_hex
    assert {k: to_hex(v) for k, v in legend.items()} == {"exp": opcode_colour("exp")}
    assert opcode_colour("exp") != opcode_colour("add") != opcode_colour("load")
    assert re.fullmatch(r"#[0-9a-f]{6}", opcode_colour("some_new_opcode"))


def test_timeline_page_is_self_contained_and_has_the_tools(insp):
    page, height = interactive.timeline_page(insp.timeline)
    assert "<script" in page and "cdn.bokeh.org" not in page and "https://" not in page.split(
        "<body>")[1][:2000]
    for field in ("@op", "@operands", "@bytes", "@formula", "@loc", "@src", "@wait"):
        assert field in page
    assert "xwheel_zoom" in page or "WheelZoomTool" in page
    assert "critical path" in page and "DMA engines" in page
    assert height > 200


def test_memory_map_uses_the_users_names_and_keeps_small_tiles_visible(insp):
    buf = insp.memory.sbuf
    names = interactive.user_names(buf)
    assert names["t"] == "t" and names["u"] == "u"
    layout = interactive.memory_figure(buf)
    src = layout.select_one({"name": "nkiw-sbuf"})
    heights = np.subtract(src.data["y1"], src.data["y0"])
    extent = layout.select_one({"name": "nkiw-sbuf-map"}).y_range.end
    assert (heights >= 0.015 * extent - 1e-9).all()
    assert src.data["bytes"] == [a.size_bytes for a in buf.allocations]
    fixed = interactive.memory_figure(buf, ymax=100_000)
    assert fixed.select_one({"name": "nkiw-sbuf-map"}).y_range.end == 100_000


def test_widget_tabs_default_to_the_interactive_view(insp):
    w = insp.widget()
    tv = w.views["Timeline"]
    assert tv.mode.value == "interactive" and "<iframe" in tv.interactive.value
    assert tv.static.layout.display == "none"
    tv.mode.value = "static"
    assert tv.interactive.layout.display == "none" and tv.static.layout.display is None
    sb = w.views["SBUF"]
    assert "<iframe" in sb.interactive.value and "nkiw-sbuf-map" in sb.interactive.value


def test_compare_draws_both_timelines_on_one_axis(insp):
    import nki_workbench as nw
    cmp = nw.compare(insp, insp, labels=("A", "B"))
    layout = interactive.compare_layout(cmp)
    figs = list(layout.select({"name": "nkiw-timeline"}))
    assert len(figs) == 2 and figs[0].x_range is figs[1].x_range
    assert sorted(f.title.text for f in figs) == [
        f"{n} (add_exp): {insp.latency_us:.3f} us (estimate)" for n in "AB"]
    page = cmp.timelines_html()
    assert "A (add_exp) and B (add_exp) take the same time" in page


def _summaries(page: str) -> list:
    return re.findall(r"<summary[^>]*><b>([^<]+)</b></summary>", page)


def test_one_inspector_widget_static_view_and_report_share_tabs_and_order(ip, insp):
    from nki_workbench.notebook import mime
    from nki_workbench.notebook.report import report_html
    w = insp.widget()
    static = mime.mimebundle(insp)["text/html"]
    assert tuple(_summaries(static)) == w.titles == mime.TAB_TITLES
    fallback = w._repr_mimebundle_()["text/html"]  # a notebook saved without widget state
    assert tuple(_summaries(fallback)) == w.titles
    page = report_html([insp])
    assert tuple(_summaries(page)) == w.titles
    # the same timeline picture everywhere: one colour per opcode
    png = plots.png_data_uri(plots.gantt_png(insp.timeline))
    assert png in fallback and png in page
    assert "data:image/png" not in static  # the bundle's JSON carries the pictures once
    shown = ip.run_cell_magic("nki", "--args x,y --check 'np.exp(a)'", ADD_CELL)
    failed = shown._repr_mimebundle_()["text/html"]
    assert _summaries(failed)[0] == mime.CHECK_FAILED_TITLE == shown.titles[0]


def test_interactive_report(insp):
    from nki_workbench.notebook.report import report_html
    page = report_html([insp], interactive=True)
    assert "Bokeh" in page and "nkiw-timeline" in page and "nkiw-sbuf-map" in page
    assert "cdn.bokeh.org" not in page
