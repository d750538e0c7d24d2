"""Hash of the extension's build inputs, stored next to the committed build.

``python build_stamp.py --write`` (run by ``make labext`` after a build) records it in
``nki_workbench_labext/labextension/build_inputs.sha256``; ``--check`` (and the unit test) fails
when the sources changed since the committed assets were built.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
INPUTS = ("package.json", "tsconfig.json", "yarn.lock", "src/index.ts", "style/index.css")
STAMP = HERE / "nki_workbench_labext" / "labextension" / "build_inputs.sha256"


def inputs_hash() -> str:
    """The sha256 over the build inputs (name and bytes, line endings normalised)."""
    h = hashlib.sha256()
    for name in INPUTS:
        h.update(name.encode() + b"\0")
        h.update((HERE / name).read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return h.hexdigest()


def main(argv: list) -> int:
    """``--write`` records the hash, ``--check`` compares it (exit 1 when stale)."""
    if argv == ["--write"]:
        STAMP.write_text(inputs_hash() + "\n")
        return 0
    if argv == ["--check"]:
        stored = STAMP.read_text().strip() if STAMP.exists() else "(none)"
        if stored != inputs_hash():
            print(f"{STAMP} is stale: rebuild with `make labext`", file=sys.stderr)
            return 1
        return 0
    print("usage: build_stamp.py --write | --check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
