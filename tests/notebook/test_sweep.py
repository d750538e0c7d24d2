"""sweep(): settings evaluated in parallel (local processes, a dask cluster) = the serial run."""

import numpy as np
import pytest

import nki_workbench as nw
import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import examples
from nki_workbench.notebook.explorer import Explorer

MM = examples.load("matmul")
SPECS = (nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16])
# 4 x 3 x 2 = 24 settings; TILE_N=1024 needs 4 KiB of PSUM per partition: infeasible
PARAMS = {"TILE_N": [128, 256, 512, 1024], "TILE_M": [32, 64, 128], "TILE_K": [64, 128]}


@pytest.fixture(scope="module")
def serial():
    return nw.sweep(MM.matmul_tiled, SPECS, PARAMS, workers=0, progress=False)


def test_serial_sweep_rows_are_the_explorers_trials(serial):
    assert len(serial.rows) == 24
    ex = Explorer(MM.matmul_tiled, SPECS, PARAMS)
    for row in serial.rows[::5]:
        trial = ex.evaluate(**dict(row.setting))
        assert (row.feasible, row.latency_us, row.sbuf_peak, row.psum_peak, row.code) == (
            trial.feasible, trial.latency_us, trial.sbuf_peak, trial.psum_peak, trial.code)
    bad = [r for r in serial.rows if not r.feasible]
    assert bad and all(dict(r.setting)["TILE_N"] == 1024 for r in bad)
    assert all(r.code for r in bad)
    best = serial.best()
    assert best.latency_us == min(r.latency_us for r in serial.rows if r.feasible)


def test_sweep_on_a_two_worker_local_cluster_equals_the_serial_run(serial):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None, processes=True) as cluster, \
            distributed.Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        on_dask = nw.sweep(MM.matmul_tiled, SPECS, PARAMS, client=client, progress=False)
    assert on_dask.rows == serial.rows
    assert on_dask.table_text() == serial.table_text()


def test_sweep_in_local_worker_processes_equals_the_serial_run(serial):
    small = {"TILE_N": [256, 1024], "TILE_M": [64, 128]}
    here = nw.sweep(MM.matmul_tiled, SPECS, small, workers=0, progress=False)
    local = nw.sweep(MM.matmul_tiled, SPECS, small, workers=2, progress=False)
    assert local.rows == here.rows
    assert [dict(r.setting) for r in local.rows] == [
        {"TILE_N": n, "TILE_M": m} for n in (256, 1024) for m in (64, 128)]


def test_sweep_checks_correctness_against_a_reference():
    rng = np.random.default_rng(0)
    lhsT, rhs = rng.standard_normal((512, 256)), rng.standard_normal((512, 1024))
    args = (lhsT.astype(np.float32), rhs.astype(np.float32))

    def ref(lhsT, rhs, TILE_N):
        return MM.reference(lhsT, rhs) + (1.0 if TILE_N == 256 else 0.0)  # 256: wrong on purpose

    res = nw.sweep(MM.matmul_tiled, args, {"TILE_N": [256, 512]}, reference=ref, atol=1e-2,
                   rtol=1e-2, workers=0, progress=False)
    by = {dict(r.setting)["TILE_N"]: r for r in res.rows}
    assert by[512].correct is True and by[512].max_abs_error < 1e-2
    assert by[256].correct is False and by[256].max_abs_error == pytest.approx(1.0, abs=1e-2)
    assert res.best() is by[512]


def test_sorted_table_and_jump_to_a_setting(serial):
    lat = [r.latency_us for r in serial.sorted("latency_us")]
    feasible = [x for x in lat if x is not None]
    assert feasible == sorted(feasible) and lat[len(feasible):] == [None] * (24 - len(feasible))
    assert [dict(r.setting)["TILE_M"] for r in serial.sorted("TILE_M")][:8] == [32] * 8
    with pytest.raises(ValueError, match="cannot sort by 'nope'"):
        serial.sorted("nope")
    page = serial._repr_html_()
    assert page.count("onclick='nkiwSort(this,") == 8
    codes = {r.code for r in serial.rows if not r.feasible}
    assert codes and all(c in page for c in codes)
    insp = serial.inspect(serial.best())
    assert insp.latency_us == pytest.approx(serial.best().latency_us)
    assert nw.explore(serial).evaluate(**dict(serial.best().setting)).latency_us == \
        serial.best().latency_us
