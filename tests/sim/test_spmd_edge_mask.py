"""A masked edge tile written by several SPMD programs (as nki-samples' resize kernel does).

Every program of the grid stores the same rows; the last 128-row tile runs past the tensor and is
guarded by ``mask=(pos < size)``. The race check compares the old and new values of the region
written by another program: it must read only the selected lanes, never the masked-out ones past
the edge (which used to raise ``err_tensor_access_out_of_bound``).
"""

import warnings

import numpy as np
import pytest

from nki_workbench import nki
from nki_workbench.nki import language as nl


@nki.jit
def copy_rows_masked(data):
    b_n, s, c = data.shape
    out = nl.ndarray((b_n, s, c), dtype=data.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(b_n):
        for t in nl.affine_range((s + 127) // 128):
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(c)[None, :]
            pos = t * 128 + i_p
            tile = nl.load(data[b, pos, i_f], mask=(pos < s))
            nl.store(out[b, pos, i_f], value=tile * 2.0, mask=(pos < s))
    return out


@pytest.mark.parametrize("grid", [1, 2, 3])
def test_masked_edge_store_in_every_program(grid):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 200, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the no-compiler notice
        got = nki.simulate_kernel(copy_rows_masked[grid], x)
    np.testing.assert_allclose(got, 2.0 * x, atol=1e-6)
