"""Per-executed-instruction cost of the numpy interpreter on kernels of tiny instructions.

Each workload is a loop of tiny ``[128, 1]`` or ``[1, 1]`` tiles (load, activation,
tensor-tensor, copy, store) as an ``affine_range`` (loop-variable indices) and as a
``static_range`` (unrolled, constant indices). The cost per instruction is the slope between
two loop lengths (``(t(2n) - t(n)) / (insts(2n) - insts(n))``), so fixed per-call costs
(buffer setup, BLAS thread limiting, output checks) do not count; ``simulate_kernel`` end to
end per instruction is printed next to it. Rounds are interleaved and each cell is the median;
BLAS threads and the load average are printed (other processes share the cores).

Usage: ``python bench/interp_overhead.py [--rounds N] [--n N] [--profile NAME]``.
Target (issue 19): <= 5 us per executed tiny instruction.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import nki_workbench.nki.language as nl
from nki_workbench import SimParams, nki
from nki_workbench._src.sim.interp import Program


def _body(a, out, i, p):
    t = nl.load(a[0:p, i:i + 1])
    e = nl.exp(t)
    s = nl.add(e, t)
    c = nl.copy(s)
    nl.store(out[0:p, i:i + 1], value=c)


def affine128(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1]):
        _body(a, out, i, 128)
    return out


def static128(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range(a.shape[1]):
        _body(a, out, i, 128)
    return out


def affine1(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[1]):
        _body(a, out, i, 1)
    return out


def sequential_acc(a):
    """A PSUM-free accumulation chain: ``acc[...] = acc + t`` in a sequential loop."""
    out = nl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(a.shape[1]):
        t = nl.load(a[:, i:i + 1])
        acc[...] = nl.add(acc, nl.multiply(t, 0.5))
    nl.store(out, value=acc)
    return out


KERNELS = {"affine [128,1]": (affine128, 128), "static [128,1]": (static128, 128),
           "affine [1,1]": (affine1, 1), "sequential acc": (sequential_acc, 128)}


def _prepare(fn, p, n, rng):
    a = rng.standard_normal((p, n), dtype=np.float32)
    kernel = nki.trace_kernel(fn, a).kernel
    prog = Program(kernel)
    count = [0]

    def observer(inst, st):
        count[0] += 1
    prog.run({kernel.params[0].name: a}, observer=observer)
    jit = nki.jit(fn)
    nki.simulate_kernel(jit, a)  # trace + program cache warm
    return prog, {kernel.params[0].name: a}, count[0], jit, a


def _blas():
    try:
        from threadpoolctl import threadpool_info
        return ", ".join(f"{i['internal_api']}={i['num_threads']}" for i in threadpool_info())
    except ImportError:
        return "threadpoolctl not installed"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=512, help="short loop length (long: 2n)")
    ap.add_argument("--profile", default=None, help="cProfile one workload's long run")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    params = SimParams(backend="numpy")
    preps = {name: (_prepare(fn, p, args.n, rng), _prepare(fn, p, 2 * args.n, rng))
             for name, (fn, p) in KERNELS.items()}
    if args.profile:
        import cProfile
        import pstats
        (_, long) = preps[args.profile]
        prog, inputs = long[0], long[1]
        cProfile.runctx("for _ in range(3): prog.run(inputs, params)", globals(),
                        {"prog": prog, "inputs": inputs, "params": params}, "/tmp/interp.prof")
        pstats.Stats("/tmp/interp.prof").sort_stats("tottime").print_stats(25)
        return
    times = {name: ([], [], []) for name in preps}
    for _ in range(args.rounds):
        for name, (short, long) in preps.items():
            for k, (prog, inputs, *_rest) in enumerate((short, long)):
                t0 = time.perf_counter()
                prog.run(inputs, params)
                times[name][k].append(time.perf_counter() - t0)
            jit, a = long[3], long[4]
            t0 = time.perf_counter()
            nki.simulate_kernel(jit, a, params=params)
            times[name][2].append(time.perf_counter() - t0)
    print(f"load average {os.getloadavg()}, BLAS {_blas()}, {args.rounds} rounds, "
          f"n={args.n}/{2 * args.n}")
    print(f"{'workload':18s} {'insts':>7s} {'us/inst':>8s} {'e2e us/inst':>12s} "
          f"{'long ms':>8s}")
    for name, (short, long) in preps.items():
        ts, tl, te = (float(np.median(t)) for t in times[name])
        slope = (tl - ts) / (long[2] - short[2]) * 1e6
        print(f"{name:18s} {long[2]:7d} {slope:8.2f} {te / long[2] * 1e6:12.2f} "
              f"{tl * 1e3:8.1f}")


if __name__ == "__main__":
    main()
