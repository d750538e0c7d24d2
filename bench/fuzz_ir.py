"""Fuzz ``simulate_backend_config`` with mutated IR: count what escapes and the slowest case.

Usage::

    PYTHONPATH=. python bench/fuzz_ir.py [--n 10000] [--seed 0] [--timeout 10] [--mem-gb 4]

Each case takes one of the base kernels of ``tests/unit/ir_mutations.py``, mutates its
``serialize_ir_string`` once (text-level or structural) and simulates the re-encoded config.
Outcomes: ``ran``, ``rejected`` (``NkiError``/``IRParseError``, what we want for bad IR) and
``escaped`` (any other exception). A case running past ``--timeout`` seconds is stopped and
counted as ``timeout``; the address space is capped at ``--mem-gb`` so a huge mutated shape
cannot take the machine's memory. Prints the counts, the escapes grouped by message, the
maximum seconds per case and the cases over 1 s. Only names that exist before and after the IR
validator are used, so pointing ``PYTHONPATH`` at an older checkout measures it too.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "unit"))

import ir_mutations as M  # noqa: E402


class _Timeout(BaseException):
    """Raised by the alarm (a BaseException, so the harness's ``except Exception`` lets it by)."""


def _alarm(signum, frame):
    raise _Timeout()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--mem-gb", type=float, default=4.0)
    args = ap.parse_args(argv)
    limit = int(args.mem_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    cases = M.base_cases()
    for _, cfg, arrays in cases:  # warm up: first-call imports and caches are not a case's time
        M.run_case(cfg, cfg["serialize_ir_string"], arrays)
    slow, timeouts = [], []
    original = M.run_case

    def timed_case(cfg, text, arrays, budget=None):
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
        t0 = time.perf_counter()
        try:
            return original(cfg, text, arrays, budget)
        except _Timeout:
            timeouts.append(text)
            return "escaped", TimeoutError(f"over {args.timeout} s"), time.perf_counter() - t0
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def on_case(i, kind, outcome, exc, secs, text):
        if secs > 1.0:
            slow.append((i, kind, outcome, round(secs, 2)))
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} cases", flush=True)

    M.run_case = timed_case
    t0 = time.perf_counter()
    stats = M.fuzz(args.n, args.seed, cases, on_case)
    wall = time.perf_counter() - t0
    print(f"mutations: {args.n} (seed {args.seed}; text {stats['kinds']['text']}, structural "
          f"{stats['kinds']['struct']})")
    print(f"ran: {stats['ran']}  rejected (NkiError/IRParseError): {stats['rejected']}  "
          f"escaped: {stats['escaped']} (of which timeouts > {args.timeout} s: {len(timeouts)})")
    for key, where in sorted(stats["escapes"].items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(where):5d}  {key}   e.g. case {where[0][0]} ({where[0][1]}, "
              f"{where[0][2]})")
    print(f"max seconds per case: {stats['max_s']:.3f} (case {stats['slowest']})")
    print(f"cases over 1 s: {len(slow)} {slow[:10]}")
    print(f"wall: {wall:.1f} s")
    return 0 if stats["escaped"] == 0 and not slow else 1


if __name__ == "__main__":
    sys.exit(main())
