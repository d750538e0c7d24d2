"""A self-contained HTML report of Inspections (no Jupyter needed): ``nki-workbench report``.

One page, one section per kernel: the Inspector's tabs in the widget's order (Summary, Config,
IR, SBUF, PSUM, Timeline, HLO) — the summary, the decoded backend_config tree, the IR with line
numbers, the SBUF and PSUM occupancy maps with their tables, the timeline and its utilisation
table — in the same colours (one per opcode). ``interactive=True`` (``report --interactive``)
adds the Bokeh timeline and SBUF map. Images are embedded as PNG data URIs; every piece of
user text is escaped; nothing in the default page depends on the time of day, so the same
kernels give the same bytes.
"""

from __future__ import annotations

from . import mime

__all__ = ["report_html", "section_html"]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ddd; padding-top: .6em; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; font-size: 12px; }
img { max-width: 100%; border: 1px solid #eee; }
.nkiw-error { color: #cf222e; }
"""


def _part(title: str, fn) -> str:
    """One titled part of a section; a failing part says why instead of breaking the page."""
    try:
        body = fn()
    except Exception as exc:  # noqa: BLE001 - the reason is shown in the report
        body = (f"<p class='nkiw-error'>not available: "
                f"{mime.esc(type(exc).__name__)}: {mime.esc(exc)}</p>")
    return f"<h3>{mime.esc(title)}</h3>{body}"


def section_html(insp, anchor: str, title: str | None = None,
                 interactive: bool = False) -> str:
    """The report section of one Inspection: the Inspector's tabs, in the widget's order.

    Args:
        insp: the Inspection.
        anchor: the section's HTML id.
        title: the heading (default: the kernel's name).
        interactive: add the interactive (Bokeh) timeline and SBUF map below the tabs.
    """
    body = mime.inspector_html(insp).replace("<details class='nkiw-tab'>",
                                             "<details open class='nkiw-tab'>")
    extra = ""
    if interactive:
        extra = _part("Interactive timeline and SBUF map", lambda: _interactive_parts(insp))
    return (f"<section id='{mime.esc(anchor)}'><h2>{mime.esc(title or insp.kernel_name)}</h2>"
            + body + extra + "</section>")


def _interactive_parts(insp) -> str:
    from bokeh.embed import components

    from . import interactive
    script, divs = components((interactive.timeline_figure(mime.timeline_of(insp)),
                               interactive.memory_figure(mime.memory_of(insp).sbuf)))
    return script + "".join(divs)


def report_html(inspections, title: str = "nki-workbench report",
                interactive: bool = False) -> str:
    """One self-contained HTML page for ``[(name, Inspection), ...]`` (or Inspections).

    Args:
        inspections: Inspections, or ``(title, Inspection)`` pairs, in page order.
        title: the page title.
        interactive: add each kernel's interactive (Bokeh) timeline and SBUF map (BokehJS
            inline: the page stays self-contained; Bokeh's element ids make it differ from run
            to run, so the default page stays byte-for-byte reproducible without them).

    Returns:
        The HTML text.
    """
    items = [x if isinstance(x, tuple) else (x.kernel_name, x) for x in inspections]
    toc = "".join(f"<li><a href='#k{i}'>{mime.esc(name)}</a></li>"
                  for i, (name, _) in enumerate(items))
    body = "".join(section_html(insp, f"k{i}", name, interactive)
                   for i, (name, insp) in enumerate(items))
    head = ""
    if interactive:
        from bokeh.resources import INLINE
        head = INLINE.render()
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{mime.esc(title)}</title><style>{_CSS}</style>{head}</head><body>"
            f"<h1>{mime.esc(title)}</h1><ul>{toc}</ul>{body}</body></html>\n")
