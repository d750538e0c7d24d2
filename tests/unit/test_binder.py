"""binder/ stays consistent with pyproject.toml, the extension and the tutorials it opens."""

import os
import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"


def _key(req: Requirement):
    return canonicalize_name(req.name), tuple(sorted(req.extras)), str(req.specifier), \
        str(req.marker or "")


def _binder_lines():
    lines = [ln.split("#", 1)[0].strip()
             for ln in (BINDER / "requirements.txt").read_text().splitlines()]
    return [ln for ln in lines if ln]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_requirements_match_pyproject_dependencies():
    project = _pyproject()
    expected = [Requirement(r) for r in project["dependencies"]]
    expected += [Requirement(r) for r in project["optional-dependencies"]["torch"]]
    listed = [Requirement(ln) for ln in _binder_lines() if not ln.startswith(("-", "."))]
    only_binder = sorted(set(map(str, listed)) - set(map(str, expected)))
    only_pyproject = sorted(set(map(str, expected)) - set(map(str, listed)))
    assert sorted(map(_key, listed)) == sorted(map(_key, expected)), (
        "binder/requirements.txt differs from pyproject.toml ([project] dependencies + the torch "
        f"extra): only in binder {only_binder}, only in pyproject {only_pyproject}")
    assert len(listed) == len({_key(r)[0] for r in listed}), "a requirement is listed twice"


def test_requirements_install_the_repo_itself():
    lines = _binder_lines()
    # with a binder/ folder repo2docker does not install the repository: this line must
    assert "-e ." in lines
    assert lines.index("-e .") == len(lines) - 1, "`-e .` goes last (after its pinned deps)"
    # the only index option is PyTorch's CPU wheels (anything else would be a surprise)
    opts = [ln for ln in lines if ln.startswith("--")]
    assert opts == ["--extra-index-url https://download.pytorch.org/whl/cpu"]


def test_runtime_satisfies_requires_python():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    m = re.fullmatch(r"python-(\d+)\.(\d+)", runtime)
    assert m, f"runtime.txt must read python-X.Y, got {runtime!r}"
    assert SpecifierSet(_pyproject()["requires-python"]).contains(f"{m[1]}.{m[2]}.0")


def test_post_build_installs_the_extension():
    post = BINDER / "postBuild"
    assert os.access(post, os.X_OK)
    text = post.read_text()
    assert text.startswith("#!/bin/bash\n") and "set -euo pipefail" in text
    paths = re.findall(r"pip install [^\n]*?(\./\S+)", text)
    assert paths == ["./extensions/nki_workbench_labext"]
    assert (ROOT / paths[0] / "pyproject.toml").is_file()
    assert (ROOT / paths[0] / "nki_workbench_labext" / "labextension" / "package.json").is_file()
    assert subprocess.run(["bash", "-n", str(post)]).returncode == 0


def test_start_execs_the_command():
    start = BINDER / "start"
    assert os.access(start, os.X_OK)
    lines = [ln for ln in start.read_text().splitlines() if ln.strip()]
    assert lines[0] == "#!/bin/bash" and lines[-1] == 'exec "$@"'
    res = subprocess.run(["bash", str(start), "bash", "-c", "echo $OPENBLAS_NUM_THREADS"],
                         capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert res.returncode == 0 and res.stdout == "1\n"


def test_readme_binder_link_opens_the_quickstart():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"https://mybinder\.org/v2/gh/[^)\s]+", readme)
    assert links, "README has no mybinder link"
    for link in links:
        m = re.search(r"urlpath=lab/tree/(notebooks/[\w.-]+\.ipynb)$", link)
        assert m, f"binder link does not open a notebook in JupyterLab: {link}"
        assert (ROOT / m[1]).is_file(), f"binder link names a missing notebook: {m[1]}"
    assert any(link.endswith("notebooks/01_quickstart.ipynb") for link in links)
