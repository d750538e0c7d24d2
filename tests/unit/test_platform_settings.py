"""Process settings the simulator applies: one BLAS thread while interpreting unless measured faster
(restored after), and
the opt-in on-disk compilation cache."""

import os
import threading

import numpy as np
import pytest

from nki_workbench import nki
from nki_workbench._src import platform as P
from nki_workbench._src.execution import program_for
from nki_workbench.nki import language as nl

threadpoolctl = pytest.importorskip("threadpoolctl")


@nki.jit
def matmul(lhsT, rhs):
    out = nl.ndarray((128, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.copy(nl.matmul(nl.load(lhsT), nl.load(rhs), transpose_x=True)))
    return out


def _blas():
    ctl = threadpoolctl.ThreadpoolController().select(user_api="blas")
    if not ctl.lib_controllers:
        pytest.fail("numpy's BLAS is not visible to threadpoolctl")
    return ctl


@pytest.fixture
def two_blas_threads():
    ctl = _blas()
    before = {os.path.basename(c.filepath): c.num_threads for c in ctl.lib_controllers}
    with ctl.limit(limits=2):
        yield
    assert P.blas_threads() == before


class _Busy:
    """A CpuSampler reading every core busy elsewhere (so no GEMM may widen)."""

    ncpus = 2

    def busy_elsewhere(self, now):
        return 2.0


def test_under_load_every_instruction_runs_at_one_blas_thread(two_blas_threads, monkeypatch):
    monkeypatch.setattr(P, "GOVERNOR", P.GemmGovernor(_Busy()))
    a = np.random.default_rng(0).random((128, 128), dtype=np.float32)
    b = np.random.default_rng(1).random((128, 256), dtype=np.float32)
    seen = []
    for _ in range(3):  # (past the governor's first measurements)
        out = program_for(matmul.trace(a, b)).run(
            {"lhsT": a, "rhs": b}, observer=lambda inst, st: seen.append(P.blas_threads()))
    assert seen and all(set(s.values()) == {1} for s in seen)
    assert set(P.blas_threads().values()) == {2}
    np.testing.assert_allclose(out["out"], a.T @ b, rtol=1e-5)


def test_simulation_runs_single_threaded_and_restores_the_count(two_blas_threads):
    a = np.random.default_rng(0).random((128, 128), dtype=np.float32)
    b = np.random.default_rng(1).random((128, 256), dtype=np.float32)
    seen = []
    traced = matmul.trace(a, b)
    out = program_for(traced).run({"lhsT": a, "rhs": b},
                                  observer=lambda inst, st: seen.append(P.blas_threads()))
    # (one thread, or the user's two where a wide GEMM measured faster: tile_matmul)
    assert seen and all(set(s.values()) <= {1, 2} for s in seen)
    assert set(P.blas_threads().values()) == {2}
    np.testing.assert_allclose(out["out"], a.T @ b, rtol=1e-5)
    np.testing.assert_allclose(nki.simulate_kernel(matmul, a, b), a.T @ b, rtol=1e-5)
    assert set(P.blas_threads().values()) == {2}


def test_nested_and_concurrent_uses_restore_once_the_last_one_leaves(two_blas_threads):
    seen = []

    def inner():
        with P.blas_single_threaded():
            seen.append(set(P.blas_threads().values()))

    with P.blas_single_threaded():
        with P.blas_single_threaded():
            assert set(P.blas_threads().values()) == {1}
        assert set(P.blas_threads().values()) == {1}  # still inside the outer one
        t = threading.Thread(target=inner)
        t.start()
        t.join(30)
        assert not t.is_alive() and seen == [{1}]
        assert set(P.blas_threads().values()) == {1}  # the other thread left first
    assert set(P.blas_threads().values()) == {2}


def test_an_exception_inside_restores_the_count(two_blas_threads):
    with pytest.raises(RuntimeError), P.blas_single_threaded():
        raise RuntimeError("boom")
    assert set(P.blas_threads().values()) == {2}


def test_the_compilation_cache_is_opt_in_and_fills_its_folder(tmp_path):
    """In a fresh process: no cache unless asked; asked, compiled kernels land on disk."""
    import subprocess
    import sys
    code = (
        "import numpy as np, nki_workbench, jax\n"
        "from nki_workbench import SimParams, nki\n"
        "from nki_workbench.nki import language as nl\n"
        "import sys\n"
        "if sys.argv[1] == 'on': nki_workbench.compilation_cache(sys.argv[2])\n"
        "def k(a):\n"
        "    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, nl.multiply(nl.load(a), 2.0))\n"
        "    return out\n"
        "a = np.arange(512, dtype=np.float32).reshape(128, 4)\n"
        "out = nki.simulate_kernel(nki.jit(k), a, params=SimParams(backend='jax'))\n"
        "assert np.array_equal(out, 2 * a)\n"
        "print(jax.config.jax_compilation_cache_dir)\n")
    env = {k: v for k, v in os.environ.items() if k != P.COMPILATION_CACHE_ENV}
    off = subprocess.run([sys.executable, "-c", code, "off", str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() in ("None", "") and not any(tmp_path.iterdir())
    on = subprocess.run([sys.executable, "-c", code, "on", str(tmp_path)], env=env,
                        capture_output=True, text=True, timeout=300)
    assert on.returncode == 0, on.stderr
    assert on.stdout.strip() == str(tmp_path)
    assert any(tmp_path.iterdir())
