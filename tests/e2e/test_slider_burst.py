"""Browser check: a quick burst of slider steps must not pile up redraws in the kernel.

Every value change of a LiveFigure control runs a Python redraw (100-200 ms). ipywidgets' front end
is meant to throttle: while one update message is being handled by the kernel, later changes are
merged into a single buffered message, sent when the kernel reports idle for the previous one. This
test measures that in JupyterLab, for the first slider of the first LiveFigure (with a slider) of each
notebook whose LiveFigures have one (``make e2e``; ``make test`` measures it in the first such notebook only, as
part of that notebook's check in test_notebooks_in_lab.py, which has run it already):

* keyboard burst: ArrowRight pressed N times with no wait in between (bouncing back with ArrowLeft
  at the slider's maximum, so that every press changes the value);
* mouse drag: the handle dragged across the track with ``page.mouse`` (down, 20 moves, up).

After each: the picture stops changing and the kernel is idle within 5 s of the last input; the
number of pictures drawn is below the number of value changes + 1 (the counts show whether updates
were merged); and the picture shown is the one for the final value: one step away and back again
gives the same PNG bytes (a redraw is deterministic). The step away must change the picture within
3 s (the widget is still live). Per notebook the figures are printed; run with ``make e2e``.
"""

from __future__ import annotations

import time

import pytest

from .test_notebooks_in_lab import (
    IMAGE_DIGEST, LIVE_FIGURE, WAIT_SETTLED, _cells_allowed_to_raise, _kernel_state, _open_and_run_all,
    _problems_in_outputs, _readout, _stored_live_figure_outputs, _wait_for_live_figures)

pytestmark = pytest.mark.e2e

PRESSES = 15
DRAG_MOVES = 20
SETTLE_LIMIT_MS = 5_000      # last input -> picture stops changing and kernel idle
QUIET_MS = 1_000             # "stops changing": no new src for this long
STILL_LIVE_LIMIT_MS = 3_000  # one more step after settling -> new picture
WAIT_LIMIT_MS = 15_000       # how long we watch at most (the assertions are on the measured times)

# Records, from now on: input events (keydown; mousedown/move/up), every new src of the image,
# every change of the slider's readout text and every change of the notebook's kernel status
# indicator. performance.now() throughout, in ms. Stored in window.__e2eBurst.
ARM_BURST = """([img, readout]) => {
  const now = () => performance.now();
  const panel = img.closest('.jp-NotebookPanel');
  const status = () => {
    const el = panel && panel.querySelector('.jp-Notebook-ExecutionIndicator[data-status]');
    return el ? el.getAttribute('data-status') : null;
  };
  const m = {inputs: [], srcs: [], readouts: [], statuses: [[now(), status()]],
             startSrc: img.src, startReadout: readout.textContent};
  const onKey = () => m.inputs.push(now());
  const onMouse = (e) => { if (e.type !== 'mousemove' || e.buttons) m.inputs.push(now()); };
  document.addEventListener('keydown', onKey, true);
  for (const type of ['mousedown', 'mousemove', 'mouseup']) document.addEventListener(type, onMouse, true);
  const observers = [
    [img, {attributes: true, attributeFilter: ['src']}, () => {
      const last = m.srcs.length ? m.srcs[m.srcs.length - 1][1] : m.startSrc;
      if (img.src !== last) m.srcs.push([now(), img.src]);
    }],
    [readout, {childList: true, characterData: true, subtree: true}, () => {
      const last = m.readouts.length ? m.readouts[m.readouts.length - 1][1] : m.startReadout;
      if (readout.textContent !== last) m.readouts.push([now(), readout.textContent]);
    }],
    [panel, {attributes: true, attributeFilter: ['data-status'], subtree: true, childList: true}, () => {
      const s = status();
      if (s !== m.statuses[m.statuses.length - 1][1]) m.statuses.push([now(), s]);
    }],
  ].map(([node, options, callback]) => {
    const observer = new MutationObserver(callback);
    observer.observe(node, options);
    return observer;
  });
  m.status = status;
  m.stop = () => {
    observers.forEach(o => o.disconnect());
    document.removeEventListener('keydown', onKey, true);
    for (const type of ['mousedown', 'mousemove', 'mouseup']) document.removeEventListener(type, onMouse, true);
  };
  window.__e2eBurst = m;
}"""

# True once, after the last input, nothing has changed for `quiet` ms: no new src, the kernel
# indicator idle (and not flipped since), the picture loaded.
BURST_SETTLED = """([img, quiet]) => {
  const m = window.__e2eBurst, t = performance.now();
  const lastOf = (list) => list.length ? list[list.length - 1][0] : -Infinity;
  const last = Math.max(m.inputs.length ? m.inputs[m.inputs.length - 1] : -Infinity, lastOf(m.srcs),
                        lastOf(m.statuses));
  return m.status() === 'idle' && img.complete && t - last >= quiet;
}"""

# What was recorded, as times relative to the last input (ms), then the watch is removed.
BURST_REPORT = """() => {
  const m = window.__e2eBurst;
  m.stop();
  const first = m.inputs[0], last = m.inputs[m.inputs.length - 1];
  const after = (list) => list.filter(([t]) => t > last);
  const idle = m.statuses.filter(([t, s]) => t > last && s === 'idle');
  const busy = m.statuses.filter(([t, s]) => t >= first && s === 'busy');
  const lastSrc = m.srcs.length ? m.srcs[m.srcs.length - 1][0] : null;
  return {
    inputs: m.inputs.length, inputMs: last - first,
    pictures: m.srcs.length, picturesAfterLastInput: after(m.srcs).length,
    values: m.readouts.length, distinctValues: new Set(m.readouts.map(([, v]) => v)).size,
    busyPeriods: busy.length,
    lastPictureMs: lastSrc === null ? null : lastSrc - last,
    idleMs: idle.length ? idle[idle.length - 1][0] - last : 0,
    pictureTimesMs: m.srcs.map(([t]) => Math.round(t - first)),
    finalStatus: m.status(),
  };
}"""

# The noUiSlider behind a slider: current position, range and step (ipywidgets' SelectionSlider
# is a slider over option indices 0..n-1, step 1).
SLIDER_GEOMETRY = """(target) => {
  const s = target.noUiSlider;
  const number = (v) => Number(Array.isArray(v) ? v[0] : v);
  return {now: number(s.get()), min: number(s.options.range.min), max: number(s.options.range.max),
          step: number(s.options.step)};
}"""


def _key_plan(geometry: dict, presses: int) -> list[str]:
    """ArrowRight ``presses`` times, turning to ArrowLeft at the maximum (and back at the minimum),
    so that every press changes the value."""
    step = geometry["step"] or 1
    top = round((geometry["max"] - geometry["min"]) / step)
    position = round((geometry["now"] - geometry["min"]) / step)
    assert top >= 1, f"slider has a single position: {geometry}"
    keys, direction = [], 1
    for _ in range(presses):
        if not 0 <= position + direction <= top:
            direction = -direction
        position += direction
        keys.append("ArrowRight" if direction > 0 else "ArrowLeft")
    return keys


class _KernelFrames:
    """Counts the widget update messages (comm_msg, method "update") that the page sends to the kernel
    over its websocket: one per value that reaches Python."""

    def __init__(self, page):
        self.sent, self.page = 0, page
        page.on("websocket", self._attach)

    def detach(self) -> None:
        self.page.remove_listener("websocket", self._attach)

    def _attach(self, websocket) -> None:
        if "/api/kernels/" in websocket.url:
            websocket.on("framesent", self._count)

    def _count(self, payload) -> None:
        data = payload if isinstance(payload, bytes) else payload.encode("utf-8", "replace")
        head = data[:4096]  # header and JSON content come before any binary buffer
        if b'"comm_msg"' in head and b'"update"' in head:
            self.sent += 1


def _watch(page, image, readout, inputs, frames: _KernelFrames) -> dict:
    """Arm the watch, run ``inputs()``, wait until settled; the figures of what happened."""
    page.evaluate("() => 0")  # let Playwright deliver pending websocket events before counting
    sent = frames.sent
    page.evaluate(ARM_BURST, [image.element_handle(), readout.element_handle()])
    inputs()
    settled = True
    try:
        page.wait_for_function(BURST_SETTLED, arg=[image.element_handle(), QUIET_MS], timeout=WAIT_LIMIT_MS,
                               polling=50)
    except Exception:
        settled = False
    report = page.evaluate(BURST_REPORT)
    page.evaluate("() => 0")
    report.update(settled=settled, updatesSent=frames.sent - sent)
    last_picture = report["lastPictureMs"] if report["lastPictureMs"] is not None else 0
    report["settleMs"] = max(0, last_picture, report["idleMs"])
    return report


def _step_away_and_back(page, handle, image, readout, where: str, problems: list[str]) -> None:
    """After settling: one step (the picture must change within 3 s: still live), then one step back to
    the same value, which must give the very picture shown before (same PNG bytes)."""
    value, shown = readout.inner_text().strip(), image.evaluate(IMAGE_DIGEST)
    now, top = handle.get_attribute("aria-valuenow"), handle.get_attribute("aria-valuemax")
    away = "ArrowLeft" if now is not None and top is not None and float(now) >= float(top) else "ArrowRight"
    back = "ArrowRight" if away == "ArrowLeft" else "ArrowLeft"
    for key in (away, back):
        handle.focus()
        before = image.get_attribute("src")
        started = time.monotonic()
        page.keyboard.press(key)
        try:
            page.wait_for_function("([img, before]) => img.src !== before", arg=[image.element_handle(), before],
                                   timeout=STILL_LIVE_LIMIT_MS, polling=20)
        except Exception:
            problems.append(f"{where}: after settling, {key} did not change the picture within "
                            f"{STILL_LIVE_LIMIT_MS} ms (value {value!r} -> {readout.inner_text().strip()!r})")
            return
        changed_ms = (time.monotonic() - started) * 1000
        _wait_quiet(page, image)
        if key == away:
            print(f"[e2e]     still live: {key} -> value {readout.inner_text().strip()!r}, new picture after "
                  f"{changed_ms:.0f} ms")
    back_value, back_shown = readout.inner_text().strip(), image.evaluate(IMAGE_DIGEST)
    if back_value != value:
        problems.append(f"{where}: {away} then {back} gave value {back_value!r}, expected {value!r}")
    elif back_shown["sha256"] != shown["sha256"]:
        problems.append(f"{where}: the settled picture for {value!r} differs from a fresh one for the same value "
                        f"({shown['bytes']} vs {back_shown['bytes']} bytes): not the final value's picture")
    else:
        print(f"[e2e]     settled picture = fresh picture for {value!r} (same {shown['bytes']} PNG bytes)")


def _wait_quiet(page, image, quiet_ms: int = 300) -> None:
    assert image.evaluate(WAIT_SETTLED, [quiet_ms, WAIT_LIMIT_MS]), \
        f"picture kept changing / kernel busy {WAIT_LIMIT_MS} ms after a single step"


def _check_report(where: str, what: str, report: dict, changes: int, problems: list[str]) -> None:
    if not report["settled"]:
        problems.append(f"{where}: {what}: still not settled {WAIT_LIMIT_MS} ms after the last input: {report}")
        return
    if report["pictures"] == 0:
        problems.append(f"{where}: {what}: the picture never changed")
    if report["settleMs"] > SETTLE_LIMIT_MS:
        problems.append(f"{where}: {what}: picture/kernel settled {report['settleMs']:.0f} ms after the last "
                        f"input (limit {SETTLE_LIMIT_MS} ms): updates pile up")
    if report["pictures"] >= changes + 1:
        problems.append(f"{where}: {what}: {report['pictures']} pictures for {changes} value changes")
    if report["finalStatus"] != "idle":
        problems.append(f"{where}: {what}: kernel indicator {report['finalStatus']!r} after settling")


def _describe(what: str, report: dict, changes: int) -> str:
    last = report["lastPictureMs"]
    return (f"{what}: {report['inputs']} input events in {report['inputMs']:.0f} ms, {changes} value changes "
            f"({report['distinctValues']} distinct), {report['updatesSent']} update messages sent, "
            f"{report['busyPeriods']} kernel busy periods, {report['pictures']} pictures seen "
            f"({report['picturesAfterLastInput']} after the last input; at {report['pictureTimesMs']} ms from the "
            f"first input), last picture "
            f"{'-' if last is None else f'{last:.0f}'} ms and kernel idle {report['idleMs']:.0f} ms after the "
            f"last input: settled in {report['settleMs']:.0f} ms")


def test_slider_burst_settles_on_the_final_value(slider_notebook, lab_app, screenshot_dir):
    name, stem = slider_notebook.name, slider_notebook.stem
    lab_server = lab_app.server
    copy = lab_server.root / name
    page, loaded = lab_app.start()
    print(f"\n[e2e] {name}")
    frames = _KernelFrames(page)  # before the notebook opens its kernel websocket
    problems: list[str] = []
    clean = False
    try:
        panel = _open_and_run_all(page, lab_server, name, screenshot_dir, f"{stem}-burst", in_loaded_lab=loaded)
        problems += _problems_in_outputs(panel, _cells_allowed_to_raise(copy))
        count = _wait_for_live_figures(panel, _stored_live_figure_outputs(copy))
        assert count >= 1, f"{name}: no LiveFigure rendered after Run All"
        problems += burst_problems(page, panel, lab_server, name, stem, screenshot_dir, frames)
        problems += _problems_in_outputs(panel, _cells_allowed_to_raise(copy))
        clean = True
    finally:
        frames.detach()
        lab_app.finish(name, clean)
    assert not problems, "\n".join(problems)


def burst_problems(page, panel, lab_server, name: str, stem: str, screenshot_dir, frames: _KernelFrames) -> list[str]:
    """The keyboard burst and the mouse drag on the first slider of the first LiveFigure that has one, in the
    notebook open in ``panel`` (Run All done); what went wrong. ``frames`` was attached before the notebook opened.
    Under ``make test`` the JupyterLab check of the first notebook with a slider calls this, after moving each
    control (test_notebooks_in_lab.py); under ``make e2e`` the test above, for every notebook with a slider."""
    problems: list[str] = []
    count = panel.locator(LIVE_FIGURE).count()
    figures = [panel.locator(LIVE_FIGURE).nth(f) for f in range(count)]
    with_slider = [(f, figure) for f, figure in enumerate(figures) if figure.locator(".widget-hslider").count()]
    assert with_slider, f"{name}: its code builds a slider, but none of its {count} LiveFigure(s) shows one"
    f, figure = with_slider[0]
    control = figure.locator(".widget-hslider").first
    label = control.locator(".widget-label").first.inner_text().strip()
    where = f"{name} figure #{f} slider {label!r}"
    image = figure.locator(":scope > img.course-live-picture")
    readout = control.locator(".widget-readout").first
    handle = control.locator(".noUi-handle").first
    track = control.locator(".noUi-target").first
    figure.scroll_into_view_if_needed()
    _wait_quiet(page, image)

    # Keyboard burst.
    geometry = track.evaluate(SLIDER_GEOMETRY)
    keys = _key_plan(geometry, PRESSES)
    start_value = _readout(control, "slider")
    handle.focus()

    def burst():
        for key in keys:
            page.keyboard.press(key)

    report = _watch(page, image, readout, burst, frames)
    final_value = _readout(control, "slider")
    line = _describe(f"{PRESSES} key presses ({keys.count('ArrowRight')} right, {keys.count('ArrowLeft')} left),"
                     f" value {start_value!r} -> {final_value!r}", report, report["values"])
    print(f"[e2e]   burst: {where}\n[e2e]     {line}")
    figure.screenshot(path=str(screenshot_dir / f"{stem}-burst-keys.png"))
    if report["values"] != PRESSES:
        problems.append(f"{where}: {PRESSES} presses changed the readout {report['values']} times")
    _check_report(where, "key burst", report, PRESSES, problems)
    state = _kernel_state(lab_server, name)
    if state != "idle":
        problems.append(f"{where}: after the key burst the server reports the kernel {state!r}")
    if report["settled"]:
        _step_away_and_back(page, handle, image, readout, f"{where} (keys)", problems)

    # Mouse drag across the track.
    _wait_quiet(page, image)
    start_value = _readout(control, "slider")
    box, bar = handle.bounding_box(), track.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    to_x = bar["x"] + bar["width"] * (0.85 if x < bar["x"] + bar["width"] / 2 else 0.15)

    def drag():
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(to_x, y, steps=DRAG_MOVES)
        page.mouse.up()

    report = _watch(page, image, readout, drag, frames)
    final_value = _readout(control, "slider")
    changes = report["values"]
    line = _describe(f"drag ({DRAG_MOVES} moves over {abs(to_x - x):.0f} px), value {start_value!r} -> "
                     f"{final_value!r}", report, changes)
    print(f"[e2e]     {line}")
    figure.screenshot(path=str(screenshot_dir / f"{stem}-burst-drag.png"))
    if changes < 2:
        problems.append(f"{where}: the drag changed the value {changes} time(s)")
    _check_report(where, "drag", report, changes, problems)
    if report["settled"]:
        _step_away_and_back(page, handle, image, readout, f"{where} (drag)", problems)
    return problems
