"""Browser check on a Colab-like stack: classic Notebook 6.5 with ipywidgets 7 in headless Chromium.

Colab's front end is not JupyterLab: it renders ipywidgets 7, like classic Notebook. This test opens a
notebook with a live picture in classic Notebook served from the Colab-like environment that
``scripts/colab_stack.py`` builds (``make test`` runs it there, with ``E2E_CLASSIC_VENV`` set), runs all
cells, checks that no cell failed, and moves a control of every live picture (a slider with the keyboard, or a
toggle button) and checks that the picture changes (a new PNG behind it). It does so with the kernel sending
pictures as binary buffers (transport "image"), then, after telling the kernel ATTENTION_COURSE_LIVE_TRANSPORT=text
and running the cells with live pictures again, as text only (transport "text", what Colab gets): the same notebook
as the JupyterLab text-transport check. Without ``E2E_CLASSIC_VENV`` it is skipped.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from .conftest import (CHROMIUM, CHROMIUM_ARGS, TEXT_TRANSPORT_CODE, TRANSPORT_VARIABLE, _free_port, serve_jupyter,
                       transport_notebook)

pytestmark = pytest.mark.e2e

VENV = os.environ.get("E2E_CLASSIC_VENV")
RUN_ALL_TIMEOUT_MS = 180_000
PICTURE_TIMEOUT_MS = 5_000

# Every non-empty code cell has run (a number in its prompt), or one of them failed.
RUN_ALL_DONE = """() => {
  if (!window.Jupyter || !Jupyter.notebook || !Jupyter.notebook.kernel) return false;
  if (document.querySelector('.output_error')) return true;
  return Jupyter.notebook.get_cells().every(c => c.cell_type !== 'code' || c.get_text().trim() === ''
                                                 || typeof c.input_prompt_number === 'number');
}"""
# The <img> a live picture shows now (transport "image": the element itself; "text": inside an HTML widget).
CURRENT_IMG = "const current = (el) => el.tagName === 'IMG' ? el : el.querySelector('img');"
IMAGE_DIGEST = """async (el) => {
  %s
  const img = current(el);
  const bytes = await (await fetch(img.src)).arrayBuffer();
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return [Array.from(new Uint8Array(digest), b => b.toString(16).padStart(2, '0')).join(''),
          img.src.split(':', 1)[0]];
}""" % CURRENT_IMG
CURRENT_SRC = "(el) => { %s const img = current(el); return img ? img.src : null; }" % CURRENT_IMG


@pytest.fixture(scope="module")
def classic_server(e2e_tmp):
    """Classic Notebook from the Colab-like stack; its kernels send live pictures as binary buffers until told
    otherwise."""
    if not VENV:
        pytest.skip("E2E_CLASSIC_VENV is not set: `make test` (scripts/colab_stack.py) sets it to its Colab-like stack")
    jupyter = Path(VENV) / "bin" / "jupyter"
    if not jupyter.exists():
        pytest.fail(f"no jupyter in {VENV}")
    root = e2e_tmp / "classic"
    shutil.copytree(Path(__file__).resolve().parents[2] / "notebooks", root,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    env = {**os.environ, TRANSPORT_VARIABLE: "image"}
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR"):
        (e2e_tmp / f"classic-{name.lower()}").mkdir(exist_ok=True)
        env[name] = str(e2e_tmp / f"classic-{name.lower()}")
    env.pop("JUPYTER_PATH", None)  # the stack's own kernel (python3 of that environment)
    token, port = secrets.token_hex(24), _free_port()
    url = f"http://127.0.0.1:{port}"
    log = e2e_tmp / "classic-notebook.log"
    command = [str(jupyter), "notebook", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
               "--port-retries=0", f"--NotebookApp.token={token}", f"--notebook-dir={root}"]
    with serve_jupyter(command, root, env, log, url, token, timeout_s=60):
        yield url, token, root, log


# Tell the kernel to send live pictures as text from now on (conftest.TEXT_TRANSPORT_CODE), then run again the
# cells whose outputs hold a live picture; returns how many.
RERUN_WITH_TEXT_TRANSPORT = """(code) => {
  Jupyter.notebook.kernel.execute(code, {}, {silent: true, store_history: false});
  const live = Jupyter.notebook.get_cells().filter(c => c.element[0].querySelector('.course-live-picture'));
  live.forEach(c => c.execute());
  return live.length;
}"""


def test_classic_notebook_with_ipywidgets_7_moves_every_picture(classic_server, screenshot_dir):
    from playwright.sync_api import sync_playwright

    url, token, root, log = classic_server
    notebook = transport_notebook(root)
    versions = subprocess.run([str(Path(VENV) / "bin" / "python"), "-c",
                               "import ipywidgets, notebook, matplotlib; print(ipywidgets.__version__, "
                               "notebook.__version__, matplotlib.__version__)"],
                              capture_output=True, text=True, check=True).stdout.split()
    print(f"\n[e2e] classic Notebook {versions[1]}, ipywidgets {versions[0]}, matplotlib {versions[2]}: "
          f"{notebook.name}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        console_errors = []
        page.on("console", lambda message: message.type == "error" and console_errors.append(message.text))
        try:
            page.goto(f"{url}/notebooks/{quote(notebook.name)}?token={token}")
            page.wait_for_function("() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel "
                                   "&& Jupyter.notebook.kernel.is_connected()", timeout=60_000)
            started = time.monotonic()
            page.locator("#celllink").click()
            page.locator("#run_all_cells > a").click()
            page.wait_for_function(RUN_ALL_DONE, timeout=RUN_ALL_TIMEOUT_MS, polling=200)
            page.screenshot(path=str(screenshot_dir / "classic-image-1-run-all.png"))
            print(f"[e2e]   Run All finished in {time.monotonic() - started:.1f} s")
            _move_a_control_of_every_picture(page, "image")
            page.screenshot(path=str(screenshot_dir / "classic-image-2-pictures-moved.png"))

            rerun = page.evaluate(RERUN_WITH_TEXT_TRANSPORT, TEXT_TRANSPORT_CODE)
            page.wait_for_function(f"() => {{ {CURRENT_IMG} const pictures = Array.from(document.querySelectorAll("
                                   "'.widget-vbox > .course-live-picture')); return pictures.length > 0 && "
                                   "pictures.every(el => el.tagName === 'DIV' && current(el) && current(el).src) "
                                   "&& !Jupyter.notebook.kernel_busy; }", timeout=RUN_ALL_TIMEOUT_MS, polling=200)
            print(f"[e2e]   kernel told {TRANSPORT_VARIABLE}=text; {rerun} cell(s) with live pictures run again")
            page.screenshot(path=str(screenshot_dir / "classic-text-1-rerun.png"))
            _move_a_control_of_every_picture(page, "text")
            page.screenshot(path=str(screenshot_dir / "classic-text-2-pictures-moved.png"))
        finally:
            (screenshot_dir / "classic-page.html").write_text(page.content(), encoding="utf-8")
            for text in console_errors[:10]:
                print(f"[e2e]   browser console error: {text[:300]}")
            browser.close()


def _move_a_control_of_every_picture(page, transport: str) -> None:
    """No failed cell, no widget error; then move one control of each live picture: a new picture, by
    ``transport``."""
    errors = page.locator(".output_error")
    assert errors.count() == 0, f"a cell failed: {errors.first.inner_text()[:1500]}"
    assert "Error displaying widget" not in page.inner_text("body")
    figures = page.locator(".widget-vbox:has(> .course-live-picture)")
    figures.first.wait_for(state="visible", timeout=20_000)
    count = figures.count()
    assert count >= 1, "no live picture after Run All"
    for f in range(count):
        figure = figures.nth(f)
        picture = figure.locator(":scope > .course-live-picture")
        assert picture.evaluate("(el) => el.tagName.toLowerCase()") == (
            "img" if transport == "image" else "div"), f"figure #{f} is not drawn by the {transport} transport"
        figure.scroll_into_view_if_needed()
        before_src, (before, scheme) = picture.evaluate(CURRENT_SRC), picture.evaluate(IMAGE_DIGEST)
        assert scheme == ("blob" if transport == "image" else "data"), f"figure #{f}: a {scheme}: URL"
        handle = figure.locator(".ui-slider-handle, .noUi-handle, [role=slider]")
        if handle.count():
            handle.first.click()
            page.keyboard.press("ArrowRight")
            moved = "slider"
        else:
            figure.locator(".widget-toggle-buttons button:not(.mod-active)").first.click()
            moved = "toggle button"
        page.wait_for_function(f"([el, src]) => ({CURRENT_SRC})(el) !== src",
                               arg=[picture.element_handle(), before_src], timeout=PICTURE_TIMEOUT_MS)
        page.wait_for_timeout(300)  # let a second update from the click land
        after, _ = picture.evaluate(IMAGE_DIGEST)
        assert after != before, f"figure #{f}: the picture's bytes did not change after moving a {moved}"
        print(f"[e2e]   figure #{f}: {moved} moved, new picture ({transport} transport)")
