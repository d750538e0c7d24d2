"""Element-wise add, 128 rows at a time (the NKI getting-started kernel)."""

import numpy as np

import nki_workbench.nki.language as nl
from nki_workbench import nki

KERNEL = "tensor_add"
SHAPES = "a=256x512:float32,b=256x512:float32"


@nki.jit
def tensor_add(a, b):
    """``a + b`` for [N, F] tensors, N a multiple of 128."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = nl.ds(i * 128, 128)
        nl.store(out[rows, :], nl.load(a[rows, :]) + nl.load(b[rows, :]))
    return out


def inputs(rng):
    """Seeded inputs."""
    return (rng.standard_normal((256, 512)).astype(np.float32),
            rng.standard_normal((256, 512)).astype(np.float32))


def reference(a, b):
    """The numpy result."""
    return a + b
