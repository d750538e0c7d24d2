"""RMSNorm: ``x / sqrt(mean(x**2) + eps) * g`` row by row (ragged last tile masked)."""

import numpy as np

import nki_workbench.nki.language as nl
from nki_workbench import nki

KERNEL = "rmsnorm"
SHAPES = "x=300x256:float32,g=256:float32"
EPS = 1e-6


@nki.jit
def rmsnorm(x, g):
    """RMSNorm of an [N, D] tensor with a [D] gain; N need not be a multiple of 128."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, d = x.shape
    ip = nl.arange(128)[:, None]
    jf = nl.arange(d)[None, :]
    g_tile = nl.load(g.reshape((1, d))[nl.arange(1)[:, None], jf]).broadcast_to((128, d))
    for i in nl.affine_range((n + 127) // 128):
        rows = i * 128 + ip
        t = nl.load(x[rows, jf], mask=(rows < n))
        ms = nl.sum(nl.square(t), axis=[1]) / d
        y = nl.multiply(nl.multiply(t, nl.rsqrt(ms + EPS)), g_tile)
        nl.store(out[rows, jf], value=y, mask=(rows < n))
    return out


def inputs(rng):
    """Seeded inputs."""
    return (rng.standard_normal((300, 256)).astype(np.float32),
            rng.standard_normal(256).astype(np.float32))


def reference(x, g):
    """The numpy result."""
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + EPS) * g
