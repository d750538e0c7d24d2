"""Regenerate ``docs/occupancy_tiled_matmul.png``: SBUF/PSUM occupancy of a tiled matmul.

Run from the repository root: ``.venv/bin/python docs/make_occupancy_png.py [OUT.png]``.
The picture is computed from the IR alone (no simulation) and is byte-for-byte deterministic.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

import nki_workbench.nki.compiler as ncc
import nki_workbench.nki.language as nl
from nki_workbench import nki
from nki_workbench._src.alloc import occupancy


def matmul_tiled(lhsT, rhs):
    """The NKI tutorial's tiled matmul: result[M, N] = lhsT.T @ rhs, double-buffered loads."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            res_psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128, directives=ncc.multi_buffer(2)):
                lhsT_tile = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                rhs_tile = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                res_psum += nl.matmul(lhsT_tile, rhs_tile, transpose_x=True)
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=res_sb)
    return result


def render(path) -> bytes:
    """Trace the kernel for bf16 [512, 256] x [512, 1024] inputs and write the PNG to ``path``."""
    import ml_dtypes
    lhsT = np.zeros((512, 256), dtype=ml_dtypes.bfloat16)
    rhs = np.zeros((512, 1024), dtype=ml_dtypes.bfloat16)
    traced = nki.jit(matmul_tiled, mode="simulation").trace(lhsT, rhs)
    png = occupancy(traced).to_png()
    pathlib.Path(path).write_bytes(png)
    return png


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else \
        pathlib.Path(__file__).with_name("occupancy_tiled_matmul.png")
    render(out)
    print(f"wrote {out}")
