"""Trace time against kernel size: an unrolled ``nl.static_range`` chain of element-wise ops.

Loops that stay loops trace in constant time (bench/core_sim.py); an unrolled loop emits one
instruction per trip, so its trace (including SBUF allocation) must grow linearly. Prints the
median of interleaved rounds per size, the time per unrolled instruction and the ratio of the
largest to the smallest size's per-instruction time (about 1 when linear).
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

import nki_workbench.nki.language as nl
from nki_workbench import nki

SIZES = (1_000, 3_000, 10_000)
ROUNDS = 3


def chain(n):
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        for _ in nl.static_range(n):
            t = nl.add(t, 1.0)
        nl.store(out, t)
        return out
    return k


def trace_seconds(n, a):
    kernel = nki.jit(chain(n))  # a new function each time: nothing cached
    t0 = time.perf_counter()
    nki.trace_kernel(kernel, a)
    return time.perf_counter() - t0


def main():
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    a = np.zeros((128, 8), np.float32)
    times = {n: [] for n in SIZES}
    for _ in range(ROUNDS):
        for n in SIZES:  # why: interleaved, so machine load hits every size alike
            times[n].append(trace_seconds(n, a))
    per = {}
    for n in SIZES:
        med = statistics.median(times[n])
        per[n] = med / n
        print(f"static_range({n:>6}): {med:7.3f} s  ({per[n] * 1e6:6.1f} us per instruction)")
    print(f"per-instruction ratio {SIZES[-1]} / {SIZES[0]}: {per[SIZES[-1]] / per[SIZES[0]]:.2f}")


if __name__ == "__main__":
    main()
