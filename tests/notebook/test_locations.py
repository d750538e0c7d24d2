"""Locations of a ``%%nki`` kernel read as the editor shows them: ``<cell [N]>:LINE``."""

import re

from nki_workbench.notebook.magics import cell_filename

# the %%nki line is line 1 of the cell; the kernel's lines below are numbered as an editor does
CELL = '''%%nki --args x,y --quiet --out located

from neuronxcc import nki
import neuronxcc.nki.language as nl

@nki.jit
def located_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        u = nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], nl.exp(t) + u)
    return out
'''


def _editor_line(fragment: str) -> int:
    return next(n for n, text in enumerate(CELL.splitlines(), 1) if fragment in text)


def test_ir_timeline_and_occupancy_locations_are_the_editors_lines(ip):
    count = ip.execution_count
    res = ip.run_cell(CELL, store_history=True)
    assert res.success, res.error_in_exec
    insp = ip.user_ns["located"]
    # a shell that ran other cells as In [count] adds a suffix (<cell [1] #2>): as named
    name = re.search(rf"<cell \[{count}\](?: #\d+)?>", insp.ir).group()
    want = {_editor_line("nl.ndarray"), _editor_line("affine_range"),
            _editor_line("nl.load(a"), _editor_line("nl.load(b"), _editor_line("nl.store")}
    ir_lines = {int(m) for m in re.findall(re.escape(name) + r":(\d+)", insp.ir)}
    assert ir_lines == want == {8, 9, 10, 11, 12}
    events = insp.timeline.events
    assert {e.loc for e in events} == {f"{name}:{n}" for n in (10, 11, 12)}
    assert [e.loc for e in events if e.op == "exp"] == [f"{name}:12"] * 2
    sbuf = insp.memory.sbuf
    locs = {a.loc for a in sbuf.allocations}
    assert locs == {f"{name}:10", f"{name}:11", f"{name}:12"}
    assert f"{name}:10" in sbuf.text()
    crit = insp.critical_path()
    assert crit and all(step.loc.startswith(name) for step in crit)


def test_perfetto_locations_are_the_editors_lines(ip, tmp_path):
    import json
    count = ip.execution_count
    assert ip.run_cell(CELL, store_history=True).success
    path = tmp_path / "t.json"
    ip.user_ns["located"].to_perfetto(str(path))
    locs = {ev["args"].get("loc") for ev in json.loads(path.read_text())["traceEvents"]
            if ev.get("ph") == "X"}
    name = re.search(rf"<cell \[{count}\](?: #\d+)?>", ip.user_ns["located"].ir).group()
    assert {f"{name}:{n}" for n in (10, 11, 12)} <= locs


def test_a_rerun_with_the_same_count_keeps_each_cells_source():
    import linecache
    first = cell_filename(999, ["a\n"])
    linecache.cache[first] = (2, None, ["a\n"], first)
    try:
        assert first == "<cell [999]>"
        assert cell_filename(999, ["a\n"]) == first
        assert cell_filename(999, ["b\n"]) == "<cell [999] #2>"
    finally:
        del linecache.cache[first]


WARNING_CELL = '''%%nki --args x,y --quiet --out warned
import warnings
from neuronxcc import nki
import neuronxcc.nki.language as nl

@nki.jit
def warned_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    warnings.warn("from the kernel body")
    for i in nl.affine_range(a.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], nl.load(a[i * 128:(i + 1) * 128, :]))
    return out
'''


def test_warnings_name_the_cell_and_the_fallback_shows_once(ip):
    import warnings

    from nki_workbench._src import errors
    from nki_workbench._src.encode import FALLBACK_WARNING
    errors.SHOWN_ONCE.discard(FALLBACK_WARNING)
    shown = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert ip.run_cell(WARNING_CELL, store_history=True).success
        shown.append([(str(w.message), w.filename, w.lineno) for w in caught])
    name = re.search(r"<cell \[\d+\](?: #\d+)?>", ip.user_ns["warned"].ir).group()
    first, second = shown
    # the fallback: once per process, at the kernel (its @nki.jit line); the kernel's own: its line
    assert (FALLBACK_WARNING, first[0][1], 6) in first
    assert ("from the kernel body", first[0][1], 9) in first
    assert first[0][1].startswith("<cell [")
    assert [m for m, _, _ in second] == ["from the kernel body"]
    assert second[0][1] == name
    summary = "\n".join(ip.user_ns["warned"].summary_lines())
    assert "target: trn1 is the fallback" in summary


PLAIN_CELL = '''from neuronxcc import nki
import neuronxcc.nki.language as nl

@nki.jit
def plain_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :]) + nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], t)
    return out
'''


def test_a_kernel_in_an_ordinary_cell_is_named_by_its_count(ip):
    from nki_workbench import inspect
    from nki_workbench.notebook import interactive
    count = ip.execution_count
    assert ip.run_cell(PLAIN_CELL, store_history=True).success
    insp = inspect(ip.user_ns["plain_add"], ip.user_ns["x"], ip.user_ns["y"])
    assert f"<cell [{count}]>:8" in insp.ir and f"<cell [{count}]>:9" in insp.ir
    assert "ipykernel" not in insp.ir and "ipython-input" not in insp.ir
    cols = interactive.event_rows(insp.timeline)
    store = cols["op"].index("store")
    assert cols["loc"][store] == f"<cell [{count}]>:9"
    assert cols["src"][store] == "nl.store(out[i * 128:(i + 1) * 128, :], t)"


def test_warnings_point_at_the_user_line_past_library_frames(monkeypatch):
    # a warning raised under a library callback (panel, IPython: site-packages) names the
    # user's line that called into it, not the library's
    import inspect
    import warnings as W

    from nki_workbench._src.encode import FALLBACK_WARNING, PLATFORM_ENV, resolve_platform_target
    monkeypatch.delenv(PLATFORM_ENV, raising=False)
    monkeypatch.setattr("nki_workbench._src.encode._detected", lambda: None)
    lib = {}
    exec(compile("def callback(fn):\n    return fn()\n", "/x/site-packages/fakelib/cb.py",
                 "exec"), lib)
    with W.catch_warnings(record=True) as caught:
        W.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        lib["callback"](resolve_platform_target)
    hits = [w for w in caught if str(w.message) == FALLBACK_WARNING]
    assert [(w.filename, w.lineno) for w in hits] == [(__file__, line)]
