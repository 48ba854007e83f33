"""Grade submitted notebooks: run each in a fresh kernel, collect every exercise checker's verdict, print a table.

    python scripts/grade.py submissions/                    # one folder per student inside (or one student's folder)
    python scripts/grade.py alice.ipynb bob.ipynb --csv grades.csv --timeout 300 --jobs 2

A submission is a notebook of the course (``NN_*.ipynb``) in which the student replaced the placeholders. For each
one, in its own process, with a time limit for the whole notebook (``--timeout``, default 300 s):

1. the notebook alone is copied into a new temporary folder, which becomes the working folder (nothing else of the
   student's folder or of yours is copied there; the folder is deleted afterwards);
2. a fresh Jupyter kernel runs every cell in order (a cell that raises does not stop the next ones), with an
   environment reduced to what it needs: ``PATH``, ``HOME``/``TMPDIR``/Jupyter's and matplotlib's folders inside
   the temporary folder, ``PYTHONPATH`` to this course (so the checkers are yours, not the student's), and
   ``ATTENTION_COURSE_GRADE_RECORD``: every ``.check(...)`` appends its verdict to a file there (and the learner's
   progress record stays off). Output beyond ``--max-output`` bytes per notebook is dropped, not kept in memory;
3. past the time limit the kernel and the process are killed; the verdicts recorded so far count.

Each exercise of the notebook's lesson gets one result: ``passed``; ``failed: <the checker's one-line message>``;
``not attempted`` (still the placeholder, or its check cell was removed); ``error: ...`` (the check cell raised
before the checker could run, or the notebook ran past the time limit, or the kernel died). If a notebook calls a
check more than once, the last verdict counts (the one its cell shows at the end). One submission's failure never
stops the others. The table goes to the screen, the same table to ``--csv`` (default ``grades.csv``).

What this does not isolate, honestly: the student's code runs as your user, on your machine. It starts in an empty
folder with a scrubbed environment, but it can still read any file your user can read by its absolute path, use
the network, start processes, use all your memory, and forge its own verdicts (it runs in the same kernel as the
checkers, so it could, e.g., redefine them). For submissions you do not trust, run this command inside a
container or virtual machine, or as a user with no access to anything else; and read a notebook whose results look
too good.

Needs the course's environment (``pip install -e ".[lab]"``: nbclient, ipykernel); the students' notebooks need
nothing else.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECK_CALL = re.compile(r"\b(lesson\d\d)\.(\w+)\.check\(")
RECORD_FILE, RESULT_FILE = "checks.jsonl", "cells.json"
PASSED, NOT_ATTEMPTED = "passed", "not attempted"


def _source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def course_exercises() -> dict[str, list[str]]:
    """``{"lesson04": ["lesson04.causal_mask", ...]}``, read from the course's own notebooks (no import needed)."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for cell in notebook.get("cells", []):
            for lesson, name in CHECK_CALL.findall(_source(cell)):
                names = found.setdefault(lesson, [])
                if f"{lesson}.{name}" not in names:
                    names.append(f"{lesson}.{name}")
    return found


def lesson_of(path: Path, notebook: dict | None) -> str | None:
    """The lesson a submission belongs to: from its check calls, else from its file name (``04_...``)."""
    if notebook is not None:
        lessons = [lesson for cell in notebook.get("cells", []) for lesson, _ in CHECK_CALL.findall(_source(cell))]
        if lessons:
            return max(set(lessons), key=lessons.count)
    match = re.match(r"(\d\d)_", path.name)
    return f"lesson{match.group(1)}" if match else None


# --- the worker: runs in its own process, inside the temporary folder -------------------------------------------
def run_one(notebook_path: Path, timeout: float, max_output: int) -> None:
    """Execute ``notebook_path`` in a fresh kernel; write what each cell did to RESULT_FILE next to it."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    class Client(NotebookClient):
        dropped = 0
        kept = 0

        async def async_start_new_kernel(self, **kwargs):
            await super().async_start_new_kernel(**kwargs)
            # Kept in memory, never in a file the student's code could rewrite: the pid to kill on SIGTERM.
            kernels.append(getattr(getattr(self.km, "provisioner", None), "process", None))

        def output(self, outs, msg, display_id, cell_index):
            size = len(json.dumps(msg.get("content", {})))
            if self.kept + size > max_output:
                self.dropped += size
                return None
            self.kept += size
            return super().output(outs, msg, display_id, cell_index)

    kernels: list = []

    def stop(signum, frame):  # the grader's time limit: take the kernel (its own process group) down too
        for process in filter(None, kernels):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()
        os._exit(124)

    signal.signal(signal.SIGTERM, stop)
    folder = notebook_path.parent
    notebook = nbformat.read(notebook_path, as_version=4)
    client = Client(notebook, timeout=max(1, int(timeout)), allow_errors=True, kernel_name="grading",
                    interrupt_on_timeout=False, record_timing=False, store_widget_state=False,
                    resources={"metadata": {"path": str(folder)}})
    problem = None
    try:
        client.execute()
    except CellTimeoutError:
        problem = f"time limit ({timeout:g} s) reached"
    except DeadKernelError:
        problem = "the kernel died (the notebook exited Python or ran out of memory)"
    except Exception as error:  # the kernel did not start, a broken notebook file, ...
        problem = f"{type(error).__name__}: {str(error)[:200]}"
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
        calls = [f"{lesson}.{name}" for lesson, name in CHECK_CALL.findall(cell.source)]
        if calls or errors:
            error = f"{errors[0].get('ename')}: {str(errors[0].get('evalue'))[:200]}" if errors else None
            cells.append({"index": index, "checks": calls, "error": error})
    Path(folder / RESULT_FILE).write_text(json.dumps({"cells": cells, "problem": problem,
                                                      "dropped_output_bytes": client.dropped}))


# --- the grader ------------------------------------------------------------------------------------------------
@dataclass
class Submission:
    student: str
    path: Path


@dataclass
class Outcome:
    student: str
    notebook: str
    lesson: str | None
    results: dict[str, str] = field(default_factory=dict)
    note: str = ""
    seconds: float = 0.0


def find_submissions(arguments: list[Path]) -> list[Submission]:
    """Files are students of their own; a folder of notebooks is one student; a folder of folders, a class."""
    found = []
    for argument in arguments:
        if argument.is_file():
            found.append(Submission(argument.stem, argument))
        elif argument.is_dir():
            notebooks = sorted(p for p in argument.glob("*.ipynb") if not p.name.startswith("."))
            if notebooks:
                found += [Submission(argument.name, p) for p in notebooks]
            for folder in sorted(p for p in argument.iterdir() if p.is_dir() and not p.name.startswith(".")):
                found += [Submission(folder.name, p) for p in sorted(folder.glob("*.ipynb"))]
        else:
            found.append(Submission(argument.stem, argument))  # reported as unreadable below
    return found


def _environment(folder: Path) -> dict[str, str]:
    home = folder / "home"
    for sub in ("tmp", "jupyter/kernels/grading", "ipython", "matplotlib", "runtime", "config"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    kernel = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
              "display_name": "grading", "language": "python"}
    (home / "jupyter" / "kernels" / "grading" / "kernel.json").write_text(json.dumps(kernel))
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(home), "TMPDIR": str(home / "tmp"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "PYTHONPATH": str(ROOT), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "JUPYTER_PATH": str(home / "jupyter"), "JUPYTER_DATA_DIR": str(home / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_PLATFORM_DIRS": "1", "IPYTHONDIR": str(home / "ipython"), "MPLCONFIGDIR": str(home / "matplotlib"),
        "ATTENTION_COURSE_GRADE_RECORD": str(folder / RECORD_FILE), "ATTENTION_COURSE_PROGRESS": "off",
    }


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to a worker still running (it kills its kernel, then exits); SIGKILL if it does not within 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)  # the worker leads its own process group (start_new_session)
        except OSError:
            pass
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _one_line(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return re.sub(r"^(❌|✅|⏳)\s*[^:]*:\s*", "", line).strip()


def grade_one(submission: Submission, exercises: dict[str, list[str]], timeout: float,
              max_output: int) -> Outcome:
    started = time.monotonic()
    outcome = Outcome(submission.student, submission.path.name, None)
    try:
        try:
            notebook = json.loads(submission.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            outcome.lesson = lesson_of(submission.path, None)
            outcome.note = f"unreadable notebook: {type(error).__name__}"
            for name in exercises.get(outcome.lesson, []):
                outcome.results[name] = f"error: {outcome.note}"
            return outcome
        outcome.lesson = lesson = lesson_of(submission.path, notebook)
        expected = exercises.get(lesson, [])
        if not expected:
            outcome.note = "no exercise of the course found in this notebook"
            return outcome
        with tempfile.TemporaryDirectory(prefix="grade-") as temporary:
            folder = Path(temporary)
            copy = folder / "submission.ipynb"
            shutil.copyfile(submission.path, copy)
            with open(folder / "worker.log", "wb") as log:
                process = subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve()), "--worker", str(copy), "--timeout", str(timeout),
                     "--max-output", str(max_output)],
                    cwd=folder, env=_environment(folder), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True)
                try:
                    process.wait(timeout=timeout + 15)  # the worker stops itself at the limit; this is the backstop
                    timed_out = False
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    _stop(process)
            cells = json.loads((folder / RESULT_FILE).read_text()) if (folder / RESULT_FILE).exists() else None
            records = []
            if (folder / RECORD_FILE).exists():
                for line in (folder / RECORD_FILE).read_text(encoding="utf-8", errors="replace").splitlines():
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass
            log_tail = (folder / "worker.log").read_text(errors="replace")[-300:].strip()
        if cells is None:
            problem = (f"time limit ({timeout:g} s) reached" if timed_out else
                       f"the grading process failed: {log_tail.splitlines()[-1] if log_tail else 'no message'}")
            cells = {"cells": [], "problem": problem, "dropped_output_bytes": 0}
        outcome.note = "; ".join(filter(None, [
            cells["problem"],
            f"{cells['dropped_output_bytes']:,} bytes of output dropped" if cells["dropped_output_bytes"] else ""]))
        verdicts = {}
        for record in records:
            if isinstance(record, dict) and record.get("exercise") in expected:
                verdicts[record["exercise"]] = record
        cell_errors = {}
        called = set()
        for cell in cells["cells"]:
            called.update(cell["checks"])
            for name in cell["checks"]:
                if cell["error"]:
                    cell_errors[name] = cell["error"]
        for name in expected:
            verdict = verdicts.get(name)
            if verdict is not None:
                status = verdict.get("status")
                outcome.results[name] = (PASSED if status == "correct" else NOT_ATTEMPTED if status == "not done"
                                         else f"failed: {_one_line(str(verdict.get('message', '')))}")
            elif name in cell_errors:
                outcome.results[name] = f"error: {cell_errors[name]}"
            elif cells["problem"]:
                outcome.results[name] = f"error: {cells['problem']}"
            elif name not in called:
                outcome.results[name] = f"{NOT_ATTEMPTED} (no cell calls its check)"
            else:
                outcome.results[name] = "error: its check did not run"
        return outcome
    except Exception as error:  # never let one submission stop the others
        outcome.note = f"grader error: {type(error).__name__}: {error}"
        return outcome
    finally:
        outcome.seconds = time.monotonic() - started


def table(outcomes: list[Outcome]) -> tuple[list[str], list[list[str]]]:
    """Rows of (student, notebook, seconds, note, one column per exercise) and the header."""
    columns: list[str] = []
    for outcome in outcomes:
        columns += [name for name in outcome.results if name not in columns]
    header = ["student", "notebook", "seconds", "note", *columns]
    rows = [[o.student, o.notebook, f"{o.seconds:.1f}", o.note, *[o.results.get(c, "") for c in columns]]
            for o in outcomes]
    return header, rows


def print_table(header: list[str], rows: list[list[str]], width: int = 34) -> None:
    def short(text: str) -> str:
        return text if len(text) <= width else text[: width - 1] + "…"
    shown = [[short(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in shown) for i in range(len(header))]
    for number, row in enumerate(shown):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if number == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="*", type=Path, help="notebooks, a student's folder, or a class folder")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per notebook (default 300)")
    parser.add_argument("--csv", type=Path, default=Path("grades.csv"), help="where to write the table as CSV")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at the same time (default 1)")
    parser.add_argument("--max-output", type=int, default=5_000_000, help="output bytes kept per notebook")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        run_one(options.worker, options.timeout, options.max_output)
        return 0
    if not options.submissions:
        parser.error("name at least one notebook or folder")
    submissions = find_submissions(options.submissions)
    if not submissions:
        print("No notebooks found.")
        return 1
    exercises = course_exercises()
    print(f"Grading {len(submissions)} notebook(s), at most {options.timeout:g} s each ...", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        outcomes = list(pool.map(lambda s: grade_one(s, exercises, options.timeout, options.max_output),
                                 submissions))
    header, rows = table(outcomes)
    print_table(header, rows)
    options.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(options.csv, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
    passed = sum(r == PASSED for o in outcomes for r in o.results.values())
    total = sum(len(o.results) for o in outcomes)
    print(f"\n{passed} of {total} exercise results passed. Full messages: {options.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
