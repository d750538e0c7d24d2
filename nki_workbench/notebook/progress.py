"""A progress bar for long simulations (tqdm's notebook-aware bar, shown after ~2 s).

``SimulationProgress(kernel)`` counts the instructions the simulator will execute (static
instructions × loop trip counts × SPMD programs, from the IR) and is the simulator's
``observer``: each executed instruction advances the bar. tqdm's ``delay`` keeps short runs
silent; ``tqdm.auto`` picks the ipywidgets bar inside Jupyter and a text bar elsewhere.
"""

from __future__ import annotations

import math

from .._src.ir import Inst, Loop

__all__ = ["SimulationProgress", "executed_instructions", "DELAY_S"]

DELAY_S = 2.0
"""Seconds a simulation runs before its bar appears."""


def executed_instructions(body) -> int:
    """Instructions executed by one program: loop bodies count once per iteration."""
    total = 0
    for s in body:
        if isinstance(s, Inst):
            total += 1
        elif isinstance(s, Loop):
            total += s.trip_count * executed_instructions(s.body)
    return total


class SimulationProgress:
    """Simulator observer that drives a tqdm bar (context manager).

    Args:
        kernel: the IR kernel about to be simulated.
        delay: seconds before the bar shows (default :data:`DELAY_S`).
        file: stream for the text bar (tests pass a buffer; default stderr).
        disable: never show a bar.

    Attributes:
        total: instructions the run will execute.
        count: instructions executed so far.
    """

    def __init__(self, kernel, delay: float = DELAY_S, file=None, disable: bool = False):
        self.total = executed_instructions(kernel.body) * math.prod(kernel.grid or (1,))
        self.count = 0
        self._pending = 0
        # why: a tqdm update per instruction costs more than many numpy ops; batch them
        self._step = max(1, self.total // 400)
        self._kw = {"total": self.total, "delay": delay, "unit": "inst", "file": file,
                    "disable": disable, "leave": False,
                    "desc": f"simulating {kernel.name}"}
        self.bar = None

    def __enter__(self):
        from tqdm.auto import tqdm
        self.bar = tqdm(**self._kw)
        return self

    def __call__(self, inst, state) -> None:
        """Count one executed instruction (the simulator's observer signature)."""
        self.count += 1
        self._pending += 1
        if self._pending >= self._step:
            self.bar.update(self._pending)
            self._pending = 0

    def __exit__(self, *exc) -> None:
        if self._pending:
            self.bar.update(self._pending)
            self._pending = 0
        self.bar.close()
