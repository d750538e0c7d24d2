"""Tiled matmul ``lhsT.T @ rhs`` with PSUM accumulation over K (tile sizes are parameters)."""

import numpy as np

import nki_workbench.nki.language as nl
from nki_workbench import nki

KERNEL = "matmul_tiled"
SHAPES = "lhsT=512x256:bfloat16,rhs=512x1024:bfloat16"
PARAMS = {"TILE_N": [128, 256, 512, 1024], "TILE_M": [64, 128]}


@nki.jit
def matmul_tiled(lhsT, rhs, TILE_M=128, TILE_N=512, TILE_K=128):
    """``lhsT.T @ rhs``: [K, M] x [K, N] -> [M, N], tiles of TILE_M x TILE_N, K in TILE_K."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                a = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                b = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                acc += nl.matmul(a, b, transpose_x=True)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N],
                     value=nl.copy(acc, dtype=result.dtype))
    return result


def inputs(rng):
    """Seeded float32 inputs (the CLI's bf16 placeholders only set shapes)."""
    return (rng.standard_normal((512, 256)).astype(np.float32),
            rng.standard_normal((512, 1024)).astype(np.float32))


def reference(lhsT, rhs):
    """The numpy result."""
    return lhsT.T @ rhs
