"""The JupyterLab extension (extensions/nki_workbench_labext): installed, enabled, fresh.

The renderer itself is exercised in a real browser by the workbench's browser test; here we check
what can go wrong without a browser: the venv does not have it (or has an older copy), the committed
build is older than its sources, or the mime type drifted between the producer, the docs and the
renderer.
"""

import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "extensions" / "nki_workbench_labext"
BUILT = EXT / "nki_workbench_labext" / "labextension"
MIME = "application/vnd.nki-workbench.inspection+json"
NAME = "nki-workbench-labext"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def labextension_list() -> str:
    res = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return re.sub(r"\x1b\[[0-9;]*m", "", res.stdout + res.stderr)  # drop colour codes


def test_labextension_list_shows_it_enabled(labextension_list):
    version = json.loads((EXT / "package.json").read_text())["version"]
    lines = [ln.split() for ln in labextension_list.splitlines() if NAME in ln]
    assert lines, f"{NAME} missing from `jupyter labextension list`:\n{labextension_list}"
    assert lines[0][:4] == [NAME, f"v{version}", "enabled", "OK"], lines
    assert "(python, nki_workbench_labext)" in " ".join(lines[0])


def test_committed_build_is_fresh():
    stamp = _load(EXT / "build_stamp.py", "nki_labext_build_stamp")
    stored = stamp.STAMP.read_text().strip()
    assert stored == stamp.inputs_hash(), \
        "the extension's sources changed since the committed build: run `make labext`"


def test_built_package_metadata_matches_sources():
    src = json.loads((EXT / "package.json").read_text())
    built = json.loads((BUILT / "package.json").read_text())
    py = tomllib.loads((EXT / "pyproject.toml").read_text())["project"]
    assert built["name"] == src["name"] == NAME
    assert built["version"] == src["version"] == py["version"]
    assert built["jupyterlab"]["_build"]["mimeExtension"] == "./mimeExtension"
    entry = BUILT / built["jupyterlab"]["_build"]["load"]
    assert entry.is_file()
    # the renderer's code ships in the chunks next to remoteEntry; one of them names the mime type
    chunks = [p.read_text() for p in (BUILT / "static").glob("*.js")]
    assert any(MIME in c for c in chunks)
    assert sum(p.stat().st_size for p in BUILT.rglob("*")) < 200_000  # committed assets stay small


def test_installed_copy_is_the_committed_build():
    from jupyter_core.paths import jupyter_path
    dirs = [Path(d) / NAME for d in jupyter_path("labextensions") if (Path(d) / NAME).is_dir()]
    assert dirs, "the extension is not installed: run `make install`"
    installed = dirs[0]
    for f in sorted((BUILT / "static").iterdir()):
        assert (installed / "static" / f.name).read_bytes() == f.read_bytes(), \
            f"installed {f.name} differs from the committed build: run `make install`"
    assert json.loads((installed / "install.json").read_text())["packageName"] == \
        "nki_workbench_labext"


def test_mime_type_agrees_everywhere():
    pkg = _load(EXT / "nki_workbench_labext" / "__init__.py", "nki_workbench_labext_src")
    assert pkg.MIME_TYPE == MIME
    assert f"'{MIME}'" in (EXT / "src" / "index.ts").read_text()
    assert f"`{MIME}`" in (ROOT / "docs" / "mime.md").read_text()
    assert pkg._jupyter_labextension_paths() == [{"src": "labextension", "dest": NAME}]
