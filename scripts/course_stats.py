"""Size of each lesson: markdown words, code lines, cells, printed helper source, and a reading-time estimate.

    python scripts/course_stats.py            # a table, one row per notebook
    python scripts/course_stats.py --json     # the same numbers as JSON

Printed helper lines are the lines of output of cells that print source code (a call of ``inspect.getsource``
or ``show_source``). Sections whose heading says "Deep dive" (and everything under them, up to the next heading of
the same or a higher level) count towards the deep-dive columns, the rest towards the core path.
The time estimate is a rule of thumb, stated so it can be argued with: 120 markdown words a minute, one minute per
code cell (run it, read what it prints), and eight minutes per exercise.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.M)


def _source(cell) -> str:
    return "".join(cell.get("source", ""))


def _output_lines(cell) -> int:
    lines = 0
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            lines += len("".join(out.get("text", "")).splitlines())
    return lines


def lesson_stats(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    stats = {"notebook": path.stem[:2], "cells": len(nb["cells"]), "md_words": 0, "code_lines": 0,
             "code_cells": 0, "printed_helper_lines": 0, "exercises": 0,
             "deep_md_words": 0, "deep_code_cells": 0}
    deep_level = None  # heading level of the deep dive we are in, if any
    for cell in nb["cells"]:
        text = _source(cell)
        if cell["cell_type"] == "markdown":
            for hashes, title in HEADING.findall(text):
                level = len(hashes)
                if deep_level is not None and level <= deep_level:
                    deep_level = None
                if deep_level is None and re.search(r"deep dive", title, re.I):
                    deep_level = level
                if re.match(r"(Exercise|Übung)\b", title.strip(), re.I) and level >= 3:
                    stats["exercises"] += 1
            words = len(text.split())
            stats["md_words"] += words
            if deep_level is not None:
                stats["deep_md_words"] += words
        elif cell["cell_type"] == "code" and text.strip():
            stats["code_cells"] += 1
            stats["code_lines"] += len([line for line in text.splitlines() if line.strip()])
            if deep_level is not None:
                stats["deep_code_cells"] += 1
            if re.search(r"getsource\(|show_source\w*\(", text):
                stats["printed_helper_lines"] += _output_lines(cell)
    core_words = stats["md_words"] - stats["deep_md_words"]
    core_cells = stats["code_cells"] - stats["deep_code_cells"]
    stats["core_minutes"] = round(core_words / 120 + core_cells + 8 * stats["exercises"])
    stats["all_minutes"] = round(stats["md_words"] / 120 + stats["code_cells"] + 8 * stats["exercises"])
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [lesson_stats(p) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    keys = ["notebook", "cells", "md_words", "code_cells", "code_lines", "printed_helper_lines", "exercises",
            "deep_md_words", "core_minutes", "all_minutes"]
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
    total = {k: sum(r[k] for r in rows) for k in keys[1:]}
    print(" | ".join(["all", *(str(total[k]) for k in keys[1:])]))
    core = sum(r["core_minutes"] for r in rows if r["notebook"] <= "06")
    print(f"core path 01-06: about {core} min")


if __name__ == "__main__":
    main()
