"""compare(a, b) and the tile-allocation explorer (logic and widget)."""

import numpy as np
import pytest

import nki_workbench as nw
import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import examples
from nki_workbench._src.sim.timing import timeline
from nki_workbench.notebook import mime

MM = examples.load("matmul")
SPECS = (nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16])


@pytest.fixture(scope="module")
def pair():
    a = nw.inspect(MM.matmul_tiled, *SPECS, TILE_N=128)
    b = nw.inspect(MM.matmul_tiled, *SPECS, TILE_N=512)
    return a, b


def test_compare_metrics_come_from_the_models(pair):
    a, b = pair
    cmp = nw.compare(a, b)
    la, lb = timeline(a.kernel).latency_us, timeline(b.kernel).latency_us
    rows = {r[0]: r[1:] for r in cmp.metrics()}
    assert rows["latency (us, estimate)"] == (f"{la:.3f}", f"{lb:.3f}")
    assert cmp.speedup == pytest.approx(la / lb)
    assert rows["peak PSUM (B/partition)"] == ("512", "2048")  # 128 vs 512 fp32 per partition
    assert rows["peak SBUF (B/partition)"] == (
        str(a.memory.sbuf.peak_bytes_per_partition), str(b.memory.sbuf.peak_bytes_per_partition))
    util = a.timeline.utilization()
    assert rows["Tensor utilisation"][0] == f"{100 * util['Tensor']:.1f}%"


def test_compare_ir_diff_and_views(pair):
    a, b = pair
    cmp = nw.compare(a, b, labels=("tile128", "tile512"))
    changed = [ln for ln in cmp.ir_diff if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert changed and any("1024" in ln or "512" in ln for ln in changed)
    assert nw.compare(a, a).ir_diff == []
    data = cmp._repr_mimebundle_()
    la, lb = a.timeline.latency_us, b.timeline.latency_us
    assert lb < la  # 512-wide tiles are faster: the sentence names B first
    verdict = (f"tile512 (matmul_tiled) is {la / lb:.3f}\u00d7 faster than tile128 "
               f"(matmul_tiled) ({lb:.3f} vs {la:.3f} us, estimate)")
    assert data["image/png"].startswith(b"\x89PNG") and verdict in data["text/plain"]
    assert "<table>" in data["text/html"] and "tile512 (matmul_tiled)</th>" in data["text/html"]
    assert "data:image/png;base64," in data["text/html"]  # both timelines, one time axis
    assert len(cmp.widget().children) == 3
    with pytest.raises(TypeError, match="two Inspections"):
        nw.compare(a, "b")


def big_tile(a, COLS=512):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
    u = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
    t[...] = nl.load(a[:, 0:COLS])
    u[...] = nl.exp(t)
    nl.store(out[:, 0:COLS], u)
    return out


def test_explorer_marks_infeasible_settings():
    ex = nw.explore(MM.matmul_tiled, SPECS, {"TILE_N": [256, 1024], "TILE_M": [128]})
    ok = ex.evaluate(TILE_N=256, TILE_M=128)
    bad = ex.evaluate(TILE_N=1024, TILE_M=128)
    ref = nw.inspect(MM.matmul_tiled, *SPECS, TILE_N=256, simulate=False)
    assert ok.feasible and ok.latency_us == pytest.approx(mime.timeline_of(ref).latency_us)
    assert ok.psum_peak == 1024 and ok.sbuf_peak == ref.memory.sbuf.peak_bytes_per_partition
    assert not bad.feasible and bad.code == "err_size_of_dimension_exceed_arch_limit"
    assert ex.evaluate(TILE_N=256, TILE_M=128) is ok  # cached
    assert [t.setting for t in ex.trials] == [(("TILE_N", 256), ("TILE_M", 128)),
                                              (("TILE_N", 1024), ("TILE_M", 128))]
    html = ex.table_html()
    assert "color:#cf222e" in html and "err_size_of_dimension_exceed_arch_limit" in html
    assert ex.best() is ok
    over = nw.explore(big_tile, [nt.tensor[[128, 40000], nl.float32]],
                      {"COLS": [4096, 40000]})
    assert over.evaluate(COLS=4096).sbuf_peak == 2 * 4096 * 4
    t = over.evaluate(COLS=40000)
    assert not t.feasible and t.code == "wb_alloc_oversubscribed" and "capacity" in t.reason


def test_explorer_widget_slider_updates_images_and_table():
    ex = nw.explore(MM.matmul_tiled, SPECS, {"TILE_N": [128, 512, 1024]})
    w = ex.widget()
    first = bytes(w.timeline.value)
    assert first.startswith(b"\x89PNG") and "us (estimate)" in w.status.value
    w.sliders["TILE_N"].value = 512
    assert bytes(w.timeline.value) != first and bytes(w.sbuf.value) != first
    w.sliders["TILE_N"].value = 1024
    assert "infeasible" in w.status.value and "#cf222e" in w.status.value
    assert w.table.value.count("<tr style=") == 3
    assert ex._repr_mimebundle_()["text/plain"].startswith("Explorer(matmul_tiled")


def test_explorer_rejects_bad_params():
    with pytest.raises(ValueError, match="no parameter 'TILE_Q'"):
        nw.explore(MM.matmul_tiled, SPECS, {"TILE_Q": [1]})
    with pytest.raises(ValueError, match="non-empty list"):
        nw.explore(MM.matmul_tiled, SPECS, {"TILE_N": []})
    with pytest.raises(ValueError, match="at least one"):
        nw.explore(MM.matmul_tiled, SPECS, {})


def test_explorer_panel_app_builds_and_reacts():
    pn = pytest.importorskip("panel")
    ex = nw.explore(MM.matmul_tiled, SPECS, {"TILE_N": [128, 512]})
    app = ex.panel()
    slider = app[1][0]
    assert isinstance(slider, pn.widgets.DiscreteSlider)
    png_pane = app[3][1]
    before = png_pane.object
    slider.value = 512
    assert png_pane.object != before and len(ex.trials) == 2


def test_examples_match_numpy():
    rng = np.random.default_rng(1)
    for name in examples.EXAMPLES:
        mod = examples.load(name)
        ins = mod.inputs(rng)
        out = nw.inspect(getattr(mod, mod.KERNEL), *ins).outputs
        np.testing.assert_allclose(out, mod.reference(*ins), rtol=1e-3, atol=1e-3)


def test_explorer_fixed_scale_draws_every_setting_on_the_capacity_axis():
    ex = nw.explore(MM.matmul_tiled, SPECS, {"TILE_N": [128, 512]})
    w = ex.widget()
    free = bytes(w.sbuf.value)
    w.fixed_scale.value = True
    fixed = bytes(w.sbuf.value)
    trial = ex.evaluate(TILE_N=128)
    buf = trial.inspection.memory.sbuf
    from nki_workbench.notebook import plots
    assert fixed == plots.occupancy_png(buf, full_scale=True) != free
    assert ex.images(trial, fixed_scale=True)[0] == fixed
