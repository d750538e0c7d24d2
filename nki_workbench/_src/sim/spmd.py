"""SPMD programs as threads: the rendezvous where they meet at ``nl.all_reduce``."""

from __future__ import annotations

import threading

import numpy as np

from ..errors import NkiError
from ..semantics import NUMPY

__all__ = ["Collective"]


class Collective:
    """Rendezvous of the SPMD programs (threads) at collectives, with bounded waits."""

    def __init__(self, grid, timeout):
        self.grid = grid
        self.n = int(np.prod(grid))
        self.timeout = timeout
        self.barrier = threading.Barrier(self.n, timeout=timeout)
        self.slots = {}
        self.lock = threading.Lock()

    def abort(self):
        """Release every waiting program (one failed)."""
        self.barrier.abort()

    def all_reduce(self, pid, axes, op, value, loc):
        """Reduce ``value`` with ``op`` over the programs sharing ``pid`` off ``axes``."""
        try:
            with self.lock:
                self.slots[pid] = value
            self.barrier.wait()
            group = [q for q in self.slots if all(q[a] == pid[a] for a in range(len(pid))
                                                  if a not in axes)]
            shapes = {self.slots[q].shape for q in group}
            if len(shapes) > 1:
                raise NkiError(None, f"nl.all_reduce: programs {sorted(group)} passed tiles of "
                               f"different shapes {sorted(shapes)}", loc)
            order = sorted(group)  # why: a fixed reduction order gives reproducible rounding
            res = self.slots[order[0]].copy()
            for q in order[1:]:
                res = NUMPY.alu(op, res, self.slots[q])
            self.barrier.wait()
            with self.lock:
                self.slots.pop(pid, None)
            return res
        except threading.BrokenBarrierError:
            raise NkiError(None, f"nl.all_reduce: not every program of the grid {list(self.grid)} "
                           f"reached the collective within {self.timeout}s (or one failed)",
                           loc) from None


