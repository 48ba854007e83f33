"""`--run-twice` (conftest.py): a cell that breaks when a learner runs it twice fails the notebook's tests."""

import re
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Like a second loss.backward() (notebook 04 once had one), a second run of cell 1 raises; plain Python, so that
# these kernels need not import torch (2 s each).
CONSUMES = [("pending = ['a', 'b']", ""), ("pending.remove('a')\nprint(pending)", "['b']\n")]
COUNTER = [("count = 0", ""), ("count += 1\nprint(count)", "1\n"), ("print(count)", "1\n")]  # the next cell sees 2
SAFE = [("pending = ['a', 'b']\npending.remove('a')\nprint(pending)", "['b']\n"), ("print(pending)", "['b']\n")]


def _notebook(folder: Path, name: str, cells: list[tuple[str, str]]) -> Path:
    """A notebook with stored stream outputs, as a clean Restart & Run All would leave it."""
    nb = nbformat.v4.new_notebook()
    for number, (source, printed) in enumerate(cells, start=1):
        cell = nbformat.v4.new_code_cell(source, execution_count=number)
        if printed:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
        nb.cells.append(cell)
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _outcomes(*options: str, notebooks: dict[str, list]) -> tuple[dict[str, str], str]:
    """Run pytest on the notebooks (under build/, inside the rootdir, so conftest.py applies); {"name::Cell N": outcome}."""
    folder = ROOT / "build" / "test-run-twice" / uuid.uuid4().hex[:8]
    folder.mkdir(parents=True)
    paths = [_notebook(folder, name, cells) for name, cells in notebooks.items()]
    result = subprocess.run([sys.executable, "-m", "pytest", *map(str, paths), "-n", "0", "-rA", *options],
                            cwd=ROOT, capture_output=True, text=True, timeout=180)
    for path in paths:
        path.unlink()
    folder.rmdir()
    found = {f"{m.group(2)}::{m.group(3)}": m.group(1)
             for m in re.finditer(r"^(PASSED|FAILED) \S*?(\w+)\.ipynb::(Cell \d+)", result.stdout, re.M)}
    return found, result.stdout


@pytest.fixture(scope="module")
def with_run_twice():
    return _outcomes(notebooks={"consumes": CONSUMES, "counter": COUNTER, "safe": SAFE})


def test_a_second_run_that_raises_fails_that_cell(with_run_twice):
    outcomes, log = with_run_twice
    assert outcomes.get("consumes::Cell 1") == "FAILED", log[-3000:]
    assert "running it a second time in a row raised ValueError" in log and "not in list" in log
    assert outcomes.get("consumes::Cell 0") == "PASSED"


def test_a_second_run_that_changes_state_fails_the_next_cell(with_run_twice):
    outcomes, log = with_run_twice
    assert outcomes.get("counter::Cell 1") == "PASSED" and outcomes.get("counter::Cell 2") == "FAILED", log[-3000:]


def test_a_notebook_safe_to_run_twice_passes(with_run_twice):
    outcomes, log = with_run_twice
    assert outcomes.get("safe::Cell 0") == outcomes.get("safe::Cell 1") == "PASSED", log[-3000:]


def test_without_the_option_each_cell_runs_once():
    outcomes, log = _outcomes("-o", "addopts=--nbval --nbval-current-env", notebooks={"consumes": CONSUMES})
    assert outcomes == {"consumes::Cell 0": "PASSED", "consumes::Cell 1": "PASSED"}, log[-3000:]
