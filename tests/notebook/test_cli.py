"""The nki-workbench CLI: report (HTML with IR and images, escaped), decode, --help."""

import base64
import re
import subprocess
import sys

import numpy as np
import pytest

from nki_workbench import cli, inspect
from nki_workbench.notebook import mime

KERNEL_FILE = '''
import nki_workbench.nki.language as nl
from nki_workbench import nki

SHAPES = "x=256x128:float32"


@nki.jit
def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], nl.load(x[i * 128:(i + 1) * 128, :]) * 2.0)
    return out
'''


@pytest.fixture()
def kernel_file(tmp_path):
    # a directory name with markup: it reaches the IR's locations, so the report must escape it
    d = tmp_path / "<b>kernels&co"
    d.mkdir()
    f = d / "double.py"
    f.write_text(KERNEL_FILE)
    return f


def _images(page):
    return [base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)",
                                                     page)]


def test_report_on_a_file_embeds_ir_and_images(kernel_file, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert cli.main(["report", str(kernel_file), "--kernel", "double", "--random",
                     "-o", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<b>kernels" not in page and "&lt;b&gt;kernels&amp;co/double.py" in page
    for line in ("kernel double grid=()", "param x: hbm float32[256, 128] input"):
        assert mime.esc(line) in page
    imgs = _images(page)
    assert len(imgs) == 3 and all(i.startswith(b"\x89PNG") for i in imgs)  # SBUF, PSUM, timeline
    assert "PSUM" in page and "latency:" in page
    assert "wrote" in capsys.readouterr().out


def test_report_is_deterministic(kernel_file, tmp_path):
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    cli.main(["report", str(kernel_file), "-o", str(a)])
    cli.main(["report", str(kernel_file), "-o", str(b)])
    assert a.read_bytes() == b.read_bytes()


def test_report_of_bundled_examples(tmp_path):
    out = tmp_path / "demo.html"
    assert cli.main(["report", "-o", str(out)]) == 0
    page = out.read_text()
    for name in ("tensor_add", "matmul_tiled", "softmax", "rmsnorm"):
        assert f"kernel {name} grid=()" in page
    # every example is simulated and checked against its numpy reference
    assert page.count("check vs reference(*inputs): max error") == 4
    assert page.count(": ok)") == 4
    assert len(_images(page)) == 12


def test_decode_string_file_and_hlo(tmp_path, capsys):
    import nki_workbench.nki.language as nl

    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(nl.load(a)))
        return out
    insp = inspect(k, np.zeros((128, 64), np.float32), platform_target="trn2")
    assert cli.main(["decode", insp.backend_config]) == 0
    text = capsys.readouterr().out
    assert mime.config_text(insp.config) in text and insp.ir.rstrip("\n") in text
    hlo = tmp_path / "m.hlo"
    hlo.write_text(f'%c = f32[128,64] custom-call(f32[128,64] %p), custom_call_target='
                   f'"AwsNeuronCustomNativeKernel", backend_config="{insp.backend_config}"\n')
    assert cli.main(["decode", str(hlo), "--json"]) == 0
    assert '"func_name": "k"' in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        cli.main(["decode", "not base64 at all!"])
    assert info.value.code == 2


def test_errors_are_short(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["report", str(tmp_path / "missing.py")])
    assert info.value.code == 2 and "no such kernel file" in capsys.readouterr().err
    bad = tmp_path / "bad.py"
    bad.write_text(KERNEL_FILE.replace("* 2.0)", "* 2.0)\n    nl.exp(nl.load(x[0:200, :]))"))
    with pytest.raises(SystemExit) as info:
        cli.main(["report", str(bad)])
    err = capsys.readouterr().err
    assert info.value.code == 1 and "err_num_partition_exceed_arch_limit" in err
    assert "bad.py:13" in err


@pytest.mark.parametrize("argv", [["--help"], ["report", "--help"], ["explore", "--help"],
                                  ["decode", "--help"]])
def test_help_everywhere(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 0 and "usage: nki-workbench" in capsys.readouterr().out


def test_console_script_runs():
    exe = [sys.executable, "-m", "nki_workbench.cli", "--help"]
    res = subprocess.run(exe, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "report" in res.stdout and "explore" in res.stdout


def _config_of_exp_kernel():
    import nki_workbench.nki.language as nl

    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(nl.load(a)))
        return out
    return inspect(k, np.zeros((128, 64), np.float32), platform_target="trn2").backend_config


def _decode_fails(capsys, arg):
    with pytest.raises(SystemExit) as info:
        cli.main(["decode", arg])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert err.startswith("nki-workbench: error: ") and err.count("\n") == 1, err
    return err


def test_decode_bad_inputs_are_one_line_errors(tmp_path, capsys):
    import base64
    import json
    assert "no such file: " in _decode_fails(capsys, str(tmp_path / "missing.hlo"))
    assert "no such file" in _decode_fails(capsys, "config.b64")
    assert "is a directory" in _decode_fails(capsys, str(tmp_path))
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    assert "binary file" in _decode_fails(capsys, str(binary))
    # valid alphabet, wrong padding: not base64
    assert "not valid base64" in _decode_fails(capsys, "A" * 65)
    deep = base64.b64encode(b"[" * 100_000 + b"]" * 100_000).decode()
    assert "does not hold JSON" in _decode_fails(capsys, deep)
    keys = base64.b64encode(json.dumps({"func_name": "k"}).encode()).decode()
    assert "backend_config" in _decode_fails(capsys, keys)


def test_decode_escapes_control_characters(tmp_path, capsys):
    import base64
    import json
    cfg = json.loads(base64.b64decode(_config_of_exp_kernel()))
    cfg["serialize_ir_string"] += "# \x1b[2J\x1b[31mred\x07\n"
    evil = base64.b64encode(json.dumps(cfg).encode()).decode()
    path = tmp_path / "evil.b64"
    path.write_text(evil)
    assert cli.main(["decode", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J\\x1b[31mred\\x07" in out


NEURONXCC_FILE = '''
from neuronxcc import nki
import neuronxcc.nki.language as nl

SHAPES = "x=256x128:f32"


@nki.jit
def triple(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], nl.load(x[i * 128:(i + 1) * 128, :]) * 3.0)
    return out
'''


def test_report_on_a_neuronxcc_file_with_dtype_shorthands(tmp_path, capsys):
    f = tmp_path / "triple.py"
    f.write_text(NEURONXCC_FILE)
    out = tmp_path / "r.html"
    assert cli.main(["report", str(f), "--shapes", "x=256x128:bf16", "-o", str(out)]) == 0
    assert "triple" in out.read_text() and "bfloat16[256, 128]" in out.read_text()
    assert cli.main(["report", str(f), "--random", "-o", str(out)]) == 0  # SHAPES says f32
    assert "x float32[256, 128]" in out.read_text()


@pytest.mark.parametrize(("short", "name"), [("f32", "float32"), ("fp32", "float32"),
                                             ("f16", "float16"), ("bf16", "bfloat16"),
                                             ("fp8e4m3", "float8_e4m3"), ("i32", "int32")])
def test_dtype_shorthands(short, name):
    from nki_workbench._src import dtypes as D
    from nki_workbench.notebook.arguments import parse_shapes
    assert D.name_of(parse_shapes(f"a=128x4:{short}")["a"].dtype) == name


def test_unknown_dtype_lists_names_and_shorthands(tmp_path, capsys):
    f = tmp_path / "triple.py"
    f.write_text(NEURONXCC_FILE)
    with pytest.raises(SystemExit) as info:
        cli.main(["report", str(f), "--shapes", "x=256x128:f64", "-o", str(tmp_path / "r")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown dtype 'f64'" in err
    assert "bfloat16" in err and "f32" in err and "bf16" in err and "fp8e4m3" in err


def test_list_examples(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--list-examples"])
    assert info.value.code == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln and not ln[0].isspace()]
    from nki_workbench import examples
    assert [ln.split()[0] for ln in lines] == list(examples.EXAMPLES)
    assert "kernel matmul_tiled" in lines[1] and "sweeps TILE_N, TILE_M" in lines[1]
