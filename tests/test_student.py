"""Student copies (scripts/student.py) and predictions stored collapsed (scripts/spoilers.py), on every notebook."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


student = _load("student")
spoilers = _load("spoilers")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_student_copy_clears_exactly_the_spoilers_and_leaves_the_course_alone(path, tmp_path):
    before = _digest(path)
    assert student.main(["--out", str(tmp_path), str(path)]) == 0
    assert _digest(path) == before, "the course's own notebook must not change"
    original = json.loads(path.read_text(encoding="utf-8"))
    copy = json.loads((tmp_path / path.name).read_text(encoding="utf-8"))
    assert len(copy["cells"]) == len(original["cells"])
    cleared = 0
    for index, (mine, theirs) in enumerate(zip(copy["cells"], original["cells"])):
        assert mine["source"] == theirs["source"] and mine["cell_type"] == theirs["cell_type"], index
        if theirs["cell_type"] != "code":
            continue
        tagged = "prediction-answer" in theirs.get("metadata", {}).get("tags", [])
        exercise = bool(student.EXERCISE_CALL.search(student.source(theirs)))
        if tagged or exercise:
            assert mine["outputs"] == [] and mine["execution_count"] is None, f"cell {index} still shows its output"
            assert mine["metadata"].get("tags", []) == theirs.get("metadata", {}).get("tags", [])
            cleared += 1
        else:
            assert mine["outputs"] == theirs["outputs"], f"cell {index} lost outputs it should keep (pictures too)"
    checks = sum(".check(" in student.source(c) for c in original["cells"] if c["cell_type"] == "code")
    assert checks >= 1 and cleared >= checks, "every notebook has exercises, and their outputs are cleared"


def test_student_copies_are_valid_notebooks(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    student.main(["--out", str(tmp_path)])
    written = sorted(tmp_path.glob("*.ipynb"))
    assert [p.name for p in written] == [p.name for p in NOTEBOOKS]
    for path in written:
        nbformat.validate(nbformat.read(path, as_version=4))


def test_student_refuses_to_write_over_the_course(tmp_path):
    with pytest.raises(SystemExit):
        student.main(["--out", str(ROOT / "notebooks"), str(NOTEBOOKS[0])])


def test_a_stored_solution_call_counts_as_a_spoiler():
    cell = {"cell_type": "code", "metadata": {}, "source": ["lesson02.stable_softmax.solution()"], "outputs": []}
    assert student.is_spoiler(cell)
    assert not student.is_spoiler({**cell, "source": ["lesson02.weights_at_temperature.show()"]})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_prediction_answer_is_stored_collapsed(path):
    """JupyterLab and classic Notebook open these outputs collapsed (run `python scripts/spoilers.py --write`)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    open_cells = [i for i, cell in enumerate(notebook["cells"])
                  if spoilers.is_prediction_answer(cell) and not spoilers.is_collapsed(cell)]
    assert not open_cells, (f"{path.name}: cells {open_cells} are tagged prediction-answer but stored open; "
                            f"run `python scripts/spoilers.py --write`")


def test_spoilers_write_changes_only_metadata_and_keeps_the_format(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    for path in NOTEBOOKS:
        assert spoilers.notebook_text(spoilers.read_notebook(path)) == path.read_text(encoding="utf-8"), \
            f"{path.name}: reading and writing back must not change a byte (Jupyter's own format)"
        notebook = spoilers.read_notebook(path)
        cells = notebook["cells"]
        cells.append({"cell_type": "code", "execution_count": 1, "id": "spoilertest", "source": "1 + 1",
                      "metadata": {"tags": ["prediction-answer"]},
                      "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                   "data": {"text/plain": "2"}}]})
        copy = tmp_path / path.name
        copy.write_text(spoilers.notebook_text(notebook), encoding="utf-8")
        assert spoilers.main([str(copy)]) == 1, "check mode reports the open cell"
        assert spoilers.main(["--write", str(copy)]) == 0
        assert spoilers.main([str(copy)]) == 0
        written = spoilers.read_notebook(copy)
        for mine, theirs in zip(written["cells"], cells):
            assert mine.get("outputs") == theirs.get("outputs") and mine["source"] == theirs["source"]
        assert written["cells"][-1]["metadata"] == {"collapsed": True, "jupyter": {"outputs_hidden": True},
                                                    "tags": ["prediction-answer"]}
        nbformat.validate(nbformat.read(copy, as_version=4))
