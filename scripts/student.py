"""Write the notebooks a student should receive: the answers to predictions and the exercise outputs cleared.

    python scripts/student.py                     # every notebook of notebooks/ -> build/student/
    python scripts/student.py --out handout notebooks/04_causal_attention.ipynb

In each copy, these cells lose their stored outputs (and execution counts); every other cell keeps its outputs, so
the pictures, tables and printed shapes are there to read before anything runs:

* cells tagged ``prediction-answer``: their output answers the "Predict ..." prompt just above them;
* exercise cells: every cell that calls an exercise's ``.check(``, ``.solution(`` or ``.hint(`` (a check's stored
  output is only "not done yet", but a stored ``.solution()`` would be the answer itself).

Sources, metadata and the order of the cells stay as they are; the cleared cells keep their tags and are marked
collapsed no longer (there is nothing to collapse). The course's own notebooks are only read, never written.
The copies still run top to bottom as the course does; a student needs the course's ``helpers`` package
installed (``pip install .`` in the course folder, or the notebook's first cell on Colab), or the instructor's
build without model answers (``scripts/withhold_solutions.py``).

Only the standard library: it runs with any Python 3.9+.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "prediction-answer"
EXERCISE_CALL = re.compile(r"\blesson\d\d\.\w+\.(check|solution|hint)\(")


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def is_spoiler(cell: dict) -> bool:
    """True for a code cell whose stored output a student must not see before working on it."""
    if cell.get("cell_type") != "code":
        return False
    return TAG in cell.get("metadata", {}).get("tags", []) or bool(EXERCISE_CALL.search(source(cell)))


def student_copy(notebook: dict) -> tuple[dict, int]:
    """A copy of ``notebook`` with every spoiler's outputs cleared, and how many cells were cleared."""
    copy = json.loads(json.dumps(notebook))
    cleared = 0
    for cell in copy.get("cells", []):
        if is_spoiler(cell):
            cell["outputs"], cell["execution_count"] = [], None
            metadata = cell.get("metadata", {})
            metadata.pop("collapsed", None)
            if isinstance(metadata.get("jupyter"), dict):
                metadata["jupyter"].pop("outputs_hidden", None)
                if not metadata["jupyter"]:
                    metadata.pop("jupyter")
            cleared += 1
    return copy, cleared


def write_copies(paths: list[Path], out: Path) -> list[tuple[Path, int]]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        copy, cleared = student_copy(notebook)
        target = out / path.name
        if target.resolve() == path.resolve():
            raise SystemExit(f"refusing to overwrite the course's own notebook {path}: choose another --out")
        target.write_text(json.dumps(copy, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append((target, cleared))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "student", help="default: build/student")
    options = parser.parse_args(argv)
    paths = options.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for target, cleared in write_copies(paths, options.out):
        print(f"{target}: {cleared} cell(s) cleared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
