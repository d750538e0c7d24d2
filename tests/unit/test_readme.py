"""The README's Python examples run as written (quick example + API overview snippets)."""

import os
import re
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _blocks(section: str):
    text = (ROOT / "README.md").read_text()
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, re.S)


def test_readme_examples_run(tmp_path, capsys):
    code = "\n".join(_blocks("Quick example") + _blocks("Compiled simulation") +
                     _blocks("API overview"))
    assert "tensor_add" in code and "inspect" in code
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "for i in affine_range(0, 2, 1):" in out      # the IR text: loops stay loops
    assert "[4. 4. 4. 4.]" in out                          # the JAX example
    assert (tmp_path / "tensor_add.json").exists()
