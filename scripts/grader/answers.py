"""Read a submission (outside any sandbox, without running it): each exercise's answer cell and answer expression.

The answer cell of ``lessonNN.name`` is the last code cell that calls ``lessonNN.name.check(...)`` (the verdict a
notebook shows is its last one). Its source without the statements that call the lesson's ``check``/``hint``/
``solution`` is what the check runner executes; the check's first argument (``my_fn`` in ``check(my_fn)``) is
the answer. IPython's ``%magic`` and ``!shell`` lines are dropped. The lesson's imports (``import torch``,
``from helpers.exercises import lesson04``, ...) and the functions and classes the lesson defines come from the
course's own notebook, not the student's (:func:`lesson_preamble`).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

EXERCISE_CALLS = ("check", "hint", "solution")
# Reading these in an answer cell is not needed to solve any exercise: the feedback asks for a look by hand.
SUSPICIOUS = re.compile(r"helpers\.exercises\.core|FunctionExercise|Feedback\b|\._check\b|/proc\b|os\.write\b|"
                        r"\bgc\.|sys\.modules|__code__|\bctypes\b|_solution|\bsetattr\(|__dict__|"
                        r"ATTENTION_COURSE_|\bos\.environ|subprocess|os\.fork|\bpty\b|socket")


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def _python(text: str) -> str:
    return "\n".join("pass  # (a magic line)" if line.lstrip().startswith(("%", "!")) else line
                     for line in text.splitlines())


def _exercise_call(node: ast.AST, lesson: str) -> tuple[str, str] | None:
    """("name", "check") for a call ``lesson.name.check(...)``."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in EXERCISE_CALLS
            and isinstance(node.func.value, ast.Attribute) and isinstance(node.func.value.value, ast.Name)
            and node.func.value.value.id == lesson):
        return node.func.value.attr, node.func.attr
    return None


def answer_cell(notebook: dict, exercise: str) -> dict:
    """``{"code", "answer", "cell", "suspicious"}`` for ``exercise`` ("lesson04.influence"), or ``{"problem"}``."""
    lesson, name = exercise.split(".", 1)
    found = None
    for index, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") == "code" and re.search(rf"\b{lesson}\.{name}\.check\(", source(cell)):
            found = index, source(cell)
    if found is None:
        return {"problem": "no cell calls its check"}
    index, text = found
    text = _python(text)
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        return {"problem": f"its cell (cell {index}) is not valid Python: {error.msg} (line {error.lineno})",
                "cell": index}
    answer = None
    kept = []
    for statement in tree.body:
        calls = [_exercise_call(node, lesson) for node in ast.walk(statement)]
        calls = [call for call in calls if call]
        if not calls:
            kept.append(statement)
            continue
        for node in ast.walk(statement):
            if _exercise_call(node, lesson) == (name, "check") and node.args and answer is None:
                answer = ast.get_source_segment(text, node.args[0]) or ast.unparse(node.args[0])
    if answer is None:
        return {"problem": f"its check in cell {index} is not called with an answer", "cell": index}
    code = "\n".join(ast.get_source_segment(text, statement, padded=True) or ast.unparse(statement)
                     for statement in kept)
    flagged = sorted(set(SUSPICIOUS.findall(text)))
    return {"code": code, "answer": answer, "cell": index, "suspicious": flagged}


PICTURES = ("helpers.live", "helpers.diagrams")  # widgets and figures: never part of an answer, slow to import


def _modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]


def lesson_preamble(root: Path, lesson: str) -> list[str]:
    """What an answer cell may rely on, from the course's own notebook of ``lesson`` (never the student's): its
    imports (not the widgets' and figures') and the functions and classes it defines (``SelfAttention_v2``),
    one statement each, in order. Cells that call a check are left out."""
    number = lesson.removeprefix("lesson")
    statements: list[str] = []
    for path in sorted((root / "notebooks").glob(f"{number}_*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for cell in notebook.get("cells", []):
            text = source(cell)
            if cell.get("cell_type") != "code" or re.search(r"\blesson\d\d\.\w+\.(check|solution)\(", text):
                continue
            try:
                tree = ast.parse(_python(text))
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    if not any(name.startswith(PICTURES) for name in _modules(node)):
                        statements.append(ast.unparse(node))
                elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    statements.append(ast.unparse(node))
    return statements
