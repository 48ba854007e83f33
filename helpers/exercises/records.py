"""A self-learner's record of the exercises they have passed: one small local file, no network.

Each time a checker says ✅ in a Jupyter kernel, the exercise's name and the time are written to
``attention-course-progress.json`` in the kernel's working folder (for the course's notebooks: the ``notebooks``
folder, next to them, where JupyterLab's file browser shows it). Delete the file to start over; nothing else is
kept anywhere. :func:`progress` prints what it holds.

The environment variable ``ATTENTION_COURSE_PROGRESS`` changes this: ``off`` records nothing, any other value is
the path of the file to use. Nothing is recorded outside a Jupyter kernel (scripts, the course's unit tests), for a
check that did not pass, or while ``ATTENTION_COURSE_GRADE_RECORD`` is set (then every check result goes to that file
instead; ``scripts/grade.py`` switches progress off and marks from its own re-run of each checker).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

__all__ = ["progress", "progress_path", "record"]

FILE_NAME = "attention-course-progress.json"
GRADE_RECORD_VARIABLE = "ATTENTION_COURSE_GRADE_RECORD"
PROGRESS_VARIABLE = "ATTENTION_COURSE_PROGRESS"


def progress_path() -> Path | None:
    """Where the progress record is kept, or ``None`` when it is switched off."""
    setting = os.environ.get(PROGRESS_VARIABLE, "").strip()
    if setting.lower() in ("off", "0", "no", "false"):
        return None
    return Path(setting).expanduser() if setting else Path.cwd() / FILE_NAME


def _in_a_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, classic Notebook, Colab, VS Code), False in scripts and tests."""
    zmqshell = sys.modules.get("ipykernel.zmqshell")
    ipython = sys.modules.get("IPython")
    if zmqshell is None or ipython is None:
        return False
    return isinstance(ipython.get_ipython(), zmqshell.ZMQInteractiveShell)


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("passed"), dict) else {}


def record(name: str, feedback) -> str:
    """Note ``feedback`` for exercise ``name``; returns a line to add to the message, or ``""``.

    Called by every check. Never raises: a record that cannot be written is simply not written.
    """
    try:
        grade_file = os.environ.get(GRADE_RECORD_VARIABLE)
        if grade_file:
            line = json.dumps({"exercise": name, "status": feedback.status, "message": feedback.message})
            with open(grade_file, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
            return ""
        path = progress_path()
        if path is None or not feedback.passed or not _in_a_kernel():
            return ""
        new_file = not path.exists()
        data = _read(path) or {"about": "Exercises of the attention course you have passed (delete this file to "
                                        "start over).", "passed": {}}
        data["passed"].setdefault(name, datetime.datetime.now().isoformat(timespec="seconds"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        if new_file:
            return (f"\n   Noted in {path} (your progress: `helpers.exercises.progress()`; "
                    f"delete the file to forget it).")
        return ""
    except Exception:  # a read-only folder, a full disk: the check's answer matters more than the record
        return ""


def progress() -> None:
    """Print, notebook by notebook, which exercises you have passed (from the local record)."""
    from . import all_exercises

    path = progress_path()
    if path is None:
        print(f"Progress is not recorded ({PROGRESS_VARIABLE}=off).")
        return
    passed = _read(path).get("passed", {}) if path.exists() else {}
    lessons: dict[str, list[str]] = {}
    for name in all_exercises():
        lessons.setdefault(name.split(".")[0], []).append(name)
    done = sum(name in passed for names in lessons.values() for name in names)
    total = sum(len(names) for names in lessons.values())
    print(f"Exercises passed: {done} of {total} (record: {path}{'' if path.exists() else ', not written yet'})")
    for lesson, names in lessons.items():
        marks = "  ".join(f"{'✅' if name in passed else '·'} {name.split('.', 1)[1]}" for name in names)
        print(f"  notebook {lesson.removeprefix('lesson')}: {marks}")
