"""SBUF/PSUM occupancy: the data the workbench's memory maps draw, computed from the IR alone.

``occupancy(kernel)`` gives an :class:`Occupancy` with ``.sbuf`` and ``.psum``
(:class:`BufferOccupancy`): the placed allocations, the capacity, the peak bytes per partition,
a text table (``str()`` / ``text/plain``) and ``plot()`` → a matplotlib figure (SBUF: byte address
× instruction position with the capacity line; PSUM: its 8 banks × instruction position).
Positions are static instruction indices (one loop iteration); ``with_times`` attaches ns times
from a time model. Allocation is static, so every SPMD program has the same layout in its own
SBUF/PSUM; ``occupancy(kernel, program=(i, j))`` checks the id and labels the result.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace

import numpy as np

from ..hw import get_target
from ..trace.kernel import Traced
from .allocator import Allocation, allocate, demand

__all__ = ["BufferOccupancy", "Occupancy", "occupancy", "PALETTE", "Allocation"]

# fixed colours (matplotlib's tab10), cycled by allocation order: same kernel, same picture
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


@dataclass(frozen=True)
class BufferOccupancy:
    """Occupancy of one on-chip buffer.

    Attributes:
        buffer: ``"sbuf"`` or ``"psum"``.
        allocations: :class:`~.allocator.Allocation` records, by first position then address.
        capacity_bytes: usable bytes per partition.
        num_partitions: partitions of the buffer.
        num_positions: instruction positions of the kernel.
        strategy: ``"auto"``, ``"stack"``, ``"direct"`` or ``"none"``.
        target: target name.
        kernel: kernel name.
        program: SPMD program id this view is for (``None`` = any; all share the layout).
        bank_bytes: PSUM bank size (0 for SBUF).
        locs: source line of each instruction position.
    """

    buffer: str
    allocations: tuple
    capacity_bytes: int
    num_partitions: int
    num_positions: int
    strategy: str
    target: str
    kernel: str
    program: tuple | None = None
    bank_bytes: int = 0
    locs: tuple = ()

    @property
    def demand(self) -> np.ndarray:
        """Bytes live per ``[position, partition]``."""
        return demand(self.allocations, self.num_positions, self.num_partitions)

    @property
    def peak_bytes_per_partition(self) -> int:
        """Most bytes live at once in any partition."""
        return int(self.demand.max()) if self.allocations else 0

    @property
    def high_water_bytes(self) -> int:
        """Highest byte address in use (``offset + size``) by any allocation."""
        return max((a.offset + a.size_bytes for a in self.allocations), default=0)

    @property
    def peak_position(self) -> int:
        """Instruction position where the peak is first reached."""
        if not self.allocations:
            return 0
        d = self.demand.max(axis=1)
        return int(np.argmax(d))

    @property
    def utilization(self) -> float:
        """Peak bytes per partition over capacity."""
        return self.peak_bytes_per_partition / self.capacity_bytes

    def live_at(self, position: int) -> list:
        """Allocations live at an instruction position."""
        return [a for a in self.allocations if a.live[0] <= position <= a.live[1]]

    def with_times(self, times) -> BufferOccupancy:
        """A copy with ``live_ns`` filled from per-position ``(start_ns, end_ns)`` times.

        Args:
            times: mapping or sequence, position → ``(start_ns, end_ns)`` of that instruction
                (e.g. its first execution in the time model).

        Returns:
            BufferOccupancy
        """
        def get(p):
            return times[p] if not hasattr(times, "get") else times.get(p)
        out = []
        for a in self.allocations:
            s, e = get(a.live[0]), get(a.live[1])
            out.append(replace(a, live_ns=(s[0], e[1]) if s is not None and e is not None
                               else None))
        return replace(self, allocations=tuple(out))

    # ------------------------------------------------------------------ rendering
    def text(self) -> str:
        """A fixed-width table of the allocations with the peak and capacity."""
        prog = f" program {self.program}" if self.program is not None else ""
        head = (f"{self.buffer.upper()} occupancy of {self.kernel}{prog} on {self.target} "
                f"({self.strategy}): peak {self.peak_bytes_per_partition} / "
                f"{self.capacity_bytes} bytes per partition "
                f"({100 * self.utilization:.1f}%), {len(self.allocations)} allocations")
        bank = "bank " if self.buffer == "psum" else ""
        rows = [head, f"  {'name':<20} {'partitions':>10} {bank}{'addr':>7} {'bytes':>7} "
                f"{'live':>11}  kind       loc"]
        for a in self.allocations:
            parts = f"{a.start_partition}:{a.start_partition + a.num_partitions}"
            b = f"{a.bank:>4} " if self.buffer == "psum" else ""
            rows.append(f"  {a.name:<20} {parts:>10} {b}{a.byte_addr:>7} {a.size_bytes:>7} "
                        f"{f'{a.live[0]}-{a.live[1]}':>11}  {a.kind:<10} {a.loc or ''}")
        return "\n".join(rows)

    def __str__(self):
        return self.text()

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text()}

    def plot(self, ax=None, title: str | None = None, full_scale: bool = False):
        """Draw the occupancy map (address × instruction position).

        Args:
            ax: an existing matplotlib Axes (a new figure when ``None``).
            title: figure title (default: buffer, kernel and peak).
            full_scale: draw SBUF up to its capacity even when little of it is used.

        Returns:
            matplotlib.figure.Figure
        """
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
        if ax is None:
            fig = Figure(figsize=(8, 4.5), dpi=100)
            ax = fig.add_subplot(1, 1, 1)
        else:
            fig = ax.figure
        for k, a in enumerate(self.allocations):
            color = PALETTE[k % len(PALETTE)]
            x0, width = a.live[0] - 0.45, a.live[1] - a.live[0] + 0.9
            ax.add_patch(Rectangle((x0, a.offset), width, a.size_bytes, facecolor=color,
                                   edgecolor="black", linewidth=0.6, alpha=0.85))
            if a.accumulation and self.bank_bytes and a.size_bytes < self.bank_bytes:
                ax.add_patch(Rectangle((x0, a.offset + a.size_bytes), width,
                                       self.bank_bytes - a.size_bytes, facecolor="none",
                                       edgecolor=color, hatch="//", linewidth=0.4))
            label = a.name + (f" x{a.copies}" if a.copies > 1 else "")
            if a.num_partitions != self.num_partitions:
                label += f" p{a.start_partition}:{a.start_partition + a.num_partitions}"
            ax.text(x0 + width / 2, a.offset + a.size_bytes / 2, label, ha="center",
                    va="center", fontsize=7, clip_on=True)
        top = max(self.capacity_bytes, self.high_water_bytes)
        if self.buffer == "psum":
            for b in range(1, self.capacity_bytes // self.bank_bytes):
                ax.axhline(b * self.bank_bytes, color="grey", linewidth=0.5, linestyle=":")
            ticks = [b * self.bank_bytes + self.bank_bytes / 2
                     for b in range(self.capacity_bytes // self.bank_bytes)]
            ax.set_yticks(ticks, [f"bank {b}" for b in range(len(ticks))])
            ax.set_ylabel("PSUM bank (2 KiB per partition each)")
        else:
            # why: a small kernel drawn to full scale is a flat line; zoom unless asked not to
            zoom = not full_scale and self.high_water_bytes * 4 < self.capacity_bytes
            top = max(self.high_water_bytes * 1.3, 1) if zoom else max(top, 1) * 1.06
            ax.axhline(self.capacity_bytes, color="red", linewidth=1.0, linestyle="--")
            ax.text(self.num_positions - 0.5, min(self.capacity_bytes, top * 0.97),
                    f"capacity {self.capacity_bytes} B" + (" (off scale)" if zoom else ""),
                    color="red", ha="right", va="top" if zoom else "bottom", fontsize=7)
            ax.set_ylabel("byte address per partition")
        if self.num_positions <= 40:
            ax.set_xticks(range(self.num_positions),
                          [f"{p}\n:{(loc or '').rsplit(':', 1)[-1]}" if loc else str(p)
                           for p, loc in enumerate(self.locs[:self.num_positions])]
                          if len(self.locs) >= self.num_positions else
                          [str(p) for p in range(self.num_positions)], fontsize=7)
        ax.set_xlim(-0.5, self.num_positions - 0.5)
        ax.set_ylim(0, top)
        ax.set_xlabel("instruction position (program order, one loop iteration) : source line")
        ax.set_title(title or f"{self.buffer.upper()} — {self.kernel}: peak "
                     f"{self.peak_bytes_per_partition} / {self.capacity_bytes} B per partition",
                     fontsize=9)
        return fig

    def to_png(self, **kwargs) -> bytes:
        """The :meth:`plot` figure as PNG bytes (no timestamps/software in the metadata)."""
        buf = io.BytesIO()
        self.plot(**kwargs).savefig(buf, format="png", metadata={"Software": None})
        return buf.getvalue()


@dataclass(frozen=True)
class Occupancy:
    """SBUF and PSUM occupancy of one kernel (what an Inspection exposes).

    Attributes:
        sbuf: SBUF occupancy.
        psum: PSUM occupancy.
    """

    sbuf: BufferOccupancy
    psum: BufferOccupancy

    def text(self) -> str:
        """Both tables."""
        return self.sbuf.text() + "\n\n" + self.psum.text()

    def __str__(self):
        return self.text()

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text()}

    def plot(self):
        """SBUF and PSUM maps in one figure (two panels).

        Returns:
            matplotlib.figure.Figure
        """
        from matplotlib.figure import Figure
        fig = Figure(figsize=(9, 7), dpi=100)
        ax1, ax2 = fig.subplots(2, 1)
        self.sbuf.plot(ax=ax1)
        self.psum.plot(ax=ax2)
        fig.tight_layout()
        return fig

    def to_png(self) -> bytes:
        """:meth:`plot` as PNG bytes with fixed metadata."""
        buf = io.BytesIO()
        self.plot().savefig(buf, format="png", metadata={"Software": None})
        return buf.getvalue()


def occupancy(kernel, program=None) -> Occupancy:
    """SBUF/PSUM occupancy of a traced kernel, from its IR alone.

    Args:
        kernel: an IR ``Kernel`` or a ``Traced``.
        program: an SPMD program id (tuple, or int for 1-D grids) to label the view; it must be
            inside the launch grid. Every program has its own SBUF/PSUM with the same layout.

    Returns:
        Occupancy
    """
    if isinstance(kernel, Traced):
        kernel = kernel.kernel
    if program is not None:
        pid = (program,) if isinstance(program, int) else tuple(int(p) for p in program)
        grid = tuple(kernel.grid) or (1,)
        if len(pid) != len(grid) or any(not 0 <= p < g for p, g in zip(pid, grid, strict=True)):
            raise ValueError(f"program id {pid} is outside the launch grid {list(grid)} of "
                             f"kernel '{kernel.name}'")
        program = pid
    res = allocate(kernel)
    tgt = get_target(kernel.target)
    npos = res.liveness.num_positions
    locs = tuple(i.loc for i in res.liveness.insts)
    common = dict(num_partitions=tgt.num_partitions, num_positions=npos, target=tgt.name,
                  kernel=kernel.name, program=program, locs=locs)
    sbuf = BufferOccupancy("sbuf", res.sbuf, tgt.total_available_sbuf_size,
                           strategy=res.strategy["sbuf"], **common)
    psum = BufferOccupancy("psum", res.psum, tgt.psum_bytes_per_partition,
                           strategy=res.strategy["psum"], bank_bytes=tgt.psum_bank_bytes,
                           **common)
    return Occupancy(sbuf, psum)

