"""Build a copy of the course's package without the model answers, for an instructor to hand out.

    python scripts/withhold_solutions.py                   # -> build/withheld/ (install: pip install build/withheld)
    python scripts/withhold_solutions.py --out /tmp/course

The copy holds what ``pip install`` needs (pyproject.toml, README.md, LICENSE, requirements-lock.txt and the
``helpers`` package). In it, every model answer of ``helpers/exercises/lessonNN.py`` (the functions and classes
named ``_solution...`` or ``_Solution...``) keeps its name and signature but its body is one line that raises, and
``.solution()`` prints one sentence: the instructor has withheld the model answers. Checkers, hints, known mistakes
and their messages are untouched: they are built from the course's canonical code, not from the model answers.

This is a convenience, not a secret: the course's source, model answers included, is public, and a student who
looks for it will find it. It keeps the answers out of the package students install and out of ``.solution()``.

A model answer that a checker itself calls (as its reference, or to build a known mistake) cannot be removed
without breaking that checker: the script keeps it and names it, and exits with status 2 so that a build script
notices (the course's authors should then give that checker a reference of its own).

Only the standard library: it runs with any Python 3.9+.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("pyproject.toml", "README.md", "LICENSE", "requirements-lock.txt")
FLAG_LINE = "SOLUTIONS_WITHHELD = False"
RAISE = 'raise NotImplementedError("withheld by your instructor")'


def _is_solution(name: str) -> bool:
    return name.startswith(("_solution", "_Solution"))


def _other_uses(tree: ast.Module, name: str) -> int:
    """How often ``name`` is read in the module other than as ``solution=name`` in an exercise's definition."""
    as_solution = {id(keyword.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
                   for keyword in node.keywords if keyword.arg == "solution"}
    # A positional argument in the solution slot counts as that, too: FunctionExercise(title, task, reference,
    # cases, hint, solution, ...) and SpotTheBug(..., hint, solution, buggy, ...) both put it sixth.
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and len(node.args) >= 6:
            as_solution.add(id(node.args[5]))
    return sum(1 for node in ast.walk(tree)
               if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
               and id(node) not in as_solution)


def withhold(text: str) -> tuple[str, list[str], list[str]]:
    """``text`` (a lesson module) with its model answers emptied; the names emptied and the names kept."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    emptied, kept, edits = [], [], []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not _is_solution(node.name):
            continue
        if _other_uses(tree, node.name):
            kept.append(node.name)
            continue
        indent = " " * (node.col_offset + 4)
        if isinstance(node, ast.ClassDef):
            body = f"{indent}def __init__(self, *args, **kwargs):\n{indent}    {RAISE}\n"
        else:
            body = f"{indent}{RAISE}\n"
        first = node.body[0].lineno
        if first == node.lineno:  # a one-line definition: rebuild the header from the syntax tree
            header = ast.unparse(type(node)(**{**node.__dict__, "body": [ast.Pass()], "decorator_list": []}))
            header = header.rsplit("\n", 1)[0] + "\n"
            edits.append((node.lineno - 1, node.end_lineno, header + body))
        else:
            edits.append((first - 1, node.end_lineno, body))
        emptied.append(node.name)
    for start, end, replacement in sorted(edits, reverse=True):
        lines[start:end] = [replacement]
    result = "".join(lines)
    ast.parse(result)  # still valid Python
    return result, emptied, kept


def build(out: Path) -> tuple[list[str], list[str]]:
    """Write the copy to ``out``; returns the model answers emptied and those kept (as ``lessonNN.name``)."""
    if out.resolve() == ROOT.resolve() or ROOT.resolve() in out.resolve().parents and out.name == "helpers":
        raise SystemExit("choose an --out folder outside the course's own package")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in COPIED:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, out / name)
    shutil.copytree(ROOT / "helpers", out / "helpers", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    core = out / "helpers" / "exercises" / "core.py"
    text = core.read_text(encoding="utf-8")
    if FLAG_LINE not in text:
        raise SystemExit(f"{core}: no line {FLAG_LINE!r} to switch")
    core.write_text(text.replace(FLAG_LINE, "SOLUTIONS_WITHHELD = True", 1), encoding="utf-8")
    emptied, kept = [], []
    for lesson in sorted((out / "helpers" / "exercises").glob("lesson*.py")):
        new_text, gone, stay = withhold(lesson.read_text(encoding="utf-8"))
        lesson.write_text(new_text, encoding="utf-8")
        emptied += [f"{lesson.stem}.{name}" for name in gone]
        kept += [f"{lesson.stem}.{name}" for name in stay]
    return emptied, kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "withheld", help="default: build/withheld")
    options = parser.parse_args(argv)
    emptied, kept = build(options.out)
    print(f"{options.out}: {len(emptied)} model answers withheld; install it with `pip install {options.out}`.")
    if kept:
        print(f"Kept {len(kept)} model answer(s) that a checker calls itself (still readable in the package): "
              + ", ".join(kept))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
