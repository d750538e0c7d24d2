"""An NKI kernel inside ``jax.jit`` on CPU: the inline compiled simulator against the host
callback into the interpreter (the bridge's path before, now its fallback).

The kernel is a 1024x1024 float32 row softmax (128-row tiles); ``sim_params=SimParams(
backend="numpy")`` forces the callback path. Also timed: ``jax.vmap`` over 8 inputs on both
paths (inline: one batched computation; callback: one host call looping over the batch).
Interleaved rounds, median of per-call blocking latency.

Target (issue 19): inline >= 2x faster than the callback on the 1024^2 softmax.
"""

from __future__ import annotations

import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import nki_workbench.nki.language as nl
from nki_workbench import SimParams, nki

N = 1024
ROUNDS, CALLS = 7, 3


def softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        e = nl.exp(nl.subtract(t, nl.max(t, axis=1, keepdims=True)))
        nl.store(out[i * 128:(i + 1) * 128, :],
                 value=nl.divide(e, nl.sum(e, axis=1, keepdims=True)))
    return out


def main():
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((N, N), dtype=np.float32))
    xs = jnp.asarray(rng.standard_normal((8, 256, N), dtype=np.float32))
    inline = nki.jit(softmax, mode="jax", platform_target="trn1")
    host = nki.jit(softmax, mode="jax", platform_target="trn1",
                   sim_params=SimParams(backend="numpy"))
    fns = {"inline jit": jax.jit(lambda a: inline(a)),
           "callback jit": jax.jit(lambda a: host(a)),
           "inline vmap8": jax.jit(jax.vmap(lambda a: inline(a))),
           "callback vmap8": jax.jit(jax.vmap(lambda a: host(a)))}
    args = {"inline jit": x, "callback jit": x, "inline vmap8": xs, "callback vmap8": xs}
    first = {}
    for name, f in fns.items():
        t0 = time.perf_counter()
        f(args[name]).block_until_ready()
        first[name] = time.perf_counter() - t0
    np.testing.assert_allclose(np.asarray(fns["inline jit"](x)),
                               np.asarray(fns["callback jit"](x)), rtol=1e-5, atol=1e-6)
    times = {n: [] for n in fns}
    for _ in range(ROUNDS):
        for name, f in fns.items():
            for _ in range(CALLS):
                t0 = time.perf_counter()
                f(args[name]).block_until_ready()
                times[name].append(time.perf_counter() - t0)
    print(f"nki softmax {N}x{N} float32 inside jax.jit on {jax.default_backend()} (ms)")
    print(f"{'path':<16}{'first call':>12}{'median':>10}")
    med = {}
    for name, ts in times.items():
        med[name] = float(np.median(ts)) * 1e3
        print(f"{name:<16}{first[name] * 1e3:>12.1f}{med[name]:>10.2f}")
    print(f"callback / inline: jit {med['callback jit'] / med['inline jit']:.1f}x, vmap8 "
          f"{med['callback vmap8'] / med['inline vmap8']:.1f}x (target >= 2x)")


if __name__ == "__main__":
    main()
