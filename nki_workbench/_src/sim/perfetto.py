"""The result of the time model: :class:`Timeline` of :class:`Event` s, and its views.

A :class:`Timeline` (made by :func:`.timing.timeline`) holds the scheduled instructions with
per-row busy time, a roofline summary and the critical path; its views are a Chrome/Perfetto
trace-event JSON export and a matplotlib Gantt chart.

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

from ..hw.calibration import accuracy_sentence
from ..hw.cost import CostTarget

__all__ = ["Event", "Timeline", "to_trace_events", "write_trace", "check_trace_events",
           "plot_gantt"]

_DMA = "dma"


class Event:
    """One scheduled instruction.

    Attributes:
        idx: position in the timeline's event list.
        core: physical core it ran on.
        track: row name: ``Tensor``, ``Vector``, ``Scalar``, ``GpSimd``, ``Sync`` or a DMA queue
            ``q0`` ... ``q15``.
        start_ns: start time.
        end_ns: end time.
        wait: what decided the start (``engine``, ``raw``, ``war``, ``waw``, ``queue``,
            ``dma_engine``, ``port``, ``psum_bank``, ``fixed`` (DMA fixed latency), ``start``).
        after: index of the event that decided the start (-1: none).
        issue_ns: for DMAs, when their dependencies were met (data moves after the fixed cost).

    The instruction's facts are properties: ``inst``, ``engine``, ``op``, ``loc``, ``loops``,
    ``pid``, ``cycles``, ``formula``, ``flops``, ``bytes``, ``operands``.
    """

    __slots__ = ("idx", "core", "track", "start_ns", "end_ns", "wait", "after", "issue_ns",
                 "_rec")

    def __init__(self, idx, core, track, start, end, wait, after, rec):
        self.idx, self.core, self.track, self.start_ns, self.end_ns = idx, core, track, start, end
        self.wait, self.after, self.issue_ns, self._rec = wait, after, start, rec

    @property
    def inst(self):
        """The IR :class:`~..ir.Inst` that ran."""
        return self._rec.s.inst

    @property
    def engine(self) -> str:
        """``tensor``, ``vector``, ``scalar``, ``gpsimd``, ``sync`` or ``dma``."""
        return self._rec.s.engine

    @property
    def op(self) -> str:
        """The IR opcode."""
        return self._rec.s.inst.op

    @property
    def loc(self) -> str | None:
        """Kernel ``file:line``."""
        return self._rec.s.inst.loc

    @property
    def pid(self) -> tuple:
        """SPMD program ids."""
        return self._rec.pid

    @property
    def loops(self) -> tuple:
        """Loop indices, ``((var, value), ...)`` outermost first."""
        return tuple(zip(self._rec.s.loops, self._rec.env, strict=True))

    @property
    def cycles(self) -> float:
        """Engine cycles (0 for DMA)."""
        return self._rec.s.price.cycles

    @property
    def formula(self) -> str:
        """The formula that priced the instruction, its variables and source."""
        return self._rec.s.price.formula

    @property
    def flops(self) -> float:
        """Floating-point operations."""
        return self._rec.s.price.flops

    @property
    def bytes(self) -> int:
        """Bytes moved (DMA)."""
        return self._rec.s.price.bytes

    @property
    def duration_ns(self) -> float:
        """``end_ns - start_ns``."""
        return self.end_ns - self.start_ns

    @property
    def operands(self) -> str:
        """The regions written and read, ``out <- in, ...`` (tensor[start:stop:step, ...])."""
        rec = self._rec
        s = rec.s  # why: the records name tile instances by number; the statics know the names
        w = ", ".join(_region_str(a.name, r)
                      for a, (_, r) in zip(s.writes, rec.writes, strict=True))
        r = ", ".join(_region_str(a.name, r) for a, (_, r) in zip(s.reads, rec.reads, strict=True))
        return f"{w} <- {r}" if w else r

    def as_dict(self) -> dict:
        """The event as plain data (what the Perfetto export and widgets read)."""
        return {"track": self.track, "engine": self.engine, "op": self.op, "core": self.core,
                "pid": list(self.pid), "start_ns": self.start_ns, "end_ns": self.end_ns,
                "loc": self.loc, "loops": dict(self.loops), "cycles": self.cycles,
                "formula": self.formula, "flops": self.flops, "bytes": self.bytes,
                "operands": self.operands, "wait": self.wait, "after": self.after}

    def __repr__(self) -> str:
        return (f"Event({self.track} {self.op} {self.start_ns:.1f}-{self.end_ns:.1f} ns "
                f"{self.loc or ''})")


def _region_str(name, region) -> str:
    dims = []
    for lo, step, count in region:
        if count == 1:
            dims.append(str(lo))
        else:
            dims.append(f"{lo}:{lo + step * (count - 1) + 1}" + (f":{step}" if step != 1 else ""))
    return f"{name}[{', '.join(dims)}]"


_ENGINE_ORDER = ("Tensor", "Vector", "Scalar", "GpSimd", "Sync")


def _union(intervals) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


class Timeline:
    """The estimated execution of a kernel: events per engine and DMA queue.

    Attributes:
        events: the :class:`Event` list, in program order.
        target: the :class:`~..hw.cost.CostTarget` it was priced for.
        kernel_name: the kernel's name.
        cores: physical cores the SPMD programs ran on.
        total_ns: end of the last event (the kernel's estimated latency).
    """

    def __init__(self, events: list, target: CostTarget, *, kernel_name: str = "",
                 cores: int = 1):
        self.events = events
        self.target = target
        self.kernel_name = kernel_name
        self.cores = cores
        self.total_ns = max((e.end_ns for e in events), default=0.0)

    @property
    def latency_us(self) -> float:
        """Estimated latency in microseconds."""
        return self.total_ns / 1000.0

    def _row(self, e: Event) -> str:
        return e.track if self.cores == 1 else f"core{e.core}/{e.track}"

    def tracks(self) -> list:
        """Row names in neuron-profile order: DMA queues first, then the engines."""
        seen = {(e.core, e.track) for e in self.events}

        def order(ct):
            c, tr = ct
            if tr.startswith("q"):
                return (c, 0, int(tr[1:]))
            return (c, 1, _ENGINE_ORDER.index(tr) if tr in _ENGINE_ORDER else 9)
        return [tr if self.cores == 1 else f"core{c}/{tr}" for c, tr in sorted(seen, key=order)]

    def by_engine(self) -> dict:
        """Events per row: ``Tensor``, ``Vector``, ..., ``q0``... (``coreN/``-prefixed)."""
        out = {tr: [] for tr in self.tracks()}
        for e in self.events:
            out[self._row(e)].append(e)
        return out

    def busy_ns(self) -> dict:
        """Busy time per row, plus ``DMA`` (union of all queues' transfers)."""
        out = {tr: _union((e.start_ns, e.end_ns) for e in evs)
               for tr, evs in self.by_engine().items()}
        out["DMA"] = _union((e.start_ns, e.end_ns) for e in self.events if e.engine == _DMA)
        return out

    def utilization(self) -> dict:
        """Busy fraction of the kernel's latency per row (and ``DMA``)."""
        tot = self.total_ns or 1.0
        return {k: v / tot for k, v in self.busy_ns().items()}

    def roofline(self) -> dict:
        """Achieved vs peak TensorE FLOP/s and DMA bandwidth, and which roof binds.

        Returns:
            dict with ``flops``, ``peak_flops_per_s`` (BF16 dense, hw §0), ``flops_per_s``,
            ``mfu`` (fraction of peak), ``dma_bytes``, ``peak_dma_bytes_per_s`` (hw §0),
            ``dma_bytes_per_s``, ``dma_utilization``, ``arithmetic_intensity`` (FLOP/byte;
            ``None`` without DMA traffic),
            ``ridge`` (peak FLOP/s / peak bytes/s) and ``bound`` (``compute``/``memory``).
        """
        t, tot = self.target, (self.total_ns or 1.0) * 1e-9
        flops = sum(e.flops for e in self.events if e.engine == "tensor")
        nbytes = sum(e.bytes for e in self.events if e.engine == _DMA)
        pf, pb = t.peak_flops("bfloat16") * self.cores, t.peak_dma_bytes_per_s * self.cores
        ai = flops / nbytes if nbytes else None  # why: None, not inf, keeps the summary JSON
        ridge = pf / pb
        return {"flops": flops, "peak_flops_per_s": pf, "flops_per_s": flops / tot,
                "mfu": flops / tot / pf, "dma_bytes": nbytes, "peak_dma_bytes_per_s": pb,
                "dma_bytes_per_s": nbytes / tot, "dma_utilization": nbytes / tot / pb,
                "arithmetic_intensity": ai, "ridge": ridge,
                "bound": "compute" if ai is None or ai >= ridge else "memory"}

    def critical_path(self) -> list:
        """The chain of events that decided the end time, first to last.

        Each event's ``wait``/``after`` name the constraint that fixed its start; the path
        follows them back from the last event to finish.
        """
        if not self.events:
            return []
        e = max(self.events, key=lambda x: x.end_ns)
        path = [e]
        while e.after >= 0:
            e = self.events[e.after]
            path.append(e)
        return path[::-1]

    def summary(self) -> dict:
        """Latency, per-row busy time, utilisation and counts, roofline, critical path.

        The critical-path entry is the time spent on each row along :meth:`critical_path`.
        """
        by = self.by_engine()
        busy = self.busy_ns()
        tot = self.total_ns or 1.0
        rows = {tr: {"busy_ns": busy[tr], "utilization": busy[tr] / tot, "count": len(evs)}
                for tr, evs in by.items()}
        crit = {}
        for e in self.critical_path():
            crit[self._row(e)] = crit.get(self._row(e), 0.0) + e.duration_ns
        engines = {k: v for k, v in rows.items() if not k.split("/")[-1].startswith("q")}
        return {"kernel": self.kernel_name, "target": self.target.name,
                "latency_us": self.latency_us, "total_ns": self.total_ns,
                "instructions": len(self.events), "rows": rows,
                "dma_busy_ns": busy["DMA"], "dma_utilization": busy["DMA"] / tot,
                "critical_engine": max(engines, key=lambda k: engines[k]["busy_ns"])
                if engines else None,
                "critical_path_ns": crit, "roofline": self.roofline(), "estimate": True,
                "accuracy": accuracy_sentence()}

    def report(self) -> str:
        """A plain-text summary table."""
        s = self.summary()
        r = s["roofline"]
        lines = [f"timeline of {s['kernel']} on {s['target']} (estimate): "
                 f"{s['latency_us']:.3f} us, {s['instructions']} instructions",
                 f"{'row':<12}{'count':>8}{'busy us':>12}{'util':>8}"]
        for tr, v in s["rows"].items():
            lines.append(f"{tr:<12}{v['count']:>8}{v['busy_ns'] / 1000:>12.3f}"
                         f"{v['utilization']:>8.1%}")
        lines.append(f"{'DMA (all)':<12}{'':>8}{s['dma_busy_ns'] / 1000:>12.3f}"
                     f"{s['dma_utilization']:>8.1%}")
        lines.append(f"TensorE {r['flops_per_s'] / 1e12:.2f} / {r['peak_flops_per_s'] / 1e12:.1f}"
                     f" TFLOP/s ({r['mfu']:.1%}); DMA {r['dma_bytes_per_s'] / 1e9:.1f} / "
                     f"{r['peak_dma_bytes_per_s'] / 1e9:.0f} GB/s ({r['dma_utilization']:.1%}); "
                     f"intensity {r['arithmetic_intensity'] or 0:.1f} vs ridge "
                     f"{r['ridge']:.1f} FLOP/B -> {r['bound']}-bound; busiest engine "
                     f"{s['critical_engine']}")
        lines.append(s["accuracy"])
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<Timeline {self.kernel_name} {self.target.name}: {self.latency_us:.3f} us, "
                f"{len(self.events)} events>")

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.report())

    def to_perfetto(self, path=None) -> dict:
        """Chrome/Perfetto trace-event JSON (one process per core, one thread per row).

        Args:
            path: when given, the trace is also written there.

        Returns:
            The trace as a dict (``{"traceEvents": [...], ...}``).
        """
        trace = to_trace_events(self)
        if path is not None:
            write_trace(trace, path)
        return trace

    def save_perfetto(self, path) -> str:
        """Writes the Perfetto trace to ``path`` (load it in ui.perfetto.dev); returns the path."""
        self.to_perfetto(path)
        return str(path)

    def plot(self, start=None, end=None, ax=None):
        """Gantt chart: one row per engine and DMA queue, bars coloured by opcode.

        Args:
            start: window start in ns (default 0).
            end: window end in ns (default the kernel's end).
            ax: a matplotlib Axes to draw into (default: a new Figure).

        Returns:
            The matplotlib Figure.
        """
        return plot_gantt(self, start, end, ax)

    plot_timeline = plot


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
                          "latency_us": tl.latency_us, "source": "nki_workbench time model",
                          "accuracy": accuracy_sentence()}}


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
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from .palette import opcode_colour

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
    color = {op: opcode_colour(op) for op in ops}  # why: one colour per opcode in every plot
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
