"""``nki_workbench.compare(a, b)``: two Inspections side by side.

A :class:`Comparison` holds the IR diff, latency, per-engine utilisation and peak SBUF/PSUM of
both kernels, and draws their timelines stacked on one shared time axis. It displays as text
(``text/plain``), escaped HTML and the timelines PNG; ``.widget()`` is the interactive view.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from . import mime, plots

__all__ = ["Comparison", "compare"]


@dataclass
class Comparison:
    """Two Inspections compared.

    Attributes:
        a: the first Inspection.
        b: the second Inspection.
        labels: display names of the two (default ``A: kernel`` / ``B: kernel``).
    """

    a: object
    b: object
    labels: tuple = ("A", "B")

    @property
    def ir_diff(self) -> list:
        """Unified diff of the two IR texts (lines)."""
        return list(difflib.unified_diff(self.a.ir.splitlines(), self.b.ir.splitlines(),
                                         fromfile=f"{self.labels[0]}/{self.a.kernel_name}",
                                         tofile=f"{self.labels[1]}/{self.b.kernel_name}",
                                         lineterm=""))

    def timelines(self) -> tuple:
        """The two timelines."""
        return mime.timeline_of(self.a), mime.timeline_of(self.b)

    def metrics(self) -> list:
        """Rows ``(metric, value A, value B)``: latency, peaks, per-engine utilisation."""
        ta, tb = self.timelines()
        ma, mb = mime.memory_of(self.a), mime.memory_of(self.b)
        rows = [("kernel", self.a.kernel_name, self.b.kernel_name),
                ("target", self.a.platform_target, self.b.platform_target),
                ("latency (us, estimate)", f"{ta.latency_us:.3f}", f"{tb.latency_us:.3f}"),
                ("instructions executed", str(len(ta.events)), str(len(tb.events))),
                ("peak SBUF (B/partition)", str(ma.sbuf.peak_bytes_per_partition),
                 str(mb.sbuf.peak_bytes_per_partition)),
                ("peak PSUM (B/partition)", str(ma.psum.peak_bytes_per_partition),
                 str(mb.psum.peak_bytes_per_partition))]
        ua, ub = _engine_util(ta), _engine_util(tb)
        for eng in sorted(set(ua) | set(ub), key=_engine_order):
            rows.append((f"{eng} utilisation", _pct(ua.get(eng)), _pct(ub.get(eng))))
        return rows

    @property
    def speedup(self) -> float:
        """Latency of A over latency of B (> 1: B is faster)."""
        ta, tb = self.timelines()
        return ta.total_ns / tb.total_ns if tb.total_ns else float("inf")

    def names(self) -> tuple:
        """``("A (kernel)", "B (kernel)")``: each label with its kernel's name."""
        return tuple(f"{lab} ({x.kernel_name})"
                     for lab, x in zip(self.labels, (self.a, self.b), strict=True))

    def verdict(self) -> str:
        """``"B (k) is 1.385× faster than A (k)"`` (estimated latencies), or equal."""
        ta, tb = self.timelines()
        na, nb = self.names()
        if ta.total_ns == tb.total_ns:
            return f"{na} and {nb} take the same time ({ta.latency_us:.3f} us, estimate)"
        fast, slow, tf, ts = ((na, nb, ta, tb) if ta.total_ns < tb.total_ns
                              else (nb, na, tb, ta))
        ratio = ts.total_ns / tf.total_ns if tf.total_ns else float("inf")
        return (f"{fast} is {ratio:.3f}\u00d7 faster than {slow} ({tf.latency_us:.3f} vs "
                f"{ts.latency_us:.3f} us, estimate)")

    def text(self) -> str:
        """The metrics table, the speedup and the IR diff size."""
        rows = [("metric", *self.names()), *self.metrics()]
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        lines = [f"{r[0]:<{w0}}  {r[1]:>{w1}}  {r[2]}" for r in rows]
        diff = self.ir_diff
        changed = sum(1 for ln in diff if ln[:1] in "+-" and ln[:3] not in ("+++", "---"))
        lines.append(f"{self.verdict()}; IR diff: {changed} changed lines")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def timelines_png(self) -> bytes:
        """Both Gantt charts on one shared time axis (PNG)."""
        return plots.timelines_png(self.timelines(), self.labels)

    def timelines_html(self) -> str:
        """Both timelines, interactive (Bokeh: hover, zoom, one shared time axis)."""
        from . import interactive
        return interactive.compare_html(self)

    def diff_html(self) -> str:
        """The IR diff, coloured (escaped)."""
        colour = {"+": "#e6ffed", "-": "#ffeef0", "@": "#f1f8ff"}
        rows = []
        for ln in self.ir_diff:
            bg = colour.get(ln[:1]) if ln[:3] not in ("+++", "---") else "#fafbfc"
            style = f" style='background:{bg}'" if bg else ""
            rows.append(f"<span{style}>{mime.esc(ln)}</span>")
        body = "\n".join(rows) or "(the IRs are identical)"
        return f"<pre style='font-size:12px;margin:0'>{body}</pre>"

    def table_html(self) -> str:
        """The metrics as an HTML table (escaped)."""
        head = "".join(f"<th>{mime.esc(x)}</th>" for x in ("metric", *self.names()))
        body = "".join("<tr>" + "".join(f"<td>{mime.esc(x)}</td>" for x in r) + "</tr>"
                       for r in self.metrics())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def html(self) -> str:
        """Verdict, table, both timelines on one time axis (PNG) and the IR diff."""
        return (f"<div class='nkiw-compare'><p><b>{mime.esc(self.verdict())}</b></p>"
                f"{self.table_html()}<img alt='timelines' style='max-width:100%' "
                f"src='{plots.png_data_uri(self.timelines_png())}'>"
                f"<details><summary>IR diff</summary>{self.diff_html()}</details></div>")

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text(), "text/html": self.html(),
                "image/png": self.timelines_png()}

    def widget(self):
        """Side-by-side view: metrics table, shared-axis timelines, IR diff (ipywidgets)."""
        import ipywidgets as W
        return W.VBox([W.HTML(f"<p><b>{mime.esc(self.verdict())}</b></p>{self.table_html()}"),
                       W.Image(format="png", value=self.timelines_png()),
                       W.HTML(f"<details open><summary>IR diff</summary>{self.diff_html()}"
                              "</details>")])


_ENGINES = ("Tensor", "Vector", "Scalar", "GpSimd", "Sync", "DMA")


def _engine_order(name: str):
    return (_ENGINES.index(name) if name in _ENGINES else len(_ENGINES), name)


def _engine_util(tl) -> dict:
    # why: one row per engine; the 16 DMA queues are summarised by the timeline's DMA union
    return {k: v for k, v in tl.utilization().items() if not k.split("/")[-1].startswith("q")}


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def compare(a, b, labels=("A", "B")) -> Comparison:
    """Compare two Inspections: IR diff, latency, utilisation, peaks, shared-axis timelines.

    Args:
        a: the first :class:`~nki_workbench.Inspection`.
        b: the second one.
        labels: names for the two columns.

    Returns:
        Comparison
    """
    from .._src.inspection import Inspection
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, Inspection):
            raise TypeError(f"compare() needs two Inspections (nki_workbench.inspect(...) or "
                            f"%%nki's result); argument {name} is {type(x).__name__}")
    return Comparison(a, b, tuple(labels))
