"""The simulation progress bar: counts executed instructions, shows after the delay."""

import io

import numpy as np

import nki_workbench.nki.language as nl
from nki_workbench import inspect
from nki_workbench.notebook.progress import SimulationProgress, executed_instructions


def looped(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        for j in nl.sequential_range(2):
            t = nl.load(a[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32])
            nl.store(out[i * 128:(i + 1) * 128, j * 32:(j + 1) * 32], nl.exp(t))
    return out


def test_counts_match_the_simulator_and_the_bar_shows():
    x = np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32)
    buf = io.StringIO()
    seen = []

    def progress(kernel):
        p = SimulationProgress(kernel, delay=0, file=buf)
        seen.append(p)
        return p
    insp = inspect(looped, x, grid=(2,), progress=progress, platform_target="trn2")
    np.testing.assert_allclose(insp.outputs, np.exp(x), rtol=1e-5)
    p = seen[0]
    # 4 x 2 iterations of (load, exp, store), for each of the 2 programs
    assert executed_instructions(insp.kernel.body) == 24
    assert p.total == 48 and p.count == 48
    assert p.bar.n == 48 and p.bar.total == 48
    assert "simulating looped" in buf.getvalue() and "/48" in buf.getvalue()


def test_short_runs_stay_silent():
    x = np.zeros((128, 64), np.float32)
    buf = io.StringIO()
    inspect(looped, x, platform_target="trn2",
            progress=lambda k: SimulationProgress(k, file=buf))
    assert buf.getvalue() == ""
