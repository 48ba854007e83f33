"""What the Colab-like stack (scripts/colab_stack.py) runs of the unit tests, and its one-case-per-test plugin."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import colab_stack  # noqa: E402


def test_the_stack_runs_the_tests_of_figures_widgets_and_numpy_inputs_only():
    chosen = colab_stack.version_sensitive_tests()
    assert "test_plotting_and_widgets.py" in chosen
    assert {f"test_live_lesson{n:02d}.py" for n in range(1, 13)} <= set(chosen)
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
