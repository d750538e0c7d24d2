"""The time model on the NKI tutorial's tiled matmul: the docs picture and the scheduler's speed.

Run from the repository root: ``.venv/bin/python bench/timeline_matmul.py [--png-only | --speed]``.

1. Writes ``docs/timeline_tiled_matmul.png``: the per-engine / per-DMA-queue Gantt chart of the
   tiled matmul (bf16 [512, 256]^T x [512, 1024], trn1), the same kernel shape as
   ``docs/occupancy_tiled_matmul.png``.
2. Prints the estimated latency of the matmul tutorial variants (1024 x 1024 x 2048 bf16) on
   trn1/trn2/trn3, and how long a 1024^3 timeline takes end to end.
3. Prints the scheduling rate on ~100 000 instructions (a 4096 x 4096 x 16384 tiled matmul):
   the instruction stream is collected once, then scheduled; target < 1 s of CPU time for the
   scheduling (issue 19). Also prints a digest of the event list, so a speed-up of the
   scheduler can be checked to leave the schedule unchanged (``--speed`` runs only this part;
   tests/sim/test_timeline_golden.py pins the events of smaller kernels).
"""

from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import sys
import time

import ml_dtypes
import numpy as np

from nki_workbench._src.runtime import get_traced
from nki_workbench._src.sim.timing import collect, schedule, timeline

ROOT = pathlib.Path(__file__).resolve().parents[1]
BF16 = ml_dtypes.bfloat16


def _kernels():
    """The matmul variants of tests/sim/test_timing_matmul.py (one definition, shared)."""
    path = ROOT / "tests" / "sim" / "test_timing_matmul.py"
    spec = importlib.util.spec_from_file_location("timing_matmul_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kernel(fn, k, m, n):
    return get_traced(fn, (np.zeros((k, m), BF16), np.zeros((k, n), BF16)), {}).kernel


def write_png(mods, path) -> None:
    tl = timeline(_kernel(mods.mm_tiled, 512, 256, 1024), target="trn1")
    fig = tl.plot()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    print(f"wrote {path}: {tl.latency_us:.2f} us, {len(tl.events)} events")


def variants(mods) -> None:
    print("estimated latency (us), bf16 [1024,1024]^T x [1024,2048]:")
    for name in ("mm_tiled", "mm_hoisted", "mm_block_free", "mm_optimized"):
        k = _kernel(getattr(mods, name), 1024, 1024, 2048)
        row = [timeline(k, target=t).latency_us for t in ("trn1", "trn2", "trn3")]
        print(f"  {name:<15}" + "".join(f"{t}={v:9.1f}  " for t, v in
                                         zip(("trn1", "trn2", "trn3"), row, strict=True)))
    k = _kernel(mods.mm_tiled, 1024, 1024, 1024)
    t0 = time.perf_counter()
    tl = timeline(k, simulate=True)  # with the simulator's numerics, as an inspection does
    print(f"1024^3 tiled matmul, simulated + scheduled: {time.perf_counter() - t0:.2f} s "
          f"({len(tl.events)} events, {tl.latency_us:.1f} us)")


def _digest(tl) -> str:
    rows = [(e.track, e.core, e.start_ns, e.end_ns, e.wait, e.after, e.issue_ns)
            for e in tl.events]
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def speed(mods) -> None:
    k = _kernel(mods.mm_tiled, 4096, 4096, 16384)
    for target in ("trn1", "trn1", "trn2"):
        w0, c0 = time.perf_counter(), time.process_time()
        recs = collect(k)
        w1, c1 = time.perf_counter(), time.process_time()
        tl = schedule(recs, target)
        w2, c2 = time.perf_counter(), time.process_time()
        print(f"{target}: {len(recs)} instructions: collect {w1 - w0:.2f} s (cpu {c1 - c0:.2f}), "
              f"schedule {w2 - w1:.2f} s (cpu {c2 - c1:.2f}) -> "
              f"{len(recs) / (w2 - w1):,.0f} instructions/s; estimate {tl.latency_us:,.0f} us; "
              f"events {_digest(tl)}")
        del recs, tl


if __name__ == "__main__":
    mods = _kernels()
    if "--speed" in sys.argv:
        speed(mods)
        sys.exit(0)
    write_png(mods, ROOT / "docs" / "timeline_tiled_matmul.png")
    if "--png-only" not in sys.argv:
        variants(mods)
        speed(mods)
