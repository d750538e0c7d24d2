"""Source lines behind IR locations (``file:line``), for the views' hover and click-to-source.

Locations keep a file's last two path parts (``examples/matmul.py:25``) or a cell's name
(``<cell [3]>:12``); :func:`full_path` finds the ``linecache`` entry they came from. Files of
ordinary notebook cells are registered in :data:`CELL_FILES` by the magics' cell namer.
"""

from __future__ import annotations

import linecache

__all__ = ["CELL_FILES", "full_path", "source_line", "source_listing"]

CELL_FILES: dict = {}
"""``{"<cell [N]>": file}``: the file IPython compiled cell ``In [N]`` under (plain cells)."""


def full_path(short: str) -> str:
    """The linecache key of a location's file."""
    if short in linecache.cache:
        return short
    if short in CELL_FILES:
        return CELL_FILES[short]
    for key in list(linecache.cache):
        if key.replace("\\", "/").endswith("/" + short):
            return key
    return short


def source_line(loc: str | None) -> str:
    """The stripped source text at ``file:line`` (``""`` when unknown)."""
    if not loc or ":" not in loc:
        return ""
    fname, _, line = loc.rpartition(":")
    try:
        return linecache.getline(full_path(fname), int(line)).strip()
    except ValueError:
        return ""


def source_listing(locs) -> dict:
    """``{file: [lines]}`` of the files the locations name (for click-to-source)."""
    out = {}
    for loc in locs:
        if not loc or ":" not in loc:
            continue
        fname = loc.rpartition(":")[0]
        if fname in out:
            continue
        lines = linecache.getlines(full_path(fname))
        if lines:
            out[fname] = [ln.rstrip("\n") for ln in lines]
    return out
