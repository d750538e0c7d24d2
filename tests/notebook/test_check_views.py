"""A failed ``--check`` is an error state (banner, tab marker, where); ``--strict`` raises."""

import numpy as np
import pytest
from nb_cells import ADD_CELL

from nki_workbench.notebook import mime
from nki_workbench.notebook.check import run_check
from nki_workbench.notebook.inspector import CHECK_FAILED_TITLE
from nki_workbench.notebook.magics import NkiCellError

# rows 130.. of the reference are off by 0.5 (row 200, column 3 by 2.0): tile 1 fails first
OFF = '"np.exp(a) + b + 0.5 * (np.arange(256)[:, None] >= 130) + 1.5 * bump"'


@pytest.fixture(scope="module")
def failed(ip):
    bump = np.zeros((256, 512))
    bump[200, 3] = 1.0
    ip.user_ns["bump"] = bump
    w = ip.run_cell_magic("nki", f"--args x,y --check {OFF} --out failed_insp", ADD_CELL)
    return w


def test_failed_check_names_the_tile_and_its_max_error(failed):
    chk = failed.inspection.check
    assert not chk.passed and chk.mismatches == 126 * 512
    m = chk.first
    assert (m.output, m.index, m.rows, m.tile) == (0, (130, 0), (128, 255), 1)
    assert m.worst_index == (200, 3) and m.bad_in_tile == 126 * 512
    assert m.max_abs_error == pytest.approx(2.0, abs=1e-5)
    out = failed.inspection.outputs
    assert m.got == pytest.approx(float(out[200, 3]))
    assert m.expected == pytest.approx(float(out[200, 3]) + 2.0, abs=1e-5)
    assert chk.where().startswith("first mismatch: output 0, rows 128..255 (tile 1): first "
                                  "off at [130, 0]")


def test_failed_check_is_an_error_state_in_the_mime_bundle(ip, failed):
    data = ip.display_formatter.format(failed.inspection)[0]
    page = data["text/html"]
    banner = page.index("nkiw-check-failed")
    assert banner < page.index("<pre")  # the banner comes first
    assert "check failed" in page and "rows 128..255 (tile 1)" in page
    assert "max error there 2.000e+00 at [200, 3]" in data["text/plain"]
    doc = data[mime.MIME_TYPE]["check"]
    assert doc["passed"] is False
    assert doc["first_mismatch"]["rows"] == [128, 255]
    assert doc["first_mismatch"]["index"] == [130, 0]
    assert doc["first_mismatch"]["max_abs_error"] == pytest.approx(2.0, abs=1e-5)


def test_failed_check_marks_the_widget_tab(failed):
    assert failed.check_failed and failed.titles[0] == CHECK_FAILED_TITLE
    assert "nkiw-check-failed" in failed.views["Summary"].value
    assert failed.summary().startswith(f"Inspector(add_exp): tabs={CHECK_FAILED_TITLE}|")


def test_passing_check_shows_no_error_state(ip):
    w = ip.run_cell_magic("nki", '--args x,y --check "np.exp(a) + b"', ADD_CELL)
    assert not w.check_failed and w.titles[0] == "Summary"
    assert w.inspection.check.first is None and w.inspection.check.where() is None
    assert "nkiw-check-failed" not in mime.inspection_html(w.inspection)


def test_strict_check_raises_with_the_tile(ip, failed):
    with pytest.raises(NkiCellError) as info:
        ip.run_cell_magic("nki", f"--args x,y --check {OFF} --strict", ADD_CELL)
    assert info.value.code == "wb_check_failed"
    assert "rows 128..255 (tile 1)" in str(info.value)
    with pytest.raises(Exception, match="wb_check_failed"):
        run_check(failed.inspection, "np.zeros((256, 512))", {}, strict=True)
