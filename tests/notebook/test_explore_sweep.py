"""The explorer on a sweep: explore(sweep_result), run_sweep, jump to a row, CLI --sweep."""

import pytest

import nki_workbench as nw
import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import cli, examples
from nki_workbench.notebook.explorer import Explorer

MM = examples.load("matmul")
SPECS = (nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16])
# 3 x 2 = 6 settings; TILE_N=1024 needs 4 KiB of PSUM per partition: infeasible
PARAMS = {"TILE_N": [256, 512, 1024], "TILE_M": [64, 128]}


@pytest.fixture(scope="module")
def serial():
    return nw.sweep(MM.matmul_tiled, SPECS, PARAMS, workers=0, progress=False)


def test_explorer_built_from_a_sweep_has_the_serial_rows(serial):
    ex = nw.explore(serial)
    assert isinstance(ex, Explorer) and ex.sweep_result is serial
    assert ex.params == PARAMS and ex.name == "matmul_tiled"
    assert Explorer.from_sweep(serial).sweep_result is serial
    # run_sweep in 2 worker processes: the same rows, in settings order
    fresh = Explorer(MM.matmul_tiled, SPECS, PARAMS)
    res = fresh.run_sweep(workers=2, progress=False)
    assert fresh.sweep_result is res
    assert res.rows == serial.rows
    assert [dict(r.setting) for r in res.rows] == fresh.settings()
    assert sum(not r.feasible for r in res.rows) == 2


def test_jump_to_a_row_sets_the_setting_and_matches_its_latency(serial):
    ex = nw.explore(serial)
    for i, row in enumerate(serial.rows):
        trial = ex.jump(i if i % 2 else row)
        assert ex.setting == dict(row.setting)
        assert trial.setting == row.setting
        assert (trial.feasible, trial.latency_us, trial.sbuf_peak, trial.psum_peak,
                trial.code) == (row.feasible, row.latency_us, row.sbuf_peak, row.psum_peak,
                                row.code)
    best = serial.best()
    assert ex.jump(best).latency_us == best.latency_us == min(
        r.latency_us for r in serial.rows if r.feasible)
    with pytest.raises(ValueError, match="needs a sweep"):
        Explorer(MM.matmul_tiled, SPECS, PARAMS).jump(0)


def test_widget_shows_the_sorted_table_and_choosing_a_row_jumps_the_views(serial):
    ex = nw.explore(serial)
    w = ex.widget()
    assert w.sweep_box.layout.display is None
    by_latency = serial.sorted("latency_us")
    assert [serial.rows[i] for _, i in w.rows.options] == by_latency
    assert w.rows.options[0][0].split()[:2] == [repr(v) for _, v in by_latency[0].setting]
    codes = {r.code for r in serial.rows if not r.feasible}
    assert codes == {"err_size_of_dimension_exceed_arch_limit"}
    assert "nkiwSort" in w.sweep_table.value and codes.pop() in w.sweep_table.value
    w.sort_by.value = "TILE_M"
    assert [dict(serial.rows[i].setting)["TILE_M"] for _, i in w.rows.options] == \
        [64, 64, 64, 128, 128, 128]
    target = next(r for r in serial.rows if dict(r.setting) == {"TILE_N": 512, "TILE_M": 128})
    before = w.sbuf.value
    w.rows.value = serial.rows.index(target)
    assert {k: s.value for k, s in w.sliders.items()} == {"TILE_N": 512, "TILE_M": 128}
    assert f"{target.latency_us:.3f} us" in w.status.value
    assert w.sbuf.value != before
    bad = next(r for r in serial.rows if not r.feasible)
    ex.jump(bad)  # the explorer's jump moves every open widget
    assert {k: s.value for k, s in w.sliders.items()} == dict(bad.setting)
    assert "infeasible" in w.status.value and bad.code in w.status.value
    # a widget opened before the sweep shows it once run_sweep finishes
    plain = Explorer(MM.matmul_tiled, SPECS, {"TILE_N": [256, 512]}, {"TILE_M": 128})
    pw = plain.widget()
    assert pw.sweep_box.layout.display == "none"
    plain.run_sweep(workers=0, progress=False)
    assert pw.sweep_box.layout.display is None and len(pw.rows.options) == 2


def test_cli_explore_sweep_prints_the_table(serial, capsys):
    argv = ["explore", "matmul", "--shapes", "lhsT=512x256:bfloat16,rhs=512x1024:bfloat16",
            "-p", "TILE_N=256,512,1024", "-p", "TILE_M=64,128", "--sweep", "--workers", "0"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"sweep of matmul_tiled: {serial!r}"
    assert "\n".join(out[1:]) == serial.table_text(by="latency_us")
    assert out[1].split() == ["TILE_N", "TILE_M", "latency", "us", "SBUF", "peak", "PSUM",
                              "peak", "correct", "code"]
    best = serial.best()
    assert out[2].split()[:3] == [repr(best.setting[0][1]), repr(best.setting[1][1]),
                                  f"{best.latency_us:.3f}"]
    assert sum("err_size_of_dimension_exceed_arch_limit" in line for line in out) == 2
    assert all("err_" in line for line in out[-2:])  # infeasible rows sort last
    with pytest.raises(SystemExit) as info:
        cli.main([*argv[:-1], "-1"])
    assert info.value.code == 2 and "--workers must be 0 or more" in capsys.readouterr().err


def test_panel_app_of_a_sweep_jumps_to_a_row(serial):
    pn = pytest.importorskip("panel")
    ex = nw.explore(serial)
    app = ex.panel()
    rows = app[7]
    assert isinstance(rows, pn.widgets.Select)
    best = serial.best()
    assert list(rows.options.values())[1:] == [serial.rows.index(r)
                                               for r in serial.sorted("latency_us")]
    tried = len(ex.trials)
    rows.value = serial.rows.index(best)
    assert [s.value for s in app[1][:2]] == [v for _, v in best.setting]
    assert f"{best.latency_us:.3f} us" in app[2].object
    assert len(ex.trials) == tried + 1  # the jump evaluates only the chosen setting
    assert "err_size_of_dimension_exceed_arch_limit" in app[8].object
