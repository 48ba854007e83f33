"""Store the outputs that answer a "Predict ..." prompt collapsed, so that scrolling does not give them away.

Every code cell whose output answers a prediction carries the cell tag ``prediction-answer`` (lesson authors set
it). This script gives each such cell the metadata the front ends read when they open a notebook:

* ``metadata.jupyter.outputs_hidden = true``: JupyterLab (and Notebook 7, built on it) shows the output area
  collapsed, with a bar to click to open it;
* ``metadata.collapsed = true``: classic Notebook (6.x) does the same.

Google Colab reads neither key as far as we could find (its own cell metadata hides code, ``cellView: "form"``,
or whole sections, ``collapsed_sections``, not one cell's output): there, hand out student copies
(``scripts/student.py``), whose prediction outputs are cleared. Strict nbval compares outputs, not metadata, so
collapsing changes no test.

    python scripts/spoilers.py            # check: list tagged cells without the metadata (exit status 1 if any)
    python scripts/spoilers.py --write    # set it on every tagged cell (only the metadata changes)
    python scripts/spoilers.py --prompts  # also list "Predict" prompts whose next code cell has no tag

Only the standard library: it runs with any Python 3.9+.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TAG = "prediction-answer"
ROOT = Path(__file__).resolve().parent.parent


def read_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def notebook_text(notebook: dict) -> str:
    """The notebook as Jupyter (nbformat) writes it: sorted keys, one-space indent, UTF-8, final newline."""
    return json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def is_prediction_answer(cell: dict) -> bool:
    return cell.get("cell_type") == "code" and TAG in cell.get("metadata", {}).get("tags", [])


def is_collapsed(cell: dict) -> bool:
    metadata = cell.get("metadata", {})
    return metadata.get("jupyter", {}).get("outputs_hidden") is True and metadata.get("collapsed") is True


def collapse(cell: dict) -> None:
    metadata = cell.setdefault("metadata", {})
    metadata.setdefault("jupyter", {})["outputs_hidden"] = True
    metadata["collapsed"] = True


def untagged_prompts(notebook: dict) -> list[str]:
    """The start of each markdown cell that asks to predict but whose next code cell has no tag."""
    found, cells = [], notebook.get("cells", [])
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown" or not re.search(r"\bPredict\b", source(cell)):
            continue
        following = next((c for c in cells[index + 1:] if c.get("cell_type") == "code"), None)
        if following is not None and not is_prediction_answer(following):
            line = next(line for line in source(cell).splitlines() if "Predict" in line)
            found.append(f"cell {index}: {line.strip()[:90]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--write", action="store_true", help="set the metadata (otherwise only check)")
    parser.add_argument("--prompts", action="store_true", help='also list untagged "Predict" prompts')
    options = parser.parse_args(argv)
    paths = options.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    missing = 0
    for path in paths:
        notebook = read_notebook(path)
        tagged = [i for i, cell in enumerate(notebook.get("cells", [])) if is_prediction_answer(cell)]
        open_cells = [i for i in tagged if not is_collapsed(notebook["cells"][i])]
        if options.write and open_cells:
            for index in open_cells:
                collapse(notebook["cells"][index])
            path.write_text(notebook_text(notebook), encoding="utf-8")
            print(f"{path.name}: {len(tagged)} prediction answer(s), collapsed {len(open_cells)}")
        else:
            missing += len(open_cells)
            state = f"{len(open_cells)} not collapsed (cells {open_cells})" if open_cells else "all collapsed"
            print(f"{path.name}: {len(tagged)} prediction answer(s), {state}")
        if options.prompts:
            for line in untagged_prompts(notebook):
                print(f"    untagged prompt, {line}")
    if missing:
        print(f"{missing} tagged cell(s) would show their answer: run `python scripts/spoilers.py --write`.")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
