"""The README's picture: JupyterLab at a laptop window size, one notebook's LiveFigure with its slider moved.

Runs under ``make screenshot`` (which sets E2E_README_SCREENSHOT=docs/course-screenshot.png and writes it into the
repository) and ``make e2e``; ``make test`` skips it to stay within its time budget. Always saved as
``readme-screenshot.png`` among the test artifacts.
E2E_README_NOTEBOOK picks the notebook (default: 02_softmax_and_context_vectors.ipynb if present, else the
first notebook with a slider).
"""

from __future__ import annotations

import os
import shutil

import pytest

from .conftest import REPO, live_figure_notebooks
from .test_notebooks_in_lab import (
    LIVE_FIGURE, WAIT_SETTLED, _close_page, _open_and_run_all, _problems_in_outputs, _cells_allowed_to_raise,
    _stored_live_figure_outputs, _wait_for_live_figures)

pytestmark = pytest.mark.e2e

WINDOW = {"width": 1280, "height": 800}
PREFERRED = "02_softmax_and_context_vectors.ipynb"
SLIDER_WORDS = ("temperature", "step", "factor")  # the slider to move, if the figure has one of these


def _pick_notebook():
    candidates = live_figure_notebooks(with_slider=True)
    wanted = os.environ.get("E2E_README_NOTEBOOK", PREFERRED)
    chosen = [p for p in candidates if p.name == wanted] or candidates
    if not chosen:
        pytest.skip("no notebook with a LiveFigure and a slider")
    return chosen[0]


def test_readme_screenshot(lab_server, lab_browser, screenshot_dir):
    if not (os.environ.get("E2E_README_SCREENSHOT") or os.environ.get("E2E_BURST") == "all"):
        pytest.skip("the README picture is made by `make screenshot` (and checked by `make e2e`), not by `make test`")
    notebook = _pick_notebook()
    page = lab_browser.new_page()
    page.set_viewport_size(WINDOW)
    console_errors: list[str] = []
    page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
    page.set_default_timeout(15_000)
    try:
        panel = _open_and_run_all(page, lab_server, notebook.name, screenshot_dir, "readme")
        problems = _problems_in_outputs(panel, _cells_allowed_to_raise(lab_server.root / notebook.name))
        assert not problems, "\n".join(problems)
        count = _wait_for_live_figures(panel, _stored_live_figure_outputs(lab_server.root / notebook.name))
        figures = [panel.locator(LIVE_FIGURE).nth(i) for i in range(count)]
        figure = next(f for f in figures if f.locator(".widget-hslider").count())
        sliders = figure.locator(".widget-hslider").all()
        labels = [s.locator(".widget-label").first.inner_text().strip().lower() for s in sliders]
        slider = next((s for s, label in zip(sliders, labels) if any(w in label for w in SLIDER_WORDS)), sliders[0])
        if page.locator("#jp-left-stack:visible").count():  # close the file browser: more room for the notebook
            page.keyboard.press("Escape")
            page.keyboard.press("Control+b")  # View > Show Left Sidebar (toggle)
            page.wait_for_timeout(300)
        # The whole figure at the bottom of the window, the end of the code that built it above.
        figure.evaluate("el => el.scrollIntoView({block: 'end'})")
        page.wait_for_timeout(200)
        image = figure.locator(":scope > img.course-live-picture")
        handle = slider.locator(".noUi-handle").first
        handle.focus()
        for _ in range(4):
            page.keyboard.press("ArrowLeft")
        assert image.evaluate(WAIT_SETTLED, [400, 10_000]), "picture kept changing"
        box, window = figure.bounding_box(), page.viewport_size
        assert box["y"] >= 0 and box["y"] + box["height"] <= window["height"], f"figure not fully in view: {box}"
        page.mouse.move(0, 0)
        shot = screenshot_dir / "readme-screenshot.png"
        page.screenshot(path=str(shot))
        print(f"\n[e2e] README screenshot of {notebook.name} at {WINDOW['width']}x{WINDOW['height']}: {shot}")
        target = os.environ.get("E2E_README_SCREENSHOT")
        if target:
            target_path = (REPO / target).resolve()
            target_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, target_path)
            print(f"[e2e] copied to {target_path}")
    finally:
        _close_page(page, lab_server, console_errors)
