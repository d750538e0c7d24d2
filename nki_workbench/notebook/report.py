"""A self-contained HTML report of Inspections (no Jupyter needed): ``nki-workbench report``.

One page, one section per kernel: the summary, the decoded backend_config tree, the IR with line
numbers, the SBUF and PSUM occupancy maps with their tables, the timeline and its utilisation
table. Images are embedded as PNG data URIs; every piece of user text is escaped; nothing in it
depends on the time of day, so the same kernels give the same bytes.
"""

from __future__ import annotations

from . import mime, plots

__all__ = ["report_html", "section_html"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ddd; padding-top: .6em; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; font-size: 12px; }
img { max-width: 100%; border: 1px solid #eee; }
.nkiw-error { color: #cf222e; }
"""


def _img(png: bytes, alt: str) -> str:
    return f"<img alt='{mime.esc(alt)}' src='{plots.png_data_uri(png)}'>"


def _part(title: str, fn) -> str:
    """One titled part of a section; a failing part says why instead of breaking the page."""
    try:
        body = fn()
    except Exception as exc:  # noqa: BLE001 - the reason is shown in the report
        body = (f"<p class='nkiw-error'>not available: "
                f"{mime.esc(type(exc).__name__)}: {mime.esc(exc)}</p>")
    return f"<h3>{mime.esc(title)}</h3>{body}"


def section_html(insp, anchor: str, title: str | None = None) -> str:
    """The report section of one Inspection."""
    def sbuf():
        buf = mime.memory_of(insp).sbuf
        return _img(plots.occupancy_png(buf), "SBUF occupancy") + \
            f"<pre>{mime.esc(buf.text())}</pre>"

    def psum():
        buf = mime.memory_of(insp).psum
        return _img(plots.occupancy_png(buf), "PSUM occupancy") + \
            f"<pre>{mime.esc(buf.text())}</pre>"

    def timeline():
        tl = mime.timeline_of(insp)
        return _img(plots.gantt_png(tl), "timeline") + f"<pre>{mime.esc(tl.report())}</pre>"

    parts = [_part("Summary", lambda: f"<pre>{mime.esc(mime.summary_text(insp))}</pre>"),
             _part("backend_config", lambda: mime.config_html(insp.config)),
             _part("IR", lambda: mime.ir_html(insp.ir)),
             _part("SBUF", sbuf), _part("PSUM", psum), _part("Timeline", timeline)]
    return (f"<section id='{mime.esc(anchor)}'><h2>{mime.esc(title or insp.kernel_name)}</h2>"
            + "".join(parts) + "</section>")


def report_html(inspections, title: str = "nki-workbench report") -> str:
    """One self-contained HTML page for ``[(name, Inspection), ...]`` (or Inspections).

    Args:
        inspections: Inspections, or ``(title, Inspection)`` pairs, in page order.
        title: the page title.

    Returns:
        The HTML text.
    """
    items = [x if isinstance(x, tuple) else (x.kernel_name, x) for x in inspections]
    toc = "".join(f"<li><a href='#k{i}'>{mime.esc(name)}</a></li>"
                  for i, (name, _) in enumerate(items))
    body = "".join(section_html(insp, f"k{i}", name) for i, (name, insp) in enumerate(items))
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{mime.esc(title)}</title><style>{_CSS}</style></head><body>"
            f"<h1>{mime.esc(title)}</h1><ul>{toc}</ul>{body}</body></html>\n")
