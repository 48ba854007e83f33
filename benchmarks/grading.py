"""What the grader's sandbox costs, and how long a class takes: a benchmark, not a test.

    python benchmarks/grading.py                          # notebooks 01 and 02, 2 rounds, --jobs 1
    python benchmarks/grading.py --notebooks 04 06 --rounds 3

For each notebook (the student copy that scripts/student.py writes, with the course's model answers in place of
the placeholder functions, so that every checker runs to its end), in the same run and on the same machine,
alternating so that a change of load hits both alike:

* the notebook run (a fresh kernel, top to bottom) and the check re-run, each timed on its own, once in the
  bubblewrap sandbox and once without (``--sandbox none``: the same work with resource limits only);
* the overhead ratio: sandboxed / unsandboxed wall time, per phase and for the whole submission, and the ratio of
  the CPU time the sandboxed processes report (medians of the rounds; on a loaded machine the wall times move
  with the load, the CPU times much less);
* the estimate for a class: 60 students x the notebooks named, ``--jobs 1``. With one job the submissions are
  graded one after another, each in fresh processes that share nothing, so the class's time is the sum of its
  submissions' times: 60 x (the median sandboxed time of each notebook), with the fastest and slowest round as
  the range. Real submissions differ from the model answers (an infinite loop costs up to ``--timeout``).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


grade = _load("grade", ROOT / "scripts" / "grade.py")
student = _load("student", ROOT / "scripts" / "student.py")


def answered_copy(path: Path, out: Path) -> Path:
    """The student copy of ``path`` with each exercise's placeholder function replaced by the model answer."""
    from helpers.exercises import all_exercises
    exercises = all_exercises()
    notebook, _ = student.student_copy(json.loads(path.read_text(encoding="utf-8")))
    for cell in notebook["cells"]:
        text = grade.answers.source(cell)
        call = re.search(r"\b(lesson\d\d\.\w+)\.check\((\w+)\)", text)
        if cell.get("cell_type") != "code" or not call or call.group(1) not in exercises:
            continue
        model = exercises[call.group(1)]._solution_source(call.group(2))   # the model answer under the cell's name
        lines = text.splitlines()
        placeholder = next(node for node in ast.parse(text).body
                           if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == call.group(2))
        lines[placeholder.lineno - 1:placeholder.end_lineno] = model.rstrip().splitlines()
        cell["source"] = "\n".join(lines) + "\n"  # the rest of the cell (its imports, .show()) as it was
    target = out / path.name
    target.write_text(json.dumps(notebook), encoding="utf-8")
    return target


def timed_submission(context, path: Path) -> dict[str, float]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    lesson = grade.lesson_of(path, notebook)
    items = {name: grade.answers.answer_cell(notebook, name) for name in context.exercises[lesson]}
    started = time.monotonic()
    run = grade._run_notebook(context, 0, path)
    middle = time.monotonic()
    reports, problem, check_cpu = grade._run_checks(context, 0, lesson, items)
    ended = time.monotonic()
    if run.get("problem") or problem:
        raise SystemExit(f"{path.name}: {run.get('problem') or problem}")
    passed = sum(report.get("status") == "correct" for report in reports.values())
    return {"run": middle - started, "checks": ended - middle, "total": ended - started,
            "cpu": float(run.get("cpu") or 0.0) + check_cpu, "passed": passed, "exercises": len(items)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", nargs="+", default=["01", "02"], help="course notebooks by number")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per notebook and mode (default 2)")
    parser.add_argument("--students", type=int, default=60)
    options = parser.parse_args(argv)
    sandbox = grade.Sandbox.detect()
    if sandbox.kind != "bwrap":
        print(f"No sandbox on this machine ({sandbox.reason}): nothing to compare.")
        return 1
    plain = grade.Sandbox.detect("none")
    limits = grade.Limits()
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as temporary:
        folder = Path(temporary)
        course = grade._withheld_build(folder / "course")
        folder.chmod(0o755)
        paths = [answered_copy(next((ROOT / "notebooks").glob(f"{number}_*.ipynb")), folder)
                 for number in options.notebooks]

        def context(box):
            return grade.Context(box, course, grade.course_exercises(), grade.Points(), limits, 300, 60,
                                 5_000_000, 12345)

        modes = {"bwrap": context(sandbox), "none": context(plain)}
        print(f"{sandbox.kind} at {sandbox.bwrap}; {options.rounds} round(s) per notebook and mode, --jobs 1; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
        times: dict[tuple[str, str], list[dict]] = {}
        for path in paths:
            timed_submission(modes["none"], path)  # warm the disk cache, not counted
            for round_number in range(options.rounds):
                for mode in (("bwrap", "none") if round_number % 2 == 0 else ("none", "bwrap")):
                    result = timed_submission(modes[mode], path)
                    times.setdefault((path.name, mode), []).append(result)
                    print(f"  {path.name:38s} {mode:5s} notebook {result['run']:6.1f} s  checks "
                          f"{result['checks']:5.1f} s  CPU {result['cpu']:5.1f} s  ({result['passed']} of "
                          f"{result['exercises']} passed)", flush=True)
    print()
    class_seconds, low, high = 0.0, 0.0, 0.0
    for path in paths:
        sandboxed, unsandboxed = times[(path.name, "bwrap")], times[(path.name, "none")]
        line = []
        for phase in ("run", "checks", "total", "cpu"):
            ratio = (statistics.median(r[phase] for r in sandboxed)
                     / statistics.median(r[phase] for r in unsandboxed))
            line.append(f"{phase} x{ratio:.2f}")
        print(f"{path.name}: sandboxed / unsandboxed (medians; run, checks, total: wall time; cpu: CPU-s of the "
              f"sandboxed processes): " + ", ".join(line))
        totals = [r["total"] for r in sandboxed]
        class_seconds += options.students * statistics.median(totals)
        low += options.students * min(totals)
        high += options.students * max(totals)
    print(f"Load average at the end: {os.getloadavg()[0]:.1f} (wall times move with it; CPU-s much less).")
    print(f"\nEstimate, {options.students} students x {len(paths)} notebooks, --jobs 1, sandboxed: "
          f"{class_seconds / 60:.1f} min (range {low / 60:.1f} to {high / 60:.1f} min): {options.students} x the "
          f"median sandboxed time of a submission of each notebook, summed (one job: one after another).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
