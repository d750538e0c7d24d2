"""%%nki through a real IPython shell: options, errors, stored result, help."""

import numpy as np
import pytest
from IPython.core.error import UsageError
from nb_cells import ADD_CELL

from nki_workbench import Inspection
from nki_workbench.notebook.inspector import Inspector
from nki_workbench.notebook.magics import NkiCellError, split_args


def test_load_ext_registers_magic_and_compat_alias(ip):
    assert ip.find_cell_magic("nki") is not None
    import neuronxcc.nki.language as nl

    import nki_workbench.nki.language as wnl
    assert nl is wnl


def test_args_check_and_stored_result(ip):
    w = ip.run_cell_magic("nki", '--args x,y --check "np.exp(a) + b" --out r1', ADD_CELL)
    insp = ip.user_ns["r1"]
    assert isinstance(w, Inspector) and w.inspection is insp
    x, y = ip.user_ns["x"], ip.user_ns["y"]
    np.testing.assert_allclose(insp.outputs, np.exp(x) + y, rtol=1e-4, atol=1e-4)
    assert insp.check.passed and insp.check.max_abs_error < 1e-4
    ref = (np.exp(x) + y).astype(np.float64)  # the expression evaluates in float32
    expected = float(np.abs(insp.outputs.astype(np.float64) - ref).max())
    assert insp.check.max_abs_error == pytest.approx(expected, rel=1e-9, abs=1e-12)
    text = ip.display_formatter.format(insp)[0]["text/plain"]
    assert "check vs np.exp(a) + b: max error" in text and "ok)" in text


def test_failing_check_reports_mismatches(ip):
    ip.run_cell_magic("nki", '--args x,y --check "np.exp(a) - b" --quiet', ADD_CELL)
    chk = ip.user_ns["_nki"].check
    x, y = ip.user_ns["x"], ip.user_ns["y"]
    assert not chk.passed
    assert chk.max_abs_error == pytest.approx(float(np.abs(2 * y).max()), rel=1e-5)
    assert chk.mismatches == int(np.count_nonzero(np.abs(2 * y) > 1e-3 + 1e-3 * np.abs(
        np.exp(x) - y)))


def test_full_cell_via_run_cell_defaults_to_last_function(ip):
    res = ip.run_cell("%%nki --args x,y --static --out r2\n" + ADD_CELL, store_history=False)
    assert res.success, res.error_in_exec
    assert res.result is ip.user_ns["r2"] and isinstance(res.result, Inspection)
    assert res.result.kernel_name == "add_exp"


def test_shapes_placeholders_grid_target_and_show(ip):
    cell = '''
from neuronxcc import nki
import neuronxcc.nki.language as nl

def helper():
    return 1

def spmd_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 128
    nl.store(out[i:i + 128, :], nl.load(a[i:i + 128, :]) + nl.load(b[i:i + 128, :]))
    return out
'''
    w = ip.run_cell_magic("nki", '--kernel spmd_add --shapes "a=256x64:bf16, b=256x64:bf16" '
                          "--grid 2 --target trn2 --show ir,timeline", cell)
    insp = w.inspection
    assert insp.outputs is None and insp.not_simulated == "placeholder arguments"
    assert insp.grid == (2,) and insp.platform_target == "trn2"
    assert [d.dtype for d in insp.kernel.params] == ["bfloat16", "bfloat16"]
    assert w.titles == ("Summary", "IR", "Timeline")


def test_kwargs_and_benchmark_mode_opens_timeline(ip):
    cell = '''
def scaled(a, SCALE=2.0):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, :], nl.multiply(nl.load(a[0:128, :]), SCALE))
    return out
'''
    ip.run_cell("import neuronxcc.nki.language as nl", store_history=False)
    w = ip.run_cell_magic("nki", "--args x[0:128],SCALE=3.0 --mode benchmark", cell)
    assert w.inspection.outputs is None and w.titles[w.selected_index] == "Timeline"
    w = ip.run_cell_magic("nki", '--args x[0:128],SCALE=3.0 --check "3 * a"', cell)
    np.testing.assert_allclose(w.inspection.outputs, 3 * ip.user_ns["x"][0:128], rtol=1e-6)


def test_kernel_error_shows_code_and_cell_line(ip):
    bad = ADD_CELL.replace("nl.exp(t)", "nl.exp(t[0:200, :])")
    with pytest.raises(NkiCellError) as info:
        ip.run_cell_magic("nki", "--args x,y", bad)
    err = info.value
    assert err.code == "err_num_partition_exceed_arch_limit"
    # the %%nki line is cell line 1; the store is line 11 of the cell body
    assert err.cell_line == 12 and "nl.exp(t[0:200, :])" in err.source
    shown = err._render_traceback_()
    assert len(shown) == 1 and "cell line 12" in shown[0] and "Traceback" not in shown[0]
    res = ip.run_cell("%%nki --args x,y\n" + bad, store_history=False)
    assert not res.success and isinstance(res.error_in_exec, NkiCellError)


def test_python_error_in_cell_names_the_line(ip):
    with pytest.raises(NkiCellError) as info:
        ip.run_cell_magic("nki", "--args x,y", "def k(a, b):\n    return a +\n")
    assert "SyntaxError" in str(info.value) and info.value.cell_line == 3
    with pytest.raises(NkiCellError) as info:
        ip.run_cell_magic("nki", "--args x,y", "def k(a, b):\n    return undefined_name\n")
    assert "NameError" in str(info.value) and info.value.cell_line == 3


@pytest.mark.parametrize("line, match", [
    ("--show bogus", "unknown views"),
    ("--grid 0,2", "bad grid"),
    ('--shapes "a=12x:bf16"', "bad shape"),
    ("--mode fast", "invalid choice"),
    ("--args nope_not_defined", "cannot evaluate 'nope_not_defined'"),
    ("--args x", "no value for kernel parameter"),
    ("--kernel missing_kernel --args x,y", "no kernel named 'missing_kernel'"),
])
def test_bad_options_are_usage_errors(ip, line, match):
    with pytest.raises(UsageError, match=match):
        ip.run_cell_magic("nki", line, ADD_CELL)


def test_check_needs_simulated_outputs(ip):
    with pytest.raises(NkiCellError, match="wb_check_needs_outputs"):
        ip.run_cell_magic("nki", '--shapes "a=256x512,b=256x512" --check "a"', ADD_CELL)


def test_help_lists_every_option(ip):
    doc = ip.find_cell_magic("nki").__doc__
    for opt in ("--kernel", "--args", "--shapes", "--grid", "--target", "--mode", "--show",
                "--check", "--out", "--quiet"):
        assert opt in doc
    assert "simulation" in doc and "torchxla" in doc


def test_split_args_respects_brackets_and_quotes():
    assert split_args("a, b[0, 1], k=f(x, 'p,q')") == ["a", "b[0, 1]", "k=f(x, 'p,q')"]
