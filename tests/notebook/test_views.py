"""Inspector widget tree, static mime views (text, escaped HTML, JSON) and PNG determinism."""

import base64
import json

import numpy as np
import pytest
from nb_cells import ADD_CELL

from nki_workbench import inspect
from nki_workbench.notebook import mime, plots
from nki_workbench.notebook.inspector import TAB_TITLES, Inspector

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def insp(ip):
    ip.run_cell_magic("nki", '--args x,y --check "np.exp(a) + b" --quiet --out views_insp',
                      ADD_CELL)
    return ip.user_ns["views_insp"]


@pytest.fixture(scope="module")
def widget(insp):
    return insp.widget()


def test_inspector_has_every_tab(widget):
    assert isinstance(widget, Inspector)
    assert widget.titles == TAB_TITLES
    assert len(widget.children) == 7
    assert widget._repr_mimebundle_()["text/plain"] == (
        "Inspector(add_exp): tabs=Summary|Config|IR|SBUF|PSUM|Timeline|HLO")


def test_summary_config_and_ir_tabs(widget, insp):
    assert "latency:" in widget.views["Summary"].value
    cfg = widget.views["Config"].value
    for key in insp.config:
        assert f"<b>{key}</b>" in cfg
    assert len(insp.config) == 14
    ir = widget.views["IR"].value
    n = len(insp.ir.rstrip("\n").splitlines())
    assert f">{n} </span>" in ir and "color:#6f42c1'>load</span>" in ir


def test_occupancy_tabs_show_the_model_maps(widget, insp):
    sbuf = widget.views["SBUF"]
    assert bytes(sbuf.image.value).startswith(PNG_MAGIC)
    assert mime.esc(insp.memory.sbuf.text()) in sbuf.children[-1].value
    before = bytes(sbuf.image.value)
    sbuf.full_scale.value = True
    assert bytes(sbuf.image.value) != before and bytes(sbuf.image.value).startswith(PNG_MAGIC)


def test_timeline_slider_and_filters_change_the_image(widget, insp):
    tv = widget.views["Timeline"]
    assert tv.window.max == pytest.approx(insp.timeline.total_ns / 1000)
    first = bytes(tv.image.value)
    tv.window.value = (0.0, tv.window.max / 3)
    zoomed = bytes(tv.image.value)
    assert zoomed != first and zoomed.startswith(PNG_MAGIC)
    assert set(tv.filters) == {"DMA", "Vector", "Scalar"}
    tv.filters["DMA"].value = False
    assert bytes(tv.image.value) != zoomed
    assert all(not r.startswith("q") for r in tv.rows())
    tv.filters["DMA"].value = True
    tv.window.value = (0.0, tv.window.max)
    assert bytes(tv.image.value) == first  # same settings, same bytes


def test_hlo_tab_shows_custom_call_or_why_not(widget, insp):
    hlo = widget.views["HLO"]
    for fw in ("jax", "torchxla"):
        hlo.framework.value = fw
        try:
            text = insp.custom_call(fw)
        except Exception as exc:  # noqa: BLE001
            assert "not available" in hlo.text.value and type(exc).__name__ in hlo.text.value
        else:
            assert mime.esc(text) in hlo.text.value


def test_text_plain_is_a_deterministic_summary(ip, insp):
    data = ip.display_formatter.format(insp)[0]
    text = data["text/plain"]
    assert text == mime.summary_text(insp)
    assert "inputs:  a float32[256, 512], b float32[256, 512]" in text
    assert f"latency: {insp.timeline.latency_us:.3f} us" in text
    assert f"SBUF peak {insp.memory.sbuf.peak_bytes_per_partition} / 180224" in text
    assert "max error" in text
    assert mime.summary_text(insp) == text


def test_html_escapes_user_text(insp):
    page = mime.inspection_html(insp)
    # the IR's locations name the cell <cell [N]>: only its escaped form may appear
    assert "&lt;cell [" in page and "<cell [" not in page
    assert "'single'" not in page and "&#x27;single&#x27;" in page


def test_json_mime_type(insp):
    data = mime.mimebundle(insp)
    doc = data[mime.MIME_TYPE]
    json.dumps(doc, allow_nan=False)
    assert doc["kernel"] == "add_exp" and doc["summary"] == data["text/plain"]
    assert doc["ir"] == insp.ir and doc["config"] == insp.config
    assert base64.b64decode(doc["images"]["sbuf"]).startswith(PNG_MAGIC)
    assert base64.b64decode(doc["images"]["timeline"]).startswith(PNG_MAGIC)
    assert doc["images"]["psum"] is None  # no PSUM tiles in this kernel
    assert doc["memory"]["sbuf"]["peak_bytes_per_partition"] == \
        insp.memory.sbuf.peak_bytes_per_partition
    assert doc["timeline"]["total_ns"] == pytest.approx(insp.timeline.total_ns, abs=1e-3)
    assert len(doc["timeline"]["events"]) == len(insp.timeline.events)
    assert doc["check"]["passed"] is True
    assert [t["shape"] for t in doc["inputs"]] == [[256, 512], [256, 512]]
    assert mime.mimebundle(insp, include=["text/plain"]).keys() == {"text/plain"}


def test_json_carries_the_inspector_model(insp, widget):
    # the JupyterLab renderer lays out these tabs: the widget's titles, order and bodies
    tabs = mime.inspection_json(insp)["inspector"]["tabs"]
    assert [t["title"] for t in tabs] == list(widget.titles)
    assert [t["image"] for t in tabs] == [None, None, None, "sbuf", "psum", "timeline", None]
    by_key = {t["key"]: t["html"] for t in tabs}
    assert by_key["IR"] == mime.ir_html(insp.ir)
    assert "data:image/png" not in "".join(by_key.values())  # pictures travel once


def test_pngs_are_deterministic(insp):
    tl = insp.timeline
    assert plots.gantt_png(tl) == plots.gantt_png(tl)
    assert plots.occupancy_png(insp.memory.sbuf) == plots.occupancy_png(insp.memory.sbuf)
    assert b"Software" not in plots.gantt_png(tl)


def test_unsimulated_inspection_views():
    import nki_workbench.nki.language as nl
    import nki_workbench.nki.typing as nt

    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.matmul(nl.load(a), nl.load(a), transpose_x=True)
        nl.store(out, nl.copy(acc, dtype=a.dtype))
        return out
    i = inspect(k, nt.tensor[[128, 128], nl.bfloat16], platform_target="trn2")
    doc = mime.inspection_json(i)
    assert doc["simulated"] is False and doc["not_simulated"] == "placeholder arguments"
    assert doc["memory"]["psum"]["peak_bytes_per_partition"] == 512  # 128 fp32 per partition
    assert base64.b64decode(doc["images"]["psum"]).startswith(PNG_MAGIC)
    w = Inspector(i, show=["psum"], selected="PSUM")
    assert w.titles == ("Summary", "PSUM") and w.selected_index == 1
    with pytest.raises(ValueError, match="unknown views"):
        Inspector(i, show=["gantt"])


def test_check_result_handles_nan():
    from nki_workbench.notebook.check import run_check

    class Fake:
        outputs = np.array([1.0, np.nan], dtype=np.float32)
        kernel_name = "fake"
        not_simulated = None
    f = Fake()
    res = run_check(f, "np.array([1.0, 2.0])", {})
    assert not res.passed and res.mismatches == 1 and np.isnan(res.max_abs_error)
    assert res.as_dict()["max_abs_error"] == "nan"
    json.dumps(res.as_dict(), allow_nan=False)
