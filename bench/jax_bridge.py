"""Per-call cost of an NKI kernel inside ``jax.jit`` on CPU, against a bare ``jax.pure_callback``.

Both sides run the same simulator call (the numpy interpreter on the same traced 128x512
float32 add kernel); the bridge side goes through the ``nki_call`` primitive, its cpu lowering
and its host callback. Interleaved rounds, median and p10 of per-call blocking latency.

Target (issue 5): bridge <= 1.5x the bare callback.
"""

from __future__ import annotations

import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import nki_workbench
import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench._src.execution import program_for

SHAPE = (128, 512)
ROUNDS, CALLS = 15, 20


def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out


def main():
    nki_workbench.tune_malloc()  # why: benchmarks measure the tuned heap (opt-in)
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random(SHAPE, dtype=np.float32))
    y = jnp.asarray(rng.random(SHAPE, dtype=np.float32))
    kernel = nki.jit(add, mode="jax", platform_target="trn1")
    bridge = jax.jit(lambda a, b: kernel(a, b))

    traced = nki.jit(add, mode="simulation", platform_target="trn1").trace(
        np.asarray(x), np.asarray(y))
    prog = program_for(traced)

    def sim(a, b):
        return prog.run({"a": a, "b": b}, backend="numpy")["out"]

    sds = jax.ShapeDtypeStruct(SHAPE, jnp.float32)
    bare = jax.jit(lambda a, b: jax.pure_callback(sim, sds, a, b, vmap_method="sequential"))

    ref = np.asarray(x) + np.asarray(y)
    for name, f in (("bridge", bridge), ("bare", bare)):
        np.testing.assert_allclose(np.asarray(f(x, y)), ref, atol=1e-6, err_msg=name)
    times = {"bridge": [], "bare": [], "simulator only": []}
    fns = {"bridge": lambda: bridge(x, y).block_until_ready(),
           "bare": lambda: bare(x, y).block_until_ready(),
           "simulator only": lambda: sim(np.asarray(x), np.asarray(y))}
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            for _ in range(CALLS):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    print(f"nki kernel {SHAPE[0]}x{SHAPE[1]} float32 add inside jax.jit on "
          f"{jax.default_backend()}, {ROUNDS * CALLS} calls each (us per call)")
    print(f"{'path':<16}{'median':>10}{'p10':>10}")
    stats = {}
    for name, ts in times.items():
        us = np.asarray(ts) * 1e6
        stats[name] = (np.median(us), np.percentile(us, 10))
        print(f"{name:<16}{stats[name][0]:>10.0f}{stats[name][1]:>10.0f}")
    ratio = stats["bridge"][0] / stats["bare"][0]
    ratio10 = stats["bridge"][1] / stats["bare"][1]
    print(f"bridge / bare pure_callback: median {ratio:.2f}x, p10 {ratio10:.2f}x "
          f"(target <= 1.5x)")


if __name__ == "__main__":
    main()
