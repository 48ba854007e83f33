"""`--run-twice` (conftest.py): a cell that breaks when a learner runs it twice fails the notebook's tests."""

import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _notebook(cells: list[tuple[str, str]]) -> Path:
    """A notebook under build/ (inside the rootdir, so conftest.py applies) with stored stream outputs."""
    nb = nbformat.v4.new_notebook()
    for number, (source, printed) in enumerate(cells, start=1):
        cell = nbformat.v4.new_code_cell(source, execution_count=number)
        if printed:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
        nb.cells.append(cell)
    folder = ROOT / "build" / "test-run-twice"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"nb_{uuid.uuid4().hex[:8]}.ipynb"
    nbformat.write(nb, path)
    return path


def _pytest(path: Path, *options: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-m", "pytest", str(path), "-n", "0", "-q", "-p", "no:randomly",
                               *options], cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("cells, failing, why", [
    ([("import torch\nx = torch.ones(2, requires_grad=True)\nloss = (x * x).sum()", ""),
      ("loss.backward()\nprint(x.grad)", "tensor([2., 2.])\n")], "Cell 1", "backward through the graph a second time"),
    ([("count = 0", ""), ("count += 1\nprint(count)", "1\n"), ("print(count)", "1\n")], "Cell 2", ""),
])
def test_a_cell_that_breaks_on_a_second_run_fails(cells, failing, why):
    result = _pytest(_notebook(cells))
    assert result.returncode == 1, result.stdout[-2000:]
    assert f"::{failing}" in result.stdout and "1 failed" in result.stdout, result.stdout[-2000:]
    assert why in result.stdout


def test_a_notebook_safe_to_run_twice_passes_and_the_option_can_be_turned_off():
    cells = [("import torch\nx = torch.ones(2, requires_grad=True)\nloss = (x * x).sum()", ""),
             ("loss.backward()\nprint(x.grad)", "tensor([2., 2.])\n")]
    assert _pytest(_notebook(cells), "-o", "addopts=--nbval --nbval-current-env").returncode == 0
    safe = [("import torch\nx = torch.ones(2, requires_grad=True)\nx.grad = None\nloss = (x * x).sum()\n"
             "loss.backward()\nprint(x.grad)", "tensor([2., 2.])\n"), ("print(x.grad)", "tensor([2., 2.])\n")]
    result = _pytest(_notebook(safe))
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout[-2000:]
