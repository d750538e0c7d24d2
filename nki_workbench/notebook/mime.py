"""Static views of an :class:`~nki_workbench.Inspection`: text, escaped HTML and JSON.

``mimebundle(insp)`` is what ``Inspection._repr_mimebundle_`` returns:

* ``text/plain``: the deterministic summary (kernel, shapes, IR counts, peak SBUF/PSUM, the
  latency estimate and, after ``%%nki --check``, the max error);
* ``text/html``: the same summary, the decoded config as a tree and the IR with line numbers and
  colouring; every piece of user text is escaped;
* :data:`MIME_TYPE` (``application/vnd.nki-workbench.inspection+json``): plain data for the
  JupyterLab extension; its schema is documented in ``docs/mime.md``.

The views read the Inspection (its slots ``memory`` and ``timeline``); when a model has not
attached its slot, the model's public entry point is called once and the result stored on the
Inspection.
"""

from __future__ import annotations

import html
import json
import re

from . import plots

__all__ = ["MIME_TYPE", "SCHEMA_VERSION", "MAX_EVENTS", "mimebundle", "summary_text",
           "summary_lines", "inspection_html", "inspection_json", "config_html", "config_text",
           "ir_html", "timeline_of", "memory_of", "latency_line", "esc", "check_failed",
           "check_banner_html", "TAB_TITLES", "CHECK_FAILED_TITLE", "tab_titles",
           "tab_bodies", "inspector_html", "inspector_tabs", "TAB_IMAGES"]

MIME_TYPE = "application/vnd.nki-workbench.inspection+json"
SCHEMA_VERSION = 1
MAX_EVENTS = 500
"""Timeline events carried in the JSON (the rest are counted in ``events_dropped``)."""


def esc(text) -> str:
    """HTML-escape any value's ``str`` (quotes too)."""
    return html.escape(str(text), quote=True)


# ------------------------------------------------------------------------- model access
def timeline_of(insp):
    """The Inspection's timeline (the time model is run once if its slot is empty)."""
    tl = insp.timeline
    if tl is None:
        from .._src.sim.timing import timeline
        tl = timeline(insp.kernel)
        insp.timeline = tl
    return tl


def memory_of(insp):
    """The Inspection's SBUF/PSUM occupancy (computed once if its slot is empty)."""
    mem = insp.memory
    if mem is None:
        from .._src.alloc.occupancy import occupancy
        mem = occupancy(insp.kernel)
        insp.memory = mem
    return mem


def _try(fn):
    """``(value, None)`` or ``(None, "ExcName: message")``: a view shows why a part is missing."""
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001 - shown to the user, never swallowed silently
        return None, f"{type(exc).__name__}: {exc}"


def latency_line(insp) -> str:
    """``latency: 12.591 us (estimate on trn1; busiest engine Vector)`` or why it is missing."""
    tl, err = _try(lambda: timeline_of(insp))
    if tl is None:
        return f"latency: not available ({err})"
    s = tl.summary()
    return (f"latency: {s['latency_us']:.3f} us (estimate on {s['target']}, "
            f"{s['instructions']} instructions; busiest engine {s['critical_engine']})")


def summary_lines(insp) -> list:
    """The Inspection's summary lines plus latency and check (each added once)."""
    lines = list(insp.summary_lines())
    if not any(ln.lstrip().startswith("latency") for ln in lines[1:]):
        lines.append("  " + latency_line(insp))
    check = getattr(insp, "check", None)
    if check is not None:
        lines.append("  " + check.line())
        if check.where():
            lines.append("  " + check.where())
    return lines


def check_failed(insp) -> bool:
    """Whether the Inspection's last ``--check`` failed (the views show an error state)."""
    check = getattr(insp, "check", None)
    return check is not None and not check.passed


def check_banner_html(insp) -> str:
    """The error banner of a failed check (empty when there is none or it passed)."""
    if not check_failed(insp):
        return ""
    c = insp.check
    return (f"<div class='nkiw-check-failed' role='alert' style='background:#fdecea;"
            f"border-left:4px solid #b00020;color:#5f0010;padding:6px 10px;margin:0 0 .5em 0;"
            f"font-family:monospace;font-size:12px'><b>&#10007; check failed</b>: "
            f"{esc(c.line())}<br>{esc(c.where())}</div>")


def summary_text(insp) -> str:
    """The deterministic text summary (``text/plain``)."""
    return "\n".join(summary_lines(insp))


# ------------------------------------------------------------------------------- config
def _short(v, limit: int = 80) -> str:
    s = json.dumps(v, sort_keys=True)
    return s if len(s) <= limit else s[:limit - 3] + "..."


def config_text(cfg: dict, indent: str = "") -> str:
    """The decoded config as an indented text tree (IR shown as a line count)."""
    rows = []
    for key, v in cfg.items():
        if key == "serialize_ir_string":
            rows.append(f"{indent}{key}: <IR, {len(v.splitlines())} lines>")
        elif isinstance(v, dict) and v:
            rows.append(f"{indent}{key}:")
            rows.append(config_text(v, indent + "  "))
        elif isinstance(v, list) and v and any(isinstance(x, (dict, list)) for x in v):
            rows.append(f"{indent}{key}: [{len(v)} items]")
            for i, x in enumerate(v):
                if isinstance(x, dict):
                    rows.append(f"{indent}  [{i}]:")
                    rows.append(config_text(x, indent + "    "))
                else:
                    rows.append(f"{indent}  [{i}]: {_short(x)}")
        else:
            rows.append(f"{indent}{key}: {_short(v)}")
    return "\n".join(r for r in rows if r)


def _tree_html(v, depth: int) -> str:
    if isinstance(v, dict) and v:
        items = "".join(f"<li><b>{esc(k)}</b>: {_tree_html(x, depth + 1)}</li>"
                        for k, x in v.items())
        return (f"<details{' open' if depth < 2 else ''}><summary>{len(v)} keys</summary>"
                f"<ul style='margin:0;padding-left:1.4em'>{items}</ul></details>")
    if isinstance(v, list) and v and any(isinstance(x, (dict, list)) for x in v):
        items = "".join(f"<li>[{i}] {_tree_html(x, depth + 1)}</li>" for i, x in enumerate(v))
        return (f"<details><summary>{len(v)} items</summary>"
                f"<ul style='margin:0;padding-left:1.4em'>{items}</ul></details>")
    return f"<code>{esc(_short(v, 200))}</code>"


def config_html(cfg: dict) -> str:
    """The decoded config as a collapsible tree (one row per key; IR collapsed)."""
    rows = []
    for key, v in cfg.items():
        if key == "serialize_ir_string":
            body = (f"<details><summary>IR, {len(v.splitlines())} lines</summary>"
                    f"<pre style='margin:0'>{esc(v)}</pre></details>")
        else:
            body = _tree_html(v, 1)
        rows.append(f"<li><b>{esc(key)}</b>: {body}</li>")
    return (f"<div class='nkiw-config'><b>backend_config</b> ({len(cfg)} keys)"
            f"<ul style='margin:0;padding-left:1.4em'>{''.join(rows)}</ul></div>")


# ----------------------------------------------------------------------------------- IR
# token class -> (regex, colour); the first alternative that matches wins
_IR_TOKENS = (
    ("comment", r"#.*$", "#6a737d"),
    ("string", r"'[^']*'", "#22863a"),
    ("iota", r"\{[^}]*\}", "#b08800"),
    ("keyword", r"\b(?:kernel|param|alloc|for|in|return|grid|target)\b", "#d73a49"),
    ("op", r"\b[A-Za-z_]\w*(?=\()", "#6f42c1"),
    ("number", r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?\b", "#005cc5"),
)
_IR_RE = re.compile("|".join(f"(?P<{n}>{rx})" for n, rx, _ in _IR_TOKENS))
_IR_COLOURS = {n: c for n, _, c in _IR_TOKENS}


def ir_line_html(line: str) -> str:
    """One IR line with its tokens coloured (inline styles; text escaped)."""
    out, pos = [], 0
    for m in _IR_RE.finditer(line):
        out.append(esc(line[pos:m.start()]))
        out.append(f"<span style='color:{_IR_COLOURS[m.lastgroup]}'>{esc(m.group())}</span>")
        pos = m.end()
    out.append(esc(line[pos:]))
    return "".join(out)


def ir_html(text: str) -> str:
    """The IR text with line numbers and syntax colouring, as a ``<pre>`` block."""
    lines = text.rstrip("\n").splitlines()
    width = len(str(len(lines)))
    body = "\n".join(f"<span style='color:#999;user-select:none'>{i:>{width}} </span>"
                     f"{ir_line_html(ln)}" for i, ln in enumerate(lines, 1))
    return (f"<pre class='nkiw-ir' style='font-size:12px;line-height:1.35;margin:0'>"
            f"{body}</pre>")


# --------------------------------------------------------------------------------- HTML
def inspection_html(insp, images: bool = False) -> str:
    """The escaped HTML view: the Inspector's tabs (:func:`inspector_html`), banner first.

    Images are left out by default: the bundle's JSON carries them (the JupyterLab renderer
    shows them), so a stored notebook holds each picture once.
    """
    return f"<div class='nkiw-inspection'>{inspector_html(insp, images=images)}</div>"


# ------------------------------------------------------------------- the one Inspector
TAB_TITLES = ("Summary", "Config", "IR", "SBUF", "PSUM", "Timeline", "HLO")
"""The Inspector's tabs, in order: the widget, this static view and the report share them."""
CHECK_FAILED_TITLE = "Summary \u2717 check failed"
"""The Summary tab's title when the last ``--check`` failed."""


def tab_titles(insp, names=None) -> tuple:
    """The Inspector's tab titles for an Inspection (``names``: the views shown, lower-case)."""
    titles = [t for t in TAB_TITLES if t == "Summary" or names is None or t.lower() in names]
    return tuple(CHECK_FAILED_TITLE if t == "Summary" and check_failed(insp) else t
                 for t in titles)


def _hlo_static(insp) -> str:
    import sys
    if "jax" not in sys.modules:  # why: the static view never imports a framework itself
        return ("<p>the jax custom call: <code>insp.custom_call('jax')</code> (or the widget's "
                "HLO tab)</p>")
    text, err = _try(lambda: insp.custom_call("jax"))
    body = esc(text) if err is None else f"not available: {esc(err)}"
    return f"<pre style='font-size:12px;white-space:pre-wrap;margin:0'>{body}</pre>"


def tab_bodies(insp, images: bool = True) -> dict:
    """``{title: html}`` of every Inspector tab, static (PNG images, text tables)."""
    def img(draw, alt):  # why: pictures are drawn only when they are embedded
        return (f"<img alt='{esc(alt)}' style='max-width:100%' "
                f"src='{plots.png_data_uri(draw())}'>") if images else ""

    def buffer(name):
        mem, err = _try(lambda: memory_of(insp))
        if mem is None:
            return f"<p>{esc(name)} not available: {esc(err)}</p>"
        buf = getattr(mem, name.lower())
        return img(lambda: plots.occupancy_png(buf), f"{name} occupancy") + \
            f"<pre style='margin:0'>{esc(buf.text())}</pre>"

    def timeline():
        tl, err = _try(lambda: timeline_of(insp))
        if tl is None:
            return f"<p>timeline not available: {esc(err)}</p>"
        from .interactive import dma_note
        pic = img(lambda: plots.gantt_png(tl), "timeline") if tl.events else ""
        return (pic + f"<pre style='margin:0'>{esc(tl.report())}</pre>"
                f"<p style='font-size:12px'>{esc(dma_note(tl))}</p>")

    return {"Summary": check_banner_html(insp)
            + f"<pre style='margin:0'>{esc(summary_text(insp))}</pre>",
            "Config": config_html(insp.config), "IR": ir_html(insp.ir),
            "SBUF": buffer("SBUF"), "PSUM": buffer("PSUM"), "Timeline": timeline(),
            "HLO": _hlo_static(insp)}


TAB_IMAGES = {"SBUF": "sbuf", "PSUM": "psum", "Timeline": "timeline"}
"""Tab key -> name of its picture in the JSON ``images`` (drawn above the tab's HTML)."""


def inspector_tabs(insp, names=None) -> list:
    """The Inspector's tabs as data: what the JupyterLab renderer lays out (``docs/mime.md``).

    Each tab is ``{"title", "key", "failed", "image", "html"}``: the title the widget shows
    (the Summary is titled :data:`CHECK_FAILED_TITLE` after a failed check), the plain tab
    key, whether it carries the failed-check marker, the name of its picture in the JSON
    ``images`` (or ``None``) and its escaped static HTML without pictures (the widget's
    banner, tables and IR colouring; pictures travel once, in ``images``).
    """
    bodies = tab_bodies(insp, images=False)
    out = []
    for title in tab_titles(insp, names):
        key = "Summary" if title == CHECK_FAILED_TITLE else title
        out.append({"title": title, "key": key, "failed": title == CHECK_FAILED_TITLE,
                    "image": TAB_IMAGES.get(key), "html": bodies[key]})
    return out


def inspector_html(insp, names=None, images: bool = True) -> str:
    """The Inspector as static HTML: the widget's tabs, in its order, as ``<details>`` blocks.

    What a notebook shows where the widget cannot run (a committed notebook on GitHub or
    nbviewer, a page without its widget state); ``<details>`` survives HTML sanitizers that
    strip scripts, styles and form elements. Summary is open.
    """
    bodies = tab_bodies(insp, images)
    parts = []
    for title in tab_titles(insp, names):
        key = "Summary" if title == CHECK_FAILED_TITLE else title
        style = " style='color:#b00020'" if title == CHECK_FAILED_TITLE else ""
        parts.append(f"<details{' open' if key == 'Summary' else ''} class='nkiw-tab'>"
                     f"<summary{style}><b>{esc(title)}</b></summary>{bodies[key]}</details>")
    return (f"<div class='nkiw-inspector'><div><b>Inspector</b> of kernel "
            f"<code>{esc(insp.kernel_name)}</code></div>{''.join(parts)}</div>")


# --------------------------------------------------------------------------------- JSON
def _decl_json(d) -> dict:
    return {"name": d.name, "shape": list(d.shape), "dtype": d.dtype}


def _buffer_json(b) -> dict:
    return {"capacity_bytes": b.capacity_bytes, "num_partitions": b.num_partitions,
            "num_positions": b.num_positions, "peak_bytes_per_partition":
            b.peak_bytes_per_partition, "peak_position": b.peak_position,
            "utilization": round(b.utilization, 6), "strategy": b.strategy,
            "bank_bytes": b.bank_bytes,
            "allocations": [{"name": a.name, "tensor": a.tensor, "loc": a.loc,
                             "start_partition": a.start_partition,
                             "num_partitions": a.num_partitions, "byte_addr": a.byte_addr,
                             "offset": a.offset, "size_bytes": a.size_bytes, "bank": a.bank,
                             "live": list(a.live), "kind": a.kind, "copies": a.copies,
                             "accumulation": a.accumulation} for a in b.allocations]}


def _timeline_json(tl) -> dict:
    s = tl.summary()
    events = [{"track": e.track if tl.cores == 1 else f"core{e.core}/{e.track}",
               "engine": e.engine, "op": e.op, "start_ns": round(e.start_ns, 3),
               "end_ns": round(e.end_ns, 3), "loc": e.loc, "wait": e.wait}
              for e in tl.events[:MAX_EVENTS]]
    return {"target": s["target"], "total_ns": round(s["total_ns"], 3),
            "latency_us": round(s["latency_us"], 6), "cores": tl.cores,
            "tracks": tl.tracks(),
            "rows": {k: {"count": v["count"], "busy_ns": round(v["busy_ns"], 3),
                         "utilization": round(v["utilization"], 6)}
                     for k, v in s["rows"].items()},
            "critical_engine": s["critical_engine"], "bound": s["roofline"]["bound"],
            "events": events, "events_dropped": max(0, len(tl.events) - MAX_EVENTS)}


def _images(insp, mem, tl) -> dict:
    """``{sbuf, psum, timeline}``: bare base64 PNGs (``None`` hides one in the renderer)."""
    import base64
    out = {"sbuf": None, "psum": None, "timeline": None}
    if mem is not None:
        out["sbuf"] = plots.occupancy_png(mem.sbuf)
        out["psum"] = plots.occupancy_png(mem.psum) if mem.psum.allocations else None
    if tl is not None and tl.events:
        out["timeline"] = plots.gantt_png(tl)
    return {k: None if v is None else base64.b64encode(v).decode("ascii")
            for k, v in out.items()}


def inspection_json(insp, images: bool = True) -> dict:
    """Plain data for the JupyterLab renderer (schema: ``docs/mime.md``).

    Args:
        insp: the Inspection.
        images: include the SBUF/PSUM/timeline PNGs (base64).
    """
    k = insp.kernel
    decls = k.decls()
    mem, mem_err = _try(lambda: memory_of(insp))
    tl, tl_err = _try(lambda: timeline_of(insp))
    check = getattr(insp, "check", None)
    return {
        "kernel": insp.kernel_name,
        "summary": "\n".join(summary_lines(insp)),
        "ir": insp.ir,
        "images": _images(insp, mem, tl) if images else {},
        "config": insp.config,
        "schema_version": SCHEMA_VERSION,
        "target": insp.platform_target,
        "target_is_fallback": insp.platform_target_is_fallback,
        "grid": list(insp.grid),
        "inputs": [_decl_json(d) for d in k.params],
        "outputs": [_decl_json(decls[n]) for n in k.outputs],
        "simulated": insp.not_simulated is None,
        "not_simulated": insp.not_simulated,
        "memory": None if mem is None else {"sbuf": _buffer_json(mem.sbuf),
                                            "psum": _buffer_json(mem.psum)},
        "memory_error": mem_err,
        "timeline": None if tl is None else _timeline_json(tl),
        "timeline_error": tl_err,
        "check": None if check is None else check.as_dict(),
        "inspector": {"tabs": inspector_tabs(insp), "check_failed": check_failed(insp)},
    }


def mimebundle(insp, include=None, exclude=None) -> dict:
    """``text/plain``, ``text/html`` and :data:`MIME_TYPE` for an Inspection."""
    data = {"text/plain": summary_text(insp), "text/html": inspection_html(insp),
            MIME_TYPE: inspection_json(insp)}
    if include:
        data = {k: v for k, v in data.items() if k in include}
    if exclude:
        data = {k: v for k, v in data.items() if k not in exclude}
    return data
