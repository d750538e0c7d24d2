"""Regenerate ``docs/img/*.png``: the interactive timeline, memory map and compare view.

Run from the repository root: ``.venv/bin/python docs/make_screenshots.py``. The pages are the
workbench's own interactive views (``nki_workbench.notebook.interactive``) of the bundled tiled
matmul, drawn by Debian's chromium through Playwright (no downloaded browser); the timeline shot
hovers over a matmul bar so its tooltip shows.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile

import nki_workbench as nw
import nki_workbench.nki.language as nl
import nki_workbench.nki.typing as nt
from nki_workbench import examples
from nki_workbench.notebook import interactive

OUT = pathlib.Path(__file__).resolve().parent / "img"
SPECS = (nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16])

_HOVER_JS = """() => {
  const doc = Bokeh.documents[0];
  const fig = doc.get_model_by_name('nkiw-timeline');
  const src = doc.get_model_by_name('nkiw-events');
  const view = Bokeh.index.find_one(fig);
  const i = src.data.op.lastIndexOf('matmul');
  const r = view.el.getBoundingClientRect();
  return {x: r.left + view.frame.x_scale.compute((src.data.start_us[i] + src.data.end_us[i]) / 2),
          y: r.top + view.frame.y_scale.compute(src.data.row[i])};
}"""


def _pages() -> dict:
    mm = examples.load("matmul")
    a = nw.inspect(mm.matmul_tiled, *SPECS, TILE_N=128, platform_target="trn2")
    b = nw.inspect(mm.matmul_tiled, *SPECS, TILE_N=512, platform_target="trn2")
    return {"timeline": interactive.timeline_page(b.timeline)[0],
            "memory_map": interactive.memory_page(b.memory.sbuf)[0],
            "compare": nw.compare(a, b, labels=("tile128", "tile512")).timelines_html()}


def main() -> None:
    """Draw every picture into docs/img with headless Chromium."""
    from playwright.sync_api import sync_playwright
    OUT.mkdir(exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="nkiw-shots-"))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=[
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            for name, page_html in _pages().items():
                path = tmp / f"{name}.html"
                path.write_text(page_html, encoding="utf-8")
                page = browser.new_page(viewport={"width": 1020, "height": 700})
                page.goto(path.as_uri())
                page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0")
                page.wait_for_timeout(800)
                if name == "timeline":
                    at = page.evaluate(_HOVER_JS)
                    page.mouse.move(at["x"], at["y"])
                    page.wait_for_timeout(400)
                height = page.evaluate("() => document.body.scrollHeight")
                page.set_viewport_size({"width": 1020, "height": min(max(height, 300), 1100)})
                page.screenshot(path=str(OUT / f"{name}.png"))
                print(f"wrote {OUT / f'{name}.png'}")
            browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
