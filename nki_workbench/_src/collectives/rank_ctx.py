"""The rank a kernel is being traced for (``nki.collectives.rank_id`` at trace time).

``simulate_ranks`` traces every rank's kernel instance under :func:`tracing_rank`, so a
kernel that reads its rank id (to pick its slice of a gathered tensor) gets each rank's own
value, as the device's rank register would hold. A kernel traced alone is rank 0 of a world
of one. Traces that read the rank are not shared between ranks.
"""

from __future__ import annotations

import contextlib
import contextvars

__all__ = ["tracing_rank", "current_rank"]


class _Probe:
    def __init__(self, rank: int):
        self.rank = rank
        self.read = False


_RANK: contextvars.ContextVar = contextvars.ContextVar("nki_wb_tracing_rank", default=None)


@contextlib.contextmanager
def tracing_rank(rank: int):
    """Trace under rank ``rank``; yields a probe whose ``read`` says whether the rank was read."""
    probe = _Probe(int(rank))
    token = _RANK.set(probe)
    try:
        yield probe
    finally:
        _RANK.reset(token)


def current_rank() -> int:
    """The rank being traced (0 outside ``simulate_ranks``); marks the trace rank-dependent."""
    probe = _RANK.get()
    if probe is None:
        return 0
    probe.read = True
    return probe.rank
