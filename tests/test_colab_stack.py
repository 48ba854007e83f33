"""What the Colab-like stack (scripts/colab_stack.py) runs of the unit tests, its one-case-per-test plugin, and the
check it runs in every notebook's kernel there (scripts/move_controls.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import colab_stack  # noqa: E402
import move_controls  # noqa: E402


def test_the_stack_runs_the_tests_of_figures_widgets_and_numpy_inputs_only():
    chosen = colab_stack.version_sensitive_tests()
    assert "test_plotting_and_widgets.py" in chosen
    assert "test_import_side_effects.py" in chosen
    # Each lesson's live pictures: there, drawn by the notebooks and moved by move_controls, in every notebook.
    assert not {f"test_live_lesson{n:02d}.py" for n in range(1, 13)} & set(chosen)
    assert "test_exercises.py" in chosen  # feeds numpy arrays to every checker
    assert "test_attention.py" not in chosen and "test_training.py" not in chosen  # torch only: same build there
    assert not set(chosen) & set(colab_stack.REPOSITORY_CHECKS)


def test_a_module_is_chosen_by_what_it_imports(tmp_path):
    (tmp_path / "test_a.py").write_text("def test():\n    import numpy as np\n")
    (tmp_path / "test_b.py").write_text("from helpers.live import lesson01\n")
    (tmp_path / "test_c.py").write_text("from helpers import plotting, attention\n")
    (tmp_path / "test_d.py").write_text("import torch\n# matplotlib is only mentioned here\n")
    assert colab_stack.version_sensitive_tests(tmp_path) == ["test_a.py", "test_b.py", "test_c.py"]


def test_first_case_only_keeps_the_first_parameter_set_of_each_test(tmp_path):
    (tmp_path / "test_cases.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('n', [1, 2, 3])\n"
        "def test_many(n):\n    assert n == 1\n"
        "def test_one():\n    pass\n"
        "class TestGroup:\n"
        "    @pytest.mark.parametrize('s', ['a', 'b'])\n"
        "    def test_inner(self, s):\n        assert s == 'a'\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "first_case_only", "-p", "no:cacheprovider",
                             "-p", "no:nbval", "-p", "no:xdist", "-o", "addopts=", "-q", str(tmp_path)],
                            capture_output=True, text=True, cwd=tmp_path,
                            env={"PYTHONPATH": str(ROOT / "scripts"), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed, 3 deselected" in result.stdout, result.stdout


def _live(redraw_uses=("row", "scale", "step", "width", "text")):
    from matplotlib.figure import Figure

    import ipywidgets as widgets
    from helpers.widgets import LiveFigure, choice, float_slider, int_slider, steps_slider

    fig = Figure(figsize=(4, 1))
    ax = fig.add_subplot()
    label = ax.set_title("")

    def redraw(**values):
        label.set_text(" ".join(str(values[k]) for k in redraw_uses))

    controls = {"row": choice("row", ["a", "b", "c"], value="c"), "scale": int_slider("scale", 5, 0, 5),
                "step": steps_slider("step", [1, 2, 4]), "width": float_slider("width", 0.5, 0.0, 1.0, 0.25),
                "text": widgets.Text(value="abc")}
    return LiveFigure(fig, redraw, controls, transport="image")


def test_every_control_moves_one_step_and_changes_the_picture():
    live = _live()
    summary = move_controls.move_every_control([live])
    assert "5 control(s) moved" in summary
    # At the end of its range a control steps back, as an arrow key at the maximum does in the browser tests.
    assert live.values() == {"row": "b", "scale": 4, "step": 2, "width": 0.75, "text": "cba"}
    assert live.image.value == live.png != live.initial_png
    live.close()


def test_a_control_that_does_not_change_the_picture_is_named():
    live = _live(redraw_uses=("row", "step"))  # the redraw ignores scale, width and the text
    try:
        with pytest.raises(AssertionError) as failure:
            move_controls.move_every_control([live])
        message = str(failure.value)
        for name in ("'scale'", "'width'", "'text'"):
            assert f"control {name}" in message and "did not change the picture" in message
        assert "control 'row'" not in message and "control 'step'" not in message
    finally:
        live.close()


def test_without_figures_it_takes_every_open_live_figure_in_the_process():
    shown, closed = _live(), _live()
    closed.close()
    found = move_controls.open_live_figures()
    assert any(f is shown for f in found) and not any(f is closed for f in found)
    shown.close()


def test_a_control_with_nowhere_to_go_is_named():
    import ipywidgets as widgets

    assert not move_controls.step(widgets.ToggleButtons(options=["only"]))
    assert not move_controls.step(widgets.Text(value=""))
    assert not move_controls.step(widgets.Button())
