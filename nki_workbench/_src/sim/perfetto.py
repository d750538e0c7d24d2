"""Views of a :class:`~.timing.Timeline`: Chrome/Perfetto trace-event JSON and a Gantt chart.

The trace follows the Trace Event Format (the JSON object form: ``{"traceEvents": [...]}``):
complete events (``ph: "X"``) with ``ts``/``dur`` in microseconds, one process per NeuronCore
(``pid``) and one thread per engine or DMA queue (``tid``), named by metadata events
(``ph: "M"``: ``process_name``, ``thread_name``, ``*_sort_index``). ui.perfetto.dev and
chrome://tracing load it. :func:`check_trace_events` validates that shape.
"""

from __future__ import annotations

import json
import math
import os

__all__ = ["to_trace_events", "write_trace", "check_trace_events", "plot_gantt"]


def to_trace_events(tl) -> dict:
    """The timeline as a trace-event JSON object.

    Args:
        tl: a :class:`~.timing.Timeline`.

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``.
    """
    rows = {}  # (core, track) -> tid
    order = tl.tracks()
    for i, name in enumerate(order):
        core, _, track = name.rpartition("/")
        c = int(core[4:]) if core else 0
        rows[(c, track)] = i + 1
    out = []
    for c in sorted({c for c, _ in rows}):
        out.append({"ph": "M", "name": "process_name", "pid": c, "tid": 0,
                    "args": {"name": f"NeuronCore {c} ({tl.target.name}, estimate)"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": c, "tid": 0,
                    "args": {"sort_index": c}})
    for (c, track), tid in rows.items():
        label = f"DMA queue {track}" if track.startswith("q") else track
        out.append({"ph": "M", "name": "thread_name", "pid": c, "tid": tid,
                    "args": {"name": label}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": c, "tid": tid,
                    "args": {"sort_index": tid}})
    for e in tl.events:
        args = {"loc": e.loc or "", "operands": e.operands, "formula": e.formula,
                "loops": {k: int(v) for k, v in e.loops}, "pid": [int(x) for x in e.pid],
                "wait": e.wait, "after": e.after}
        if e.engine == "dma":
            args["bytes"] = int(e.bytes)
            args["issue_us"] = e.issue_ns / 1000.0
        else:
            args["cycles"] = float(e.cycles)
        if e.flops:
            args["flops"] = float(e.flops)
        out.append({"name": e.op, "cat": e.engine, "ph": "X", "ts": e.start_ns / 1000.0,
                    "dur": max(0.0, e.end_ns - e.start_ns) / 1000.0, "pid": e.core,
                    "tid": rows[(e.core, e.track)], "args": args})
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": {"kernel": tl.kernel_name, "target": tl.target.name,
                          "latency_us": tl.latency_us, "source": "nki_workbench time model"}}


def write_trace(trace: dict, path) -> None:
    """Writes a trace (validated first) as JSON."""
    check_trace_events(trace)
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace, f, allow_nan=False)


_META = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
         "thread_sort_index": "sort_index", "process_labels": "labels"}


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_trace_events(trace) -> None:
    """Validates the Trace Event Format object form used by :func:`to_trace_events`.

    Checks: a dict with a ``traceEvents`` list; every event a dict with a string ``ph``;
    ``X`` events have a string ``name``, finite ``ts >= 0`` and ``dur >= 0``, integer
    ``pid``/``tid`` and dict ``args``; ``M`` events are known metadata names with the matching
    argument; every ``(pid, tid)`` used by an ``X`` event has a ``thread_name``; the whole object
    is strict JSON (no NaN/Infinity).

    Raises:
        ValueError: naming the first offending event.
    """
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("a trace is a dict with a 'traceEvents' list")
    named, used = set(), set()
    for i, ev in enumerate(trace["traceEvents"]):
        if not isinstance(ev, dict) or not isinstance(ev.get("ph"), str):
            raise ValueError(f"traceEvents[{i}]: not an event with a string 'ph'")
        if not all(isinstance(ev.get(k), int) and not isinstance(ev.get(k), bool)
                   for k in ("pid", "tid")):
            raise ValueError(f"traceEvents[{i}]: 'pid' and 'tid' must be integers")
        if "args" in ev and not isinstance(ev["args"], dict):
            raise ValueError(f"traceEvents[{i}]: 'args' must be an object")
        if ev["ph"] == "M":
            key = _META.get(ev.get("name"))
            if key is None or key not in ev.get("args", {}):
                raise ValueError(f"traceEvents[{i}]: metadata event {ev.get('name')!r} needs "
                                 f"args.{key or 'name'}")
            if ev["name"] == "thread_name":
                named.add((ev["pid"], ev["tid"]))
        elif ev["ph"] == "X":
            if not isinstance(ev.get("name"), str):
                raise ValueError(f"traceEvents[{i}]: complete event without a string 'name'")
            if not (_num(ev.get("ts")) and ev["ts"] >= 0 and _num(ev.get("dur"))
                    and ev["dur"] >= 0):
                raise ValueError(f"traceEvents[{i}]: 'ts' and 'dur' must be finite, >= 0")
            used.add((ev["pid"], ev["tid"]))
        else:
            raise ValueError(f"traceEvents[{i}]: unexpected phase {ev['ph']!r}")
    missing = used - named
    if missing:
        raise ValueError(f"threads without a thread_name: {sorted(missing)}")
    json.dumps(trace, allow_nan=False)


def plot_gantt(tl, start=None, end=None, ax=None):
    """Gantt chart of a timeline (rows = engines and DMA queues, colours = opcodes).

    Args:
        tl: a :class:`~.timing.Timeline`.
        start: window start in ns.
        end: window end in ns.
        ax: matplotlib Axes to draw into (default: a new Figure).

    Returns:
        The matplotlib Figure.
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    lo = 0.0 if start is None else float(start)
    hi = tl.total_ns if end is None else float(end)
    if hi <= lo:
        raise ValueError(f"plot window is empty: start={lo} ns, end={hi} ns")
    rows = tl.tracks()[::-1]  # why: matplotlib draws row 0 at the bottom; queues go on top
    index = {r: i for i, r in enumerate(rows)}
    if ax is None:
        fig = Figure(figsize=(12, 0.35 * len(rows) + 1.6))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    ops = sorted({e.op for e in tl.events})
    cmap = colormaps["tab20"]
    color = {op: cmap(i % 20) for i, op in enumerate(ops)}
    bars: dict = {}
    for e in tl.events:
        if e.end_ns < lo or e.start_ns > hi:
            continue
        row = e.track if tl.cores == 1 else f"core{e.core}/{e.track}"
        bars.setdefault((row, e.op), []).append((e.start_ns / 1000, e.duration_ns / 1000))
    for (row, op), spans in bars.items():
        ax.broken_barh(spans, (index[row] - 0.4, 0.8), facecolors=color[op], linewidth=0)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlim(lo / 1000, hi / 1000)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("time (us, estimated)")
    ax.set_title(f"{tl.kernel_name} on {tl.target.name}: {tl.latency_us:.2f} us (estimate)")
    shown = sorted({op for _, op in bars})
    ax.legend(handles=[Patch(color=color[o], label=o) for o in shown], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
