"""The grading command (scripts/grade.py) on hostile submissions: pass, fail, raise, loop forever, print megabytes,
leave the placeholder, kill the kernel, look outside their folder. Small synthetic notebooks of lesson 01."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("grade", ROOT / "scripts" / "grade.py")
grade = importlib.util.module_from_spec(spec)
sys.modules["grade"] = grade  # its dataclasses look their module up
spec.loader.exec_module(grade)

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

LESSON = "lesson01"
EXERCISES = grade.course_exercises()[LESSON]  # as the course's notebook 01 calls them, e.g. lesson01.cosine_scores


def _notebook(path: Path, *cells: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"cell{i}", "metadata": {},
                           "outputs": [], "source": source} for i, source in enumerate(cells)],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook), encoding="utf-8")
    return path


def _check(name: str, answer: str) -> str:
    return f"{name}.check({answer})"


def _read(csv_path: Path) -> dict[str, dict[str, str]]:
    with open(csv_path, newline="", encoding="utf-8") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def test_grading_a_class_of_hostile_submissions(tmp_path, monkeypatch, capsys):
    first, *others = EXERCISES
    imports = f"from helpers.exercises import {LESSON}"
    solution = "{}._solution"
    classroom = tmp_path / "class"
    # Passes everything, and checks on the way that it runs in an empty folder without the grader's environment.
    (classroom / "alice").mkdir(parents=True)
    (classroom / "alice" / "notes.txt").write_text("a file next to the notebook")
    _notebook(classroom / "alice" / "01_dot_product_scores.ipynb", imports,
              "import os\n"
              "assert 'GRADER_TEST_SECRET' not in os.environ, 'the environment leaked'\n"
              "assert not os.path.exists('notes.txt'), 'the submission folder leaked'\n"
              f"assert os.listdir('.') and {str(tmp_path)!r} not in os.getcwd(), os.getcwd()\n"
              + _check(first, solution.format(first)),
              *[_check(name, solution.format(name)) for name in others])
    # A wrong answer, then a cell that raises before its check.
    _notebook(classroom / "bob" / "01_dot_product_scores.ipynb", imports,
              "def wrong(*args, **kwargs):\n    return 3\n" + _check(first, "wrong"),
              *["1 / 0\n" + _check(name, solution.format(name)) for name in others])
    # Megabytes of output, then the placeholders, as shipped.
    _notebook(classroom / "carol" / "01_dot_product_scores.ipynb", imports,
              "for _ in range(40):\n    print('x' * 100_000)",
              "def placeholder(*args):\n    raise NotImplementedError",
              *[_check(name, "placeholder") for name in EXERCISES])
    # A notebook that is not JSON at all.
    (classroom / "dave").mkdir()
    (classroom / "dave" / "01_dot_product_scores.ipynb").write_text("{ not a notebook")
    monkeypatch.setenv("GRADER_TEST_SECRET", "the instructor's token")
    table = tmp_path / "grades.csv"
    assert grade.main([str(classroom), "--csv", str(table), "--timeout", "240", "--jobs", "3",
                       "--max-output", "200000"]) == 0
    rows = _read(table)
    assert set(rows) == {"alice", "bob", "carol", "dave"}
    assert all(rows["alice"][name] == "passed" for name in EXERCISES), rows["alice"]
    assert rows["bob"][first].startswith("failed: ") and "int" in rows["bob"][first], rows["bob"][first]
    for name in others:
        assert rows["bob"][name] == "error: ZeroDivisionError: division by zero", rows["bob"][name]
    assert all(rows["carol"][name] == "not attempted" for name in EXERCISES), rows["carol"]
    assert "bytes of output dropped" in rows["carol"]["note"]
    assert all(rows["dave"][name].startswith("error: unreadable notebook") for name in EXERCISES), rows["dave"]
    out = capsys.readouterr().out
    assert "alice" in out and "passed" in out and "of" in out


def test_a_notebook_that_loops_forever_or_kills_its_kernel_does_not_stop_the_rest(tmp_path):
    loops = _notebook(tmp_path / "loops" / "01_dot_product_scores.ipynb", "while True:\n    pass",
                      *[_check(name, "f") for name in EXERCISES])
    exits = _notebook(tmp_path / "exits" / "01_dot_product_scores.ipynb", "import os\nos._exit(3)",
                      *[_check(name, "f") for name in EXERCISES])
    missing = tmp_path / "nobody" / "01_dot_product_scores.ipynb"
    table = tmp_path / "grades.csv"
    assert grade.main([str(loops), str(exits), str(missing), "--csv", str(table), "--timeout", "6",
                       "--jobs", "2"]) == 0
    with open(table, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3
    loop_row, exit_row, missing_row = rows
    assert all(loop_row[name] == "error: time limit (6 s) reached" for name in EXERCISES), loop_row
    assert float(loop_row["seconds"]) < 6 + 15 + 10
    assert all(exit_row[name].startswith("error: the kernel died") for name in EXERCISES), exit_row
    assert all(missing_row[name].startswith("error: unreadable notebook") for name in EXERCISES), missing_row


def test_submissions_are_found_as_files_student_folders_and_class_folders(tmp_path):
    one = _notebook(tmp_path / "erin.ipynb", "1")
    _notebook(tmp_path / "frank" / "01_a.ipynb", "1")
    _notebook(tmp_path / "frank" / "04_b.ipynb", "1")
    _notebook(tmp_path / "class" / "gina" / "02_c.ipynb", "1")
    found = grade.find_submissions([one, tmp_path / "frank", tmp_path / "class"])
    assert [(s.student, s.path.name) for s in found] == [("erin", "erin.ipynb"), ("frank", "01_a.ipynb"),
                                                         ("frank", "04_b.ipynb"), ("gina", "02_c.ipynb")]
    assert grade.lesson_of(Path("04_causal_attention.ipynb"), {"cells": []}) == "lesson04"
    cells = {"cells": [{"cell_type": "code", "source": "lesson07.merge_states.check(f)"}]}
    assert grade.lesson_of(Path("renamed.ipynb"), cells) == "lesson07"


def test_a_worker_past_the_limit_is_stopped_with_its_process_group():
    import subprocess
    import time
    worker = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"],
                              start_new_session=True)
    started = time.monotonic()
    grade._stop(worker)
    assert worker.poll() is not None and time.monotonic() - started < 12
