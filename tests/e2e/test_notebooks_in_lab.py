"""Browser check: open every notebook in JupyterLab, Run All, move every control.

Each notebook must run without a traceback or "Error displaying widget", show at least one LiveFigure
with a slider, and for every LiveFigure (a ``.widget-vbox`` holding controls and a ``.course-live-picture``)
and every slider / toggle-button group in it, the picture must change (new PNG bytes behind the image)
within 5 s of the key press or click. The latency is printed, and for sliders also collected into
``latency.json`` (see conftest.py). Without E2E_BURST=all (``make test``), the first notebook with a slider is also
given the slider burst of test_slider_burst.py, after its controls are moved. Screenshots before/after go to
E2E_SCREENSHOT_DIR. Part of
``make test``; ``make e2e`` runs these alone. Every notebook is checked with the default transport (PNG bytes in a
binary buffer); one notebook (conftest.transport_notebook) then again with pictures as text only
(ATTENTION_COURSE_LIVE_TRANSPORT=text, what Colab gets): its kernel is told so and its live-picture cells run again.

The tests of one worker share one JupyterLab tab (conftest.LabApp): each opens its notebook in it and closes it.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from .conftest import TEXT_TRANSPORT_CODE, TRANSPORT_VARIABLE, burst_in_lab_check

pytestmark = pytest.mark.e2e

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
IDLE = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
LIVE_FIGURE = ".widget-vbox:has(> .course-live-picture)"
KERNEL_READY_TIMEOUT_MS = 60_000
RUN_ALL_TIMEOUT_MS = 120_000
PICTURE_TIMEOUT_MS = 5_000
EXTRA_SLIDER_STEPS = 2  # after the timed first step, when before/after screenshots are taken
# Before/after screenshots of every control: under `make e2e` (E2E_BURST=all) or E2E_CONTROL_SHOTS=1; `make test`
# keeps the whole-notebook screenshots and takes a control's "after" picture only when something is wrong.
CONTROL_SHOTS = os.environ.get("E2E_BURST") == "all" or os.environ.get("E2E_CONTROL_SHOTS") == "1"
# An error output without the word Traceback (e.g. SyntaxError) still has a line like "NameError: ...".
ERROR_LINE = re.compile(r"^\s*\w*(Error|Exception|Interrupt)\b", re.M)

# A live picture is the element with the class course-live-picture: the <img> itself (transport "image",
# a blob: URL) or an HTML widget holding one (transport "text", a data: URL, a new <img> on every update).
# `PICTURE_IMG` finds the <img> shown now; the scripts below take the picture element.
PICTURE = ":scope > .course-live-picture"
PICTURE_IMG = "const current = (el) => el.tagName === 'IMG' ? el : el.querySelector('img');"

# Watches one picture: when the first input event (key/mouse) happens, when its <img> shows a new src,
# and when that new picture has loaded. performance.now() throughout, in ms.
ARM_WATCH = """(el) => {
  %s
  const first = current(el);
  const st = {t0: null, tSrc: null, tLoad: null, startSrc: first ? first.src : null};
  const onInput = () => { if (st.t0 === null) st.t0 = performance.now(); };
  document.addEventListener('keydown', onInput, true);
  document.addEventListener('mousedown', onInput, true);
  const loaded = () => { if (st.tSrc !== null && st.tLoad === null) st.tLoad = performance.now(); };
  const check = () => {
    const img = current(el);
    if (!img || img.src === st.startSrc || st.tSrc !== null) return;
    st.tSrc = performance.now();
    if (img.complete && img.naturalWidth > 0 && el.tagName !== 'IMG') loaded();  // a data: URL may decode at once
    else img.addEventListener('load', loaded, {once: true});
  };
  const observer = new MutationObserver(check);
  observer.observe(el, {attributes: true, attributeFilter: ['src'], childList: true, subtree: true});
  st.stop = () => {
    observer.disconnect();
    document.removeEventListener('keydown', onInput, true);
    document.removeEventListener('mousedown', onInput, true);
  };
  window.__e2eWatch = st;
}""" % PICTURE_IMG

# SHA-256 of the bytes behind the picture's (blob/data) URL, plus its natural size.
IMAGE_DIGEST = """async (el) => {
  %s
  const img = current(el);
  const bytes = await (await fetch(img.src)).arrayBuffer();
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  const hex = Array.from(new Uint8Array(digest), b => b.toString(16).padStart(2, '0')).join('');
  const box = img.getBoundingClientRect();
  const area = img.closest('.jp-OutputArea-output');
  return {sha256: hex, bytes: bytes.byteLength, width: img.naturalWidth, height: img.naturalHeight,
          shownWidth: Math.round(box.width), shownHeight: Math.round(box.height),
          areaWidth: area ? Math.round(area.getBoundingClientRect().width) : null,
          scheme: img.src.split(':', 1)[0]};
}""" % PICTURE_IMG

# Resolves once the picture's src has not changed for `quiet` ms and the kernel is idle.
WAIT_SETTLED = """async (el, [quiet, timeout]) => {
  %s
  const t0 = performance.now();
  let last = current(el).src, since = performance.now();
  while (performance.now() - t0 < timeout) {
    await new Promise(r => setTimeout(r, 50));
    const img = current(el);
    if (img.src !== last) { last = img.src; since = performance.now(); }
    const panel = el.closest('.jp-NotebookPanel');
    const idle = panel && panel.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']");
    if (idle && img.complete && performance.now() - since >= quiet) return true;
  }
  return false;
}""" % PICTURE_IMG

# Records whether the notebook's execution indicator goes busy (set before Run All).
ARM_BUSY = """() => {
  window.__e2eSawBusy = false;
  const check = () => {
    if (document.querySelector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator[data-status='busy']"))
      window.__e2eSawBusy = true;
  };
  const observer = new MutationObserver(check);
  observer.observe(document.body, {attributes: true, attributeFilter: ['data-status'], subtree: true,
                                   childList: true});
  window.__e2eBusyObserver = observer;
}"""

# After Run All: the kernel went busy, is idle again, and no cell is still queued ("[*]").
RUN_ALL_DONE = """() => {
  const panel = document.querySelector(".jp-NotebookPanel:not(.lm-mod-hidden)");
  if (!panel || !window.__e2eSawBusy) return false;
  if (!panel.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']")) return false;
  const prompts = Array.from(panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt'));
  return !prompts.some(p => p.textContent.includes('*'));
}"""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:40] or "control"


def _stored_live_figure_outputs(notebook: Path) -> int:
    """How many stored outputs are LiveFigures (widget view plus the fallback PNG)."""
    count = 0
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data and "image/png" in data:
                count += 1
    return count


def _cells_allowed_to_raise(notebook: Path) -> set[int]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return {i for i, cell in enumerate(cells) if "raises-exception" in cell.get("metadata", {}).get("tags", [])}


# The notebook's text and, per cell, the text of its stderr outputs: read in one call, not one per cell.
OUTPUT_TEXTS = """(panel) => ({
  text: panel.innerText,
  stderr: Array.from(panel.querySelectorAll('.jp-Notebook .jp-Cell')).flatMap((cell, i) => Array.from(
    cell.querySelectorAll(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"),
    (output) => [i, output.innerText]))
})"""


def _problems_in_outputs(panel, allowed_to_raise: set[int]) -> list[str]:
    """'Error displaying widget' anywhere, and tracebacks in cells not tagged raises-exception."""
    problems = []
    found = panel.evaluate(OUTPUT_TEXTS)
    if "Error displaying widget" in found["text"]:
        problems.append("'Error displaying widget' is shown in the notebook")
    for i, output_text in found["stderr"]:
        if "Traceback" in output_text or ERROR_LINE.search(output_text):
            if i not in allowed_to_raise:
                problems.append(f"cell {i} shows an error output: {output_text[:500]!r}")
        else:
            print(f"[e2e]   note: cell {i} writes to stderr: {output_text[:200]!r}")
    return problems


def _close_page(page, lab_server, console_errors: list[str]) -> None:
    """Report the browser console's errors, close the tab and stop its kernels."""
    from .conftest import report_console_errors

    report_console_errors(console_errors)
    page.close()
    lab_server.shutdown_kernels()

def _kernel_state(lab_server, name: str) -> str | None:
    """execution_state of the kernel of the session for notebook ``name`` (REST API), if any."""
    for session in lab_server.api("/api/sessions"):
        if session.get("path") == name and session.get("kernel"):
            return session["kernel"].get("execution_state")
    return None


def _open_in_loaded_lab(page, name: str) -> None:
    """Open notebook ``name`` in the JupyterLab already loaded in ``page``: File > Open from Path..."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^File$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Open from Path")).click()
    path = page.locator(".jp-Dialog input")
    path.fill(name)
    path.press("Enter")
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current", has_text=name).wait_for(
        timeout=KERNEL_READY_TIMEOUT_MS)


def _open_and_run_all(page, lab_server, name: str, shots: Path, stem: str, in_loaded_lab: bool = False):
    """Open ``name`` (by its URL, which loads JupyterLab, or in the JupyterLab loaded already), check it opens
    unmodified with an idle kernel, then Run All Cells and wait until every cell has run."""
    if in_loaded_lab:
        _open_in_loaded_lab(page, name)
    else:
        page.goto(f"{lab_server.url}/lab/tree/{quote(name)}?reset&token={lab_server.token}")
    panel = page.locator(PANEL)
    panel.wait_for(state="visible", timeout=KERNEL_READY_TIMEOUT_MS)
    started = time.monotonic()
    while True:  # a "Select Kernel" dialog should not appear (autoStartDefaultKernel), but accept it if it does
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():
            print(f"[e2e]   accepting a dialog: {page.locator('.jp-Dialog').inner_text()[:200]!r}")
            dialog.first.click()
        if panel.locator(".jp-Notebook .jp-Cell").count() and panel.locator(IDLE).count() \
                and _kernel_state(lab_server, name) == "idle":
            break
        assert time.monotonic() - started < KERNEL_READY_TIMEOUT_MS / 1000, "kernel never became idle"
        time.sleep(0.2)
    # Opening must not mark the notebook modified (JupyterLab does when the stored language_info differs
    # from the kernel's; scripts/jupyter_server_config.py). Give a late kernel_info reply a moment to land.
    time.sleep(1.0)
    assert not page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count(), \
        f"{name} is marked modified right after opening"
    opened = panel.inner_text()
    if "Error displaying widget" in opened:
        print("[e2e]   note: before Run All the stored widget outputs show 'Error displaying widget' "
              "(no kernel-side model yet)")
    page.screenshot(path=str(shots / f"{stem}-0-opened.png"))

    page.evaluate(ARM_BUSY)
    started = time.monotonic()
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    page.wait_for_function(RUN_ALL_DONE, timeout=RUN_ALL_TIMEOUT_MS, polling=100)
    page.evaluate("() => window.__e2eBusyObserver.disconnect()")
    print(f"[e2e]   Run All Cells finished in {time.monotonic() - started:.1f} s")
    return panel


def _wait_for_live_figures(panel, expected: int, transport: str | None = None) -> int:
    """Widget views render just after the kernel is idle: wait until their count is stable (and, given a
    ``transport``, every picture is drawn by it)."""
    figures, last, stable_since, deadline = panel.locator(LIVE_FIGURE), -1, time.monotonic(), time.monotonic() + 20
    tag = {"image": "IMG", "text": "DIV", None: ""}[transport]
    while time.monotonic() < deadline:
        count = figures.count()
        if count != last:
            last, stable_since = count, time.monotonic()
        ready = count >= max(expected, 1) and all(
            figures.nth(i).locator(PICTURE).evaluate(f"(el) => {{ {PICTURE_IMG} const img = current(el); "
                                                     f"return !!(img && img.src) && (!{tag!r} || el.tagName === "
                                                     f"{tag!r}); }}") for i in range(count))
        if ready and time.monotonic() - stable_since > 0.5:
            return count
        time.sleep(0.1)
    return figures.count()


def _move_control(page, control, kind: str) -> str:
    """Move a slider one step (ArrowRight, or ArrowLeft at its maximum), click another toggle button, or type a new
    text into a text box (its text reversed, as scripts/move_controls.py does) and press Enter.

    Returns a description of what was done. Must trigger exactly one value change.
    """
    if kind == "slider":
        handle = control.locator(".noUi-handle").first
        now, top = handle.get_attribute("aria-valuenow"), handle.get_attribute("aria-valuemax")
        key = "ArrowLeft" if now is not None and top is not None and float(now) >= float(top) else "ArrowRight"
        handle.focus()
        page.keyboard.press(key)
        return key
    if kind == "text":
        box = control.locator("input").first
        old = box.input_value()
        new = (old[::-1] if old[::-1] != old else old + old[:1]) or "abc"
        box.fill(new)
        box.press("Enter")
        return f"type {new!r} + Enter"
    buttons = control.locator("button")
    for i in range(buttons.count()):
        button = buttons.nth(i)
        if "mod-active" not in (button.get_attribute("class") or ""):
            label = button.inner_text().strip()
            button.click()
            return f"click {label!r}"
    raise AssertionError("toggle buttons have no inactive option to click")


def _readout(control, kind: str) -> str:
    if kind == "text":
        return control.locator("input").first.input_value()
    if kind == "slider":
        return control.locator(".widget-readout").first.inner_text().strip()
    return control.locator("button.mod-active").first.inner_text().strip()


def test_lab_server_requires_the_token(lab_server):
    """Token authentication is on: the API refuses requests without it, the UI sends them to /login."""
    from .conftest import http_get

    status, _, _ = http_get(f"{lab_server.url}/api/contents")
    assert status == 403, f"/api/contents without token: HTTP {status}, expected 403"
    status, _, _ = http_get(f"{lab_server.url}/api/contents", token="not-the-token")
    assert status == 403, f"/api/contents with a wrong token: HTTP {status}, expected 403"
    status, headers, _ = http_get(f"{lab_server.url}/lab")
    location = headers.get("Location", "")
    assert status in (302, 303) and "/login" in location, f"/lab without token: HTTP {status} -> {location!r}"
    status, _, body = http_get(f"{lab_server.url}/api/contents", token=lab_server.token)
    assert status == 200 and json.loads(body)["type"] == "directory", f"/api/contents with token: HTTP {status}"
    print(f"\n[e2e] without token: /api/contents -> 403, /lab -> {location}; with token: 200")


def test_live_figures_respond_in_jupyterlab(live_notebook, lab_app, screenshot_dir, latency_log):
    """Open, Run All, move every control of every live figure (pictures as binary buffers). In the transport
    notebook (conftest.transport_notebook) then again with pictures sent as text only (what Colab gets): the kernel is
    told ATTENTION_COURSE_LIVE_TRANSPORT=text, the cells that draw live pictures run again, and each is moved."""
    from .conftest import transport_notebook

    name, stem = live_notebook.name, live_notebook.stem
    lab_server = lab_app.server
    copy = lab_server.root / name
    page, loaded = lab_app.start()
    print(f"\n[e2e] {name}{' (in the JupyterLab loaded already)' if loaded else ''}")
    problems: list[str] = []
    clean = False
    frames = None
    if name == burst_in_lab_check():  # then the slider burst too (test_slider_burst.py)
        from .test_slider_burst import _KernelFrames

        frames = _KernelFrames(page)  # before the notebook opens its kernel websocket
    try:
        panel = _open_and_run_all(page, lab_server, name, screenshot_dir, stem, in_loaded_lab=loaded)
        problems += _problems_in_outputs(panel, _cells_allowed_to_raise(copy))

        expected = _stored_live_figure_outputs(copy)
        count = _wait_for_live_figures(panel, expected)
        print(f"[e2e]   {count} LiveFigure(s) rendered ({expected} in the stored outputs)")
        assert count >= 1, f"{name}: no LiveFigure rendered after Run All (every notebook has a slider to move)"
        if expected:
            assert count == expected, f"{name}: {count} LiveFigures rendered, the stored notebook has {expected}"
        page.screenshot(path=str(screenshot_dir / f"{stem}-1-after-run-all.png"))
        moved = _move_every_control(page, panel, name, stem, count, "image", screenshot_dir, latency_log, problems)
        if frames is not None:
            from .test_slider_burst import burst_problems

            problems += burst_problems(page, panel, lab_server, name, stem, screenshot_dir, frames)
        if name == transport_notebook().name:
            rerun = page.evaluate(RERUN_WITH_TEXT_TRANSPORT, TEXT_TRANSPORT_CODE)
            page.wait_for_function(RUN_ALL_DONE, timeout=RUN_ALL_TIMEOUT_MS, polling=100)
            count = _wait_for_live_figures(panel, expected, transport="text")
            print(f"[e2e]   kernel told {TRANSPORT_VARIABLE}=text; {rerun} cell(s) with live pictures run again: "
                  f"{count} LiveFigure(s) drawn as text")
            assert count >= 1, f"{name}: no LiveFigure after running its cells again with the text transport"
            page.screenshot(path=str(screenshot_dir / f"{stem}-text-1-rerun.png"))
            moved += _move_every_control(page, panel, name, f"{stem}-text", count, "text", screenshot_dir,
                                         latency_log, problems)
        page.screenshot(path=str(screenshot_dir / f"{stem}-2-after-controls.png"))
        problems += _problems_in_outputs(panel, _cells_allowed_to_raise(copy))
        clean = True
    finally:
        if frames is not None:
            frames.detach()
        lab_app.finish(name, clean)
    print(f"[e2e]   {name}: {moved} control move(s) changed the picture, {len(problems)} problem(s)")
    assert not problems, "\n".join(problems)


# In the notebook open now: tell its kernel to send live pictures as text from now on (conftest.TEXT_TRANSPORT_CODE),
# then run again, one by one, the cells whose
# outputs hold a live picture. Needs JupyterLab's app object (conftest starts JupyterLab with --expose-app-in-browser).
RERUN_WITH_TEXT_TRANSPORT = """async (code) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  const kernel = panel.sessionContext.session.kernel;
  await kernel.requestExecute({code, silent: true, store_history: false}).done;
  window.__e2eSawBusy = true;
  const live = [];
  panel.content.widgets.forEach((cell, i) => { if (cell.node.querySelector('.course-live-picture')) live.push(i); });
  for (const i of live) {
    panel.content.activeCellIndex = i;
    await app.commands.execute('notebook:run-cell');
  }
  return live.length;
}"""


def _move_every_control(page, panel, name: str, stem: str, count: int, transport: str, screenshot_dir, latency_log,
                        problems: list[str]) -> int:
    """Move each slider, toggle-button group and text box of the ``count`` live figures in ``panel`` once; the picture must
    change (by ``transport``) within PICTURE_TIMEOUT_MS and fit its output area. Adds to ``problems``; returns how
    many moves changed the picture."""
    latencies: list[str] = []
    for f in range(count):
        figure = panel.locator(LIVE_FIGURE).nth(f)
        image = figure.locator(PICTURE)
        expected_tag = "img" if transport == "image" else "div"
        assert image.evaluate("(el) => el.tagName.toLowerCase()") == expected_tag, \
            f"{name}: LiveFigure #{f} is not drawn with the {transport} transport"
        controls = ([("slider", c) for c in figure.locator(".widget-hslider").all()]
                    + [("toggle", c) for c in figure.locator(".widget-toggle-buttons").all()]
                    + [("text", c) for c in figure.locator(".widget-text").all()])
        assert controls, f"{name}: LiveFigure #{f} has no slider, toggle buttons or text box"
        for c, (kind, control) in enumerate(controls):
            label = control.locator(".widget-label").first.inner_text().strip() if control.locator(
                ".widget-label").count() else f"{kind}{c}"
            where = f"{name} figure #{f} control {label!r}"
            figure.scroll_into_view_if_needed()
            before = image.evaluate(IMAGE_DIGEST)
            value_before = _readout(control, kind)
            shot = screenshot_dir / f"{stem}-fig{f}-{c}-{_slug(label)}"
            if CONTROL_SHOTS:
                figure.screenshot(path=f"{shot}-before.png")

            image.evaluate(ARM_WATCH)
            action = _move_control(page, control, kind)
            try:
                page.wait_for_function("() => window.__e2eWatch.tLoad !== null", timeout=PICTURE_TIMEOUT_MS,
                                       polling="raf")
            except Exception:
                problems.append(f"{where}: picture did not change within {PICTURE_TIMEOUT_MS} ms "
                                f"after {action} (value {value_before!r} -> {_readout(control, kind)!r})")
                page.evaluate("() => window.__e2eWatch.stop()")
                figure.screenshot(path=f"{shot}-after.png")
                continue
            watch = page.evaluate("() => { const w = window.__e2eWatch; w.stop(); "
                                  "return {t0: w.t0, tSrc: w.tSrc, tLoad: w.tLoad}; }")
            if kind == "slider" and CONTROL_SHOTS:  # a couple more steps: the after-screenshot differs clearly
                for _ in range(EXTRA_SLIDER_STEPS):
                    page.keyboard.press(action)
            assert image.evaluate(WAIT_SETTLED, [400, 10_000]), \
                f"{where}: picture kept changing / kernel busy 10 s after {action}"
            after = image.evaluate(IMAGE_DIGEST)
            value_after = _readout(control, kind)
            if CONTROL_SHOTS or value_after == value_before or after["sha256"] == before["sha256"]:
                figure.screenshot(path=f"{shot}-after.png")
            src_ms, shown_ms = watch["tSrc"] - watch["t0"], watch["tLoad"] - watch["t0"]
            line = (f"{where}: {action}, value {value_before!r} -> {value_after!r}: new src after "
                    f"{src_ms:.0f} ms, picture loaded after {shown_ms:.0f} ms "
                    f"(PNG {before['width']}x{before['height']} px shown at {before['shownWidth']}x"
                    f"{before['shownHeight']} CSS px, {before['bytes']} -> {after['bytes']} bytes)")
            print(f"[e2e]   {line}")
            if CONTROL_SHOTS:
                print(f"[e2e]   screenshots: {shot}-before.png  {shot}-after.png")
            latencies.append(line)
            if kind == "slider":
                latency_log.append({"notebook": name, "transport": transport, "figure": f, "control": label,
                                    "key": action,
                                    "src_ms": round(src_ms, 1), "picture_ms": round(shown_ms, 1),
                                    "png_bytes": after["bytes"]})
            if after["scheme"] != ("blob" if transport == "image" else "data"):
                problems.append(f"{where}: the picture came as a {after['scheme']}: URL, not by the "
                                f"{transport} transport")
            if value_after == value_before:
                problems.append(f"{where}: {action} did not change the control's value ({value_before!r})")
            if after["sha256"] == before["sha256"]:
                problems.append(f"{where}: the image was replaced by identical PNG bytes after {action}")
            if after["areaWidth"] is not None and after["shownWidth"] > after["areaWidth"]:
                problems.append(f"{where}: the picture is {after['shownWidth']} px wide in an output area of "
                                f"{after['areaWidth']} px: cut off at the right")
            if shown_ms >= PICTURE_TIMEOUT_MS:
                problems.append(f"{where}: picture took {shown_ms:.0f} ms (>= {PICTURE_TIMEOUT_MS} ms)")

    sliders_moved = sum(1 for line in latencies if "ArrowRight" in line or "ArrowLeft" in line)
    if not sliders_moved:
        problems.append(f"{name}: no slider was moved (none of its LiveFigures has one)")
    return len(latencies)


