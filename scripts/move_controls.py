"""Move every control of every live picture in this Python process one step, and check that each move changes
the picture: what a learner does with the sliders, done on the kernel's side, without a browser.

scripts/colab_stack.py sends this file's source to the kernel of each notebook it has run on the Colab-like stack
and calls :func:`move_every_control` there. One step is what one arrow key or one click does in the browser tests
(tests/e2e): a slider moves by its step (back by one at its maximum), a selection to the next option (the previous
one at the last), a toggle-button group to another button; a text box gets its text reversed.
"""

from __future__ import annotations

import gc


def step(control) -> bool:
    """Move ``control`` one step (see the module docstring); False if it has no other value to move to."""
    if getattr(control, "options", None) is not None:  # SelectionSlider, ToggleButtons, Dropdown: by position
        count, index = len(control.options), control.index
        if count < 2 or index is None:
            return False
        control.index = index + 1 if index + 1 < count else index - 1
        return True
    if all(hasattr(control, name) for name in ("min", "max", "step")):  # IntSlider, FloatSlider
        up = control.value + control.step
        control.value = up if up <= control.max else control.value - control.step
        return True
    value = getattr(control, "value", None)
    if isinstance(value, str) and value:  # a text box
        control.value = value[::-1] if value[::-1] != value else value + value[0]
        return True
    return False


def open_live_figures() -> list:
    """Every ``LiveFigure`` in this process that is not closed (a closed widget is shown nowhere)."""
    from helpers.widgets import LiveFigure

    gc.collect()
    # type(), not isinstance(): isinstance asks some objects for __class__, which can warn (torch's reduce_op).
    return [o for o in gc.get_objects() if issubclass(type(o), LiveFigure) and o.comm is not None]


def move_every_control(figures=None) -> str:
    """Move each control of each of ``figures`` (default: :func:`open_live_figures`); raise AssertionError naming
    every move that did not change the picture shown. Returns a one-line summary."""
    figures = open_live_figures() if figures is None else figures
    moved, problems = 0, []
    for figure in figures:
        for name, control in figure.controls.items():
            where = f"{figure!r}, control {name!r} ({type(control).__name__})"
            png, shown, old = figure.png, figure.image.value, control.value
            if not step(control):
                problems.append(f"{where}: no other value to move it to")
                continue
            moved += 1
            if control.value == old:
                problems.append(f"{where}: moving it left its value at {old!r}")
            elif figure.png == png:
                problems.append(f"{where}: {old!r} -> {control.value!r} did not change the picture")
            elif figure.image.value == shown:
                problems.append(f"{where}: {old!r} -> {control.value!r} drew a new picture, "
                                "but the widget shows the old one")
    if problems:
        raise AssertionError("\n".join(problems))
    return f"{len(figures)} live figure(s), {moved} control(s) moved, each changed its picture"
