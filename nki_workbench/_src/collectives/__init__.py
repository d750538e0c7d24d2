"""Collectives: ``nki.nccl`` / ``nki.distributed`` tracing, multi-rank simulation, time model.

* :mod:`.kinds` — the ``<kind>_cc`` / ``<kind>_cc_raw`` IR opcodes and replica-group rules.
* :mod:`.trace` — validation and emission of one collective instruction (sets
  ``has_collectives``).
* :mod:`.semantics` — what each kind computes over a replica group (numpy).
* :mod:`.world` — the lock-step rendezvous of the ranks, with bounded waits and clear errors.
* :mod:`.sim` — the simulator's ``SPECIAL`` factories and :class:`RankParams`.
* :mod:`.ranks` — :func:`simulate_ranks` and per-rank timelines (:func:`rank_timelines`).
* :mod:`.timing` — the communication cost model and the lock-step of rank timelines.
* :mod:`.lnc` / :mod:`.lnc_sim` — ``nisa.sendrecv`` and ``nisa.core_barrier`` between the
  cores of one ``kernel[2]`` launch.
"""

from __future__ import annotations

from . import kinds, lnc, lnc_sim, sim  # noqa: F401  (registers opcodes and simulator factories)
from .ranks import rank_timelines, simulate_ranks
from .sim import RankParams
from .timing import CC_ASSUMPTIONS

__all__ = ["simulate_ranks", "rank_timelines", "RankParams", "CC_ASSUMPTIONS"]
