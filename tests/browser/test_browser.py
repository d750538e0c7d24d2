"""Real-browser test: JupyterLab + %%nki + the Inspector, and the panel explorer app.

Playwright for Python drives Debian's chromium (``/usr/bin/chromium``; never a downloaded
browser). ``make test`` installs chromium with apt when it is missing. Screenshots go to
``tests/artifacts/`` (git-ignored).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

from nki_workbench.notebook import plots
from nki_workbench.notebook.arguments import bind_arguments, parse_shapes

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium: apt-get install -y chromium "
                       "(make test does it)"),
    pytest.mark.timeout(280),
]

ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "artifacts")
TOKEN = "nkiw-browser-test"
BIN = os.path.dirname(sys.executable)

SETUP = """%load_ext nki_workbench
import numpy as np
rng = np.random.default_rng(0)
x = rng.standard_normal((256, 512)).astype(np.float32)
y = rng.standard_normal((256, 512)).astype(np.float32)"""

KERNEL = '''%%nki --args x,y --check "np.exp(a) + b"
from neuronxcc import nki
import neuronxcc.nki.language as nl

@nki.jit
def add_exp(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        u = nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], nl.exp(t) + u)
    return out'''


def _infeasible_png() -> bytes:
    from nki_workbench import examples
    from nki_workbench.notebook.explorer import Explorer
    mod = examples.load("matmul")
    args, kwargs = bind_arguments(mod.matmul_tiled, [], parse_shapes(mod.SHAPES))
    ex = Explorer(mod.matmul_tiled, args, mod.PARAMS, kwargs)
    trial = ex.evaluate(TILE_N=1024, TILE_M=64)
    assert not trial.feasible
    return ex.images(trial)[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc, timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not come up in {timeout} s")


def _notebook(path: str, sources=(SETUP, KERNEL)) -> None:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
              "outputs": [], "source": src} for i, src in enumerate(sources)]
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                      "language": "python"}}}
    with open(path, "w") as f:
        json.dump(nb, f)


BUILT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "extensions",
                     "nki_workbench_labext", "nki_workbench_labext", "labextension")


def _env(tmp: str) -> dict:
    env = dict(os.environ)
    # why: the lab serves this checkout's committed labext build (first on the path wins),
    # whatever copy `make install` last put in the venv
    labext = os.path.join(tmp, "jp", "labextensions", "nki-workbench-labext")
    shutil.copytree(BUILT, labext, dirs_exist_ok=True)
    with open(os.path.join(labext, "install.json"), "w") as f:
        json.dump({"packageManager": "python", "packageName": "nki_workbench_labext"}, f)
    env["JUPYTER_PATH"] = os.path.join(tmp, "jp") + os.pathsep + env.get("JUPYTER_PATH", "")
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    for var, sub in (("JUPYTER_CONFIG_DIR", "cfg"), ("JUPYTER_RUNTIME_DIR", "rt"),
                     ("IPYTHONDIR", "ipy")):
        env[var] = os.path.join(tmp, sub)
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def _stop(proc) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _launch(p):
    return p.chromium.launch(executable_path=CHROMIUM, args=[
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])


def _drag(page, handle, dx: float) -> None:
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx / 2, y, steps=5)
    page.mouse.move(x + dx, y, steps=5)
    page.mouse.up()


def _wait_changed(get, before, timeout_s: float = 90.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        now = get()
        if now and now != before:
            return now
        time.sleep(0.25)
    raise AssertionError("the image did not change")


# Inside the interactive timeline page: where the first `exp` bar is drawn, and the x range
_BAR_JS = """() => {
  const doc = Bokeh.documents[0];
  const fig = doc.get_model_by_name('nkiw-timeline');
  const src = doc.get_model_by_name('nkiw-events');
  const view = Bokeh.index.find_one(fig);
  const i = src.data.op.indexOf('exp');
  const r = view.el.getBoundingClientRect();
  const x = (src.data.start_us[i] + src.data.end_us[i]) / 2;
  return {x: r.left + view.frame.x_scale.compute(x),
          y: r.top + view.frame.y_scale.compute(src.data.row[i]),
          loc: src.data.loc[i], start: fig.x_range.start, end: fig.x_range.end};
}"""
_RANGE_JS = """() => { const f = Bokeh.documents[0].get_model_by_name('nkiw-timeline');
                       return [f.x_range.start, f.x_range.end]; }"""


def _kernel_frames(sent: list) -> list:
    # why: a widget round trip is a comm_msg / execute_request on the kernel websocket
    return [f for f in sent if isinstance(f, str) and ('"comm_msg"' in f or
                                                        '"execute_request"' in f)]


def _interactive_timeline(page, tabs, sent, editor_lines) -> dict:
    """Hover, zoom and click the Timeline tab's Bokeh view; returns what was measured."""
    tabs.filter(has_text="Timeline").click()
    iframe = page.locator("iframe.nkiw-interactive >> visible=true").first
    iframe.wait_for(timeout=60_000)
    frame = iframe.element_handle().content_frame()
    frame.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0 && "
                            "Bokeh.documents[0].get_model_by_name('nkiw-timeline')",
                            timeout=60_000)
    time.sleep(0.5)
    box = iframe.bounding_box()
    bar = frame.evaluate(_BAR_JS)
    x, y = box["x"] + bar["x"], box["y"] + bar["y"]
    page.mouse.move(x, y)
    values = frame.locator(".bk-tooltip-row-value")  # (inside Bokeh's shadow DOM)
    values.first.wait_for(timeout=10_000)
    text = "\n".join(values.all_inner_texts())
    file, _, line = bar["loc"].rpartition(":")
    assert "exp" in text and bar["loc"] in text, text
    assert editor_lines[int(line) - 1].strip() in text  # the hover shows the source line
    page.screenshot(path=os.path.join(ARTIFACTS, "lab_timeline_hover.png"))
    before = len(_kernel_frames(sent))
    t0 = time.monotonic()
    page.mouse.wheel(0, -400)
    frame.wait_for_function(f"() => {{ const r = ({_RANGE_JS})(); "
                            f"return r[1] - r[0] < {0.9 * (bar['end'] - bar['start'])}; }}",
                            timeout=10_000)
    zoom_s = time.monotonic() - t0
    zoomed = frame.evaluate(_RANGE_JS)
    time.sleep(1.0)
    assert len(_kernel_frames(sent)) == before  # zoomed in the browser: no kernel message
    bar2 = frame.evaluate(_BAR_JS)  # the bar moved with the zoom: find it again
    page.mouse.click(box["x"] + bar2["x"], box["y"] + bar2["y"])
    hl = frame.locator(".nkiw-hl").first
    hl.wait_for(timeout=10_000)
    assert int(hl.get_attribute("data-line")) == int(line)
    assert hl.inner_text().strip().endswith(editor_lines[int(line) - 1].strip())
    page.screenshot(path=os.path.join(ARTIFACTS, "lab_timeline_click.png"))
    return {"zoom_s": zoom_s, "range_before": [bar["start"], bar["end"]], "range_after": zoomed,
            "loc": bar["loc"]}


def test_jupyterlab_inspector_renders_and_timeline_slider_redraws():
    os.makedirs(ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="nkiw-lab-")
    nbdir = os.path.join(tmp, "nbs")
    os.makedirs(nbdir)
    _notebook(os.path.join(nbdir, "inspector.ipynb"))
    port = _free_port()
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={nbdir}", "--allow-root",
         "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.workspaces_dir={os.path.join(tmp, 'ws')}"],
        env=_env(tmp), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", lab)
        with playwright.sync_playwright() as p:
            browser = _launch(p)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            sent: list = []
            page.on("websocket", lambda ws: ws.on("framesent", lambda f: sent.append(f)))
            page.goto(f"http://127.0.0.1:{port}/lab/tree/inspector.ipynb?token={TOKEN}")
            page.wait_for_selector(".jp-Notebook", timeout=90_000)
            page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=90_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            tabs = page.locator(".jp-OutputArea-output .widget-tab .lm-TabBar-tab")
            tabs.filter(has_text="HLO").wait_for(timeout=120_000)
            titles = [t.strip() for t in tabs.all_inner_texts()]
            assert titles == ["Summary", "Config", "IR", "SBUF", "PSUM", "Timeline", "HLO"]
            assert "max error" in page.locator(".widget-tab").inner_text()
            page.screenshot(path=os.path.join(ARTIFACTS, "lab_inspector.png"))

            tabs.filter(has_text="IR").click()
            page.locator(".nkiw-ir >> visible=true").wait_for(timeout=30_000)
            ir = page.locator(".nkiw-ir >> visible=true").inner_text()
            # the IR names the kernel's lines as the editor numbers them (%%nki is line 1)
            editor = KERNEL.splitlines()
            store = next(n for n, t in enumerate(editor, 1) if "nl.store" in t)
            assert f"<cell [2]>:{store}" in ir
            for title in ("SBUF", "PSUM"):
                tabs.filter(has_text=title).click()
                page.locator("iframe.nkiw-interactive >> visible=true").first.wait_for(
                    timeout=60_000)
            measured = _interactive_timeline(page, tabs, sent, editor)
            with open(os.path.join(ARTIFACTS, "lab_timeline_zoom.json"), "w") as f:
                json.dump(measured, f, indent=1)
            page.get_by_role("button", name="static").first.click()
            img = page.locator(".widget-tab img.widget-image >> visible=true").first
            img.wait_for(timeout=30_000)
            before_src = img.get_attribute("src")
            before_png = img.screenshot(path=os.path.join(ARTIFACTS, "lab_timeline_before.png"))
            handles = page.locator(".widget-tab .noUi-handle >> visible=true")
            assert handles.count() == 2  # the zoom window's two ends
            slider = page.locator(".widget-tab .noUi-target >> visible=true").first
            _drag(page, handles.nth(1), -0.5 * slider.bounding_box()["width"])
            _wait_changed(lambda: img.get_attribute("src"), before_src)
            time.sleep(0.5)
            after_png = img.screenshot(path=os.path.join(ARTIFACTS, "lab_timeline_after.png"))
            assert after_png != before_png
            page.screenshot(path=os.path.join(ARTIFACTS, "lab_timeline_zoomed.png"))
            browser.close()
    finally:
        _stop(lab)
        shutil.rmtree(tmp, ignore_errors=True)


FAILED = KERNEL.replace('--check "np.exp(a) + b"', '--check "np.exp(a) - b" --out bad')


def _start_lab(tmp: str, nbdir: str):
    port = _free_port()
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={nbdir}", "--allow-root",
         "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.workspaces_dir={os.path.join(tmp, 'ws')}"],
        env=_env(tmp), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return lab, port


def test_mime_renderer_shows_the_widgets_tabs_and_failed_check():
    """The JupyterLab mime renderer draws the Inspector model: the widget's tabs, in order."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="nkiw-mime-")
    nbdir = os.path.join(tmp, "nbs")
    os.makedirs(nbdir)
    _notebook(os.path.join(nbdir, "mime.ipynb"), (SETUP, FAILED, "bad"))
    lab, port = _start_lab(tmp, nbdir)
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", lab)
        with playwright.sync_playwright() as p:
            browser = _launch(p)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/lab/tree/mime.ipynb?token={TOKEN}")
            page.wait_for_selector(".jp-Notebook", timeout=90_000)
            page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=90_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            wtabs = page.locator(".jp-OutputArea-output .widget-tab .lm-TabBar-tab")
            mtabs = page.locator(".jp-NkiInspection .jp-NkiInspection-tab")
            wtabs.filter(has_text="HLO").wait_for(timeout=120_000)
            mtabs.filter(has_text="HLO").wait_for(timeout=120_000)
            widget_titles = [t.strip() for t in wtabs.all_inner_texts()]
            mime_titles = [t.strip() for t in mtabs.all_inner_texts()]
            assert widget_titles == mime_titles == [
                "Summary \u2717 check failed", "Config", "IR", "SBUF", "PSUM", "Timeline", "HLO"]
            # the failed-check marker: the tab in the error colour, the banner first in Summary
            assert mtabs.first.evaluate("e => getComputedStyle(e).color") == "rgb(176, 0, 32)"
            banner = page.locator(".jp-NkiInspection .nkiw-check-failed")
            assert "check failed" in banner.inner_text()
            assert banner.evaluate("e => getComputedStyle(e).backgroundColor") == \
                "rgb(253, 236, 234)"
            page.screenshot(path=os.path.join(ARTIFACTS, "lab_mime_inspector.png"))
            # the IR keeps the widget's colouring (sanitized inline styles) and cell lines
            mtabs.filter(has_text="IR").click()
            ir = page.locator(".jp-NkiInspection .nkiw-ir >> visible=true")
            assert "<cell [2]>:" in ir.inner_text()
            assert ir.locator("span[style*='color']").count() > 10
            for title in ("SBUF", "Timeline"):  # pictures drawn from the JSON images
                mtabs.filter(has_text=title).click()
                img = page.locator(".jp-NkiInspection img.jp-NkiInspection-image >> visible=true")
                img.wait_for(timeout=30_000)
                assert img.evaluate("e => e.naturalWidth") > 100
            browser.close()
    finally:
        _stop(lab)
        shutil.rmtree(tmp, ignore_errors=True)


def test_panel_explorer_app_slider_reevaluates():
    os.makedirs(ARTIFACTS, exist_ok=True)
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="nkiw-panel-")
    app = subprocess.Popen([sys.executable, "-m", "nki_workbench.cli", "explore", "matmul",
                            "--port", str(port)], env=_env(tmp), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/", app)
        with playwright.sync_playwright() as p:
            browser = _launch(p)
            page = browser.new_page(viewport={"width": 1300, "height": 1100})
            failed = []
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.goto(f"http://127.0.0.1:{port}/")
            handle = page.locator(".noUi-handle").first
            handle.wait_for(timeout=90_000)
            img = page.locator("img[src^='data:image/png']").first
            img.wait_for(timeout=60_000)
            before = img.get_attribute("src")
            page.screenshot(path=os.path.join(ARTIFACTS, "panel_explorer_before.png"))
            track = page.locator(".noUi-target").first.bounding_box()
            _drag(page, handle, track["width"])  # TILE_N to its largest value (1024)
            _wait_changed(lambda: img.get_attribute("src"), before)
            # locators pierce Bokeh's shadow DOM (page.content() does not)
            status = page.get_by_text("infeasible").first
            status.wait_for(timeout=60_000)
            assert "err_size_of_dimension_exceed_arch_limit" in status.inner_text()
            # the settings table gains the infeasible row (in red) with the same update
            page.locator("table.nkiw-trials td", has_text="err_size_of_dimension").first \
                .wait_for(timeout=60_000)
            # and the image is the explorer's own (deterministic) infeasible-setting PNG
            expected = plots.png_data_uri(_infeasible_png())
            _wait_changed(lambda: img.get_attribute("src") == expected, False, 30.0)
            page.screenshot(path=os.path.join(ARTIFACTS, "panel_explorer_after.png"))
            assert not [u for u in failed if "127.0.0.1" not in u], failed
            browser.close()
    finally:
        _stop(app)
        shutil.rmtree(tmp, ignore_errors=True)
