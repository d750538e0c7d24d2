"""PNG figures for the workbench views, deterministic byte for byte.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state, nothing displayed twice)
and saved with fixed metadata (no ``Software`` key, no timestamps), so the same data always
gives the same PNG bytes. The drawing itself is the models' own (``Timeline.plot``,
``BufferOccupancy.plot``); this module picks windows and rows and encodes the result.
"""

from __future__ import annotations

import base64
import io

__all__ = ["DPI", "to_png", "png_data_uri", "gantt_png", "occupancy_png", "timelines_png",
           "message_png", "filter_timeline"]

DPI = 80
"""Resolution of the widget images (small PNGs keep notebooks light)."""


def to_png(fig, dpi: int = DPI) -> bytes:
    """Encode a matplotlib Figure as a 256-colour PNG with fixed metadata.

    The figure is quantised to a palette image (median cut, deterministic): the plots use a
    few flat colours, and the palette PNG is about a third of the RGBA one, which keeps the
    stored notebooks and reports light.
    """
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    buf.seek(0)
    img = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


def png_data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` for embedding in HTML."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def message_png(text: str, width: float = 8.0, height: float = 1.2, dpi: int = DPI,
                color: str = "black") -> bytes:
    """A small figure that says why there is no plot (e.g. no rows selected)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height))
    fig.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, wrap=True, color=color)
    return to_png(fig, dpi)


def _row(tl, e) -> str:
    return e.track if tl.cores == 1 else f"core{e.core}/{e.track}"


def filter_timeline(tl, rows=None):
    """A Timeline with only the events on ``rows`` (row names as in ``tl.tracks()``).

    The copy keeps the original end time so titles still give the kernel's latency.
    """
    if rows is None:
        return tl
    from .._src.sim.timing import Timeline
    keep = set(rows)
    sub = Timeline([e for e in tl.events if _row(tl, e) in keep], tl.target,
                   kernel_name=tl.kernel_name, cores=tl.cores)
    sub.total_ns = tl.total_ns
    return sub


def gantt_png(tl, start_ns=None, end_ns=None, rows=None, dpi: int = DPI) -> bytes:
    """The Gantt chart of ``tl`` (optionally a time window and a subset of rows) as PNG."""
    sub = filter_timeline(tl, rows)
    if not sub.events:
        return message_png("no events on the selected rows", dpi=dpi)
    lo = 0.0 if start_ns is None else float(start_ns)
    hi = tl.total_ns if end_ns is None else float(end_ns)
    if hi <= lo:
        hi = lo + max(tl.total_ns * 1e-3, 1.0)
    return to_png(sub.plot(lo, hi), dpi)


def occupancy_png(buf, dpi: int = DPI, full_scale: bool = False) -> bytes:
    """An SBUF or PSUM occupancy map (``BufferOccupancy.plot``) as PNG."""
    return to_png(buf.plot(full_scale=full_scale), dpi)


def timelines_png(timelines, labels, dpi: int = DPI) -> bytes:
    """Several timelines stacked on one shared time axis (for ``compare``)."""
    from matplotlib.figure import Figure

    from .._src.sim.perfetto import plot_gantt
    end = max(tl.total_ns for tl in timelines) or 1.0
    heights = [max(1, len(tl.tracks())) for tl in timelines]
    fig = Figure(figsize=(12, 0.35 * sum(heights) + 1.6 * len(timelines)))
    axes = fig.subplots(len(timelines), 1, sharex=True,
                        gridspec_kw={"height_ratios": heights})
    axes = list(axes) if len(timelines) > 1 else [axes]
    for ax, tl, label in zip(axes, timelines, labels, strict=True):
        if tl.events:
            plot_gantt(tl, 0.0, end, ax)
        ax.set_title(f"{label}: {tl.kernel_name} on {tl.target.name}, {tl.latency_us:.3f} us "
                     "(estimate)", fontsize=9)
    return to_png(fig, dpi)
