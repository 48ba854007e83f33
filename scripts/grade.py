"""Grade submitted notebooks for marks: each in a sandbox of its own, verdicts from a fresh run of the checkers.

    python scripts/grade.py submissions/                    # one folder per student inside (or one student's folder)
    python scripts/grade.py class/ --points points.toml --csv grades.csv --feedback feedback/ --timeout 300

A submission is a notebook of the course (``NN_*.ipynb``) in which the student replaced the placeholders. For each
one, the grader:

1. runs the notebook top to bottom in a fresh Jupyter kernel, inside a sandbox of its own (``--timeout`` for the
   whole notebook, default 300 s; a cell that raises does not stop the next ones); this tells whether it runs and
   which cell raised or was stopped by the time limit, but it gives no marks;
2. re-runs each exercise's checker in another fresh sandbox on the student's *answer cell alone* (the last cell
   that calls the exercise's ``check``), with the checkers imported before any student code, the course's
   withheld build on the path (no model answers to import; ``--course full`` grades against the full course),
   inputs from a seed the notebook never saw, and the verdict sent back over a channel the student's code is not
   handed. Only these verdicts count;
3. kills whatever the submission left running, in any case.

The sandbox is bubblewrap (``bwrap``: new PID namespace, no network, a private ``/tmp`` and working folder,
the course read-only, as a user of its own when you are root) with limits on memory, processes, file size and
CPU time (``--memory``, ``--processes``). Without a working ``bwrap`` the first line says so and the notebooks
run as your user in a temporary folder, with the same limits. docs/grading.md says what is and is not isolated.

Marks: each exercise is worth ``--points`` (default 1 each; partial credit for the share of test inputs right).
The table (one row per student) is printed; ``--csv`` (default ``grades.csv``) has one row per student: total,
maximum, percent and each exercise's points; ``--feedback`` (default ``feedback/`` next to the CSV) has one file per
student with each exercise's verdict, points and the checker's message. The values of your environment variables
never appear in any of them.

Needs the course's environment (``pip install -e ".[lab]"``: nbclient, ipykernel); the students' notebooks need
nothing else.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRADING = Path(__file__).resolve().parent / "grader"
sys.path.insert(0, str(GRADING.parent))

from grader import answers, marks  # noqa: E402
from grader import sandbox as sandbox_module  # noqa: E402
from grader.marks import ERROR, NOT_ATTEMPTED, TIME_LIMIT, Outcome, Points, Redactor, Result  # noqa: E402
from grader.sandbox import TOKEN_VARIABLE, Limits, Sandbox, sweep  # noqa: E402

CHECK_CALL = re.compile(r"\b(lesson\d\d)\.(\w+)\.check\(")
PASSED = marks.PASSED


def course_exercises() -> dict[str, list[str]]:
    """``{"lesson04": ["lesson04.causal_mask", ...]}``, read from the course's own notebooks (no import needed)."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for cell in notebook.get("cells", []):
            for lesson, name in CHECK_CALL.findall(answers.source(cell)):
                names = found.setdefault(lesson, [])
                if f"{lesson}.{name}" not in names:
                    names.append(f"{lesson}.{name}")
    return found


def lesson_of(path: Path, notebook: dict | None) -> str | None:
    """The lesson a submission belongs to: from its check calls, else from its file name (``04_...``)."""
    if notebook is not None:
        lessons = [lesson for cell in notebook.get("cells", [])
                   for lesson, _ in CHECK_CALL.findall(answers.source(cell))]
        if lessons:
            return max(set(lessons), key=lessons.count)
    match = re.match(r"(\d\d)_", path.name)
    return f"lesson{match.group(1)}" if match else None


@dataclass
class Submission:
    student: str
    path: Path


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


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to a process still running (and its process group); SIGKILL if it does not end within 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)  # it leads its own process group (start_new_session)
        except OSError:
            pass
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class Context:
    """What every submission's grading shares."""

    sandbox: Sandbox
    course: Path                  # the package the sandboxes import (the withheld build by default)
    exercises: dict[str, list[str]]
    points: Points
    limits: Limits
    timeout: float
    check_timeout: float
    max_output: int
    seed: int | None
    run_notebooks: bool = True


def _environment(paths: dict[str, str], token: str, bwrap: bool) -> dict[str, str]:
    home = f"{paths['work']}/home"
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": home, "TMPDIR": "/tmp" if bwrap else f"{home}/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "PYTHONPATH": paths["course"], "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "JUPYTER_PATH": f"{home}/jupyter", "JUPYTER_DATA_DIR": f"{home}/jupyter",
        "JUPYTER_CONFIG_DIR": f"{home}/config", "JUPYTER_RUNTIME_DIR": f"{home}/runtime",
        "JUPYTER_PLATFORM_DIRS": "1", "IPYTHONDIR": f"{home}/ipython", "MPLCONFIGDIR": f"{home}/matplotlib",
        "ATTENTION_COURSE_PROGRESS": "off", "MALLOC_ARENA_MAX": "2", TOKEN_VARIABLE: token,
    }


def run_sandboxed(context: Context, slot: int, script: str, arguments: list[str], files: dict[str, Path],
                  stdin: bytes | None, limit: float) -> tuple[bytes | None, str]:
    """Run ``grader/<script>`` confined; returns what it wrote to its result pipe (None: nothing before
    ``limit`` seconds or it died) and the tail of its log. Everything it left running is killed."""
    token = secrets.token_hex(12)
    reader, writer = os.pipe()
    temporary = Path(tempfile.mkdtemp(prefix="grade-"))
    work = temporary / "work"
    work.mkdir()
    data = None
    process = None
    try:
        paths = context.sandbox.paths(work, context.course, GRADING)
        if context.sandbox.kind == "none":
            (work / "home" / "tmp").mkdir(parents=True)
        copies = temporary / "files"
        copies.mkdir()
        for name, host in list(files.items()):  # readable by the sandbox's own user, whoever owns the original
            shutil.copyfile(host, copies / name)
            os.chmod(copies / name, 0o644)
            files = {**files, name: copies / name}
        os.chmod(temporary, 0o755)
        os.chmod(copies, 0o755)
        command = [sys.executable, f"{paths['grader']}/{script}", *arguments, "--result-fd", str(writer)]
        with open(temporary / "log", "wb") as log:
            process = context.sandbox.start(
                command, slot=slot, work=work, course=context.course, grader=GRADING, files=files,
                env=_environment(paths, token, context.sandbox.kind == "bwrap"), limits=context.limits,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL, stdout=log, pass_fds=(writer,))
            os.close(writer)
            writer = None
            if stdin is not None:
                try:
                    process.stdin.write(stdin)
                    process.stdin.close()
                except OSError:
                    pass
            chunks, deadline = [], time.monotonic() + limit
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                ready, _, _ = select.select([reader], [], [], min(left, 1.0))
                if ready:
                    chunk = os.read(reader, 1 << 16)
                    if not chunk:
                        data = b"".join(chunks)
                        break
                    if sum(map(len, chunks)) < 8 << 20:
                        chunks.append(chunk)
                elif process.poll() is not None and not select.select([reader], [], [], 0.2)[0]:
                    data = b"".join(chunks)  # it ended and nothing holds the pipe open any more
                    break
            if data is None:
                data = b"".join(chunks) or None
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        tail = (temporary / "log").read_text(errors="replace")[-400:].strip()
        return data, tail
    finally:
        if writer is not None:
            os.close(writer)
        os.close(reader)
        if process is not None:
            _stop(process)
            sweep(token, uid=context.sandbox.uid(slot), session=process.pid)
        else:
            sweep(token, uid=context.sandbox.uid(slot))
        for _ in range(5):  # a process that was still writing there is dead now
            shutil.rmtree(temporary, ignore_errors=True)
            if not temporary.exists():
                break
            time.sleep(0.2)


def _run_notebook(context: Context, slot: int, path: Path) -> dict:
    data, tail = run_sandboxed(context, slot, "worker.py",
                               ["submission.ipynb", "--timeout", str(context.timeout),
                                "--max-output", str(context.max_output)],
                               {"submission.ipynb": path}, None, context.timeout + 30)
    try:
        report = json.loads(data) if data else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        last = tail.splitlines()[-1] if tail else "no message"
        return {"cells": [], "stopped_cell": None, "dropped_output_bytes": 0,
                "problem": f"the notebook could not be run to its end ({last[:200]})"}
    return report


def _run_checks(context: Context, slot: int, lesson: str,
                items: dict[str, dict]) -> tuple[dict[str, dict], str, float]:
    job = {"lesson": lesson, "seed": context.seed, "timeout": context.check_timeout,
           "preamble": answers.lesson_preamble(ROOT, lesson),
           "exercises": [{"name": name, "code": item["code"], "answer": item["answer"],
                          "partial": context.points.of(name)[1]} for name, item in items.items()]}
    limit = 90 + context.check_timeout * len(items) * 2
    data, tail = run_sandboxed(context, slot, "checkrun.py", [], {}, json.dumps(job).encode(), limit)
    reports: dict[str, dict] = {}
    problem, cpu = "", 0.0
    lines = (data or b"").decode(errors="replace").splitlines()
    if not lines:
        last = tail.splitlines()[-1] if tail else "no message"
        problem = f"the checkers could not start ({last[:200]})"
    for line in lines:
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and report.get("name") in items:
            reports.setdefault(report["name"], report)
        elif isinstance(report, dict) and isinstance(report.get("cpu"), (int, float)):
            cpu = float(report["cpu"])
    return reports, problem, cpu


def grade_one(submission: Submission, context: Context, slot: int = 0) -> Outcome:
    started = time.monotonic()
    outcome = Outcome(submission.student, submission.path.name, None)
    try:
        try:
            notebook = json.loads(submission.path.read_text(encoding="utf-8"))
            if not isinstance(notebook, dict):
                raise ValueError("not a notebook")
        except (OSError, ValueError) as error:
            outcome.lesson = lesson_of(submission.path, None)
            outcome.notes.append(f"unreadable notebook: {type(error).__name__}")
            for name in context.exercises.get(outcome.lesson, []):
                outcome.results[name] = Result(name, ERROR, f"unreadable notebook: {type(error).__name__}",
                                               0.0, context.points.of(name)[0])
            return outcome
        outcome.lesson = lesson = lesson_of(submission.path, notebook)
        expected = context.exercises.get(lesson, [])
        if not expected:
            outcome.notes.append("no exercise of the course found in this notebook")
            return outcome
        items = {name: answers.answer_cell(notebook, name) for name in expected}
        run = _run_notebook(context, slot, submission.path) if context.run_notebooks else None
        to_check = {name: item for name, item in items.items() if "problem" not in item}
        reports, problem, cpu = _run_checks(context, slot, lesson, to_check) if to_check else ({}, "", 0.0)
        outcome.cpu_seconds = cpu + float((run or {}).get("cpu") or 0.0)
        if run is not None:
            if run.get("problem"):
                stopped = run.get("stopped_cell")
                where = f" in cell {stopped}" if stopped is not None else ""
                outcome.notes.append(f"the notebook run: {run['problem']}{where}")
            if run.get("dropped_output_bytes"):
                outcome.notes.append(f"{run['dropped_output_bytes']:,} bytes of output dropped")
        if problem:
            outcome.notes.append(problem)
        cell_errors = {cell["index"]: cell["error"] for cell in (run or {}).get("cells", []) if cell.get("error")}
        for name in expected:
            worth, partial = context.points.of(name)
            item = items[name]
            if "problem" in item:
                verdict = NOT_ATTEMPTED if item["problem"] == "no cell calls its check" else ERROR
                result = Result(name, verdict, item["problem"], 0.0, worth)
            elif name not in reports:
                result = Result(name, ERROR, problem or "its check did not report", 0.0, worth)
            else:
                report = reports[name]
                verdict, earned, parts = marks.score(report, worth, partial)
                result = Result(name, verdict, str(report.get("message", "")), earned, worth, parts,
                                title=str(report.get("title", "")))
            cell = item.get("cell")
            if cell is not None and cell in cell_errors:
                error = cell_errors[cell]
                result.notes.append(f"In the notebook run its cell (cell {cell}) "
                                    + ("was stopped: time limit reached." if error == TIME_LIMIT
                                       else f"raised {error}."))
            if item.get("suspicious"):
                result.notes.append("Worth a look by hand: the answer cell uses "
                                    + ", ".join(f"`{s}`" for s in item["suspicious"][:6])
                                    + ", which no exercise needs.")
            outcome.results[name] = result
        return outcome
    except Exception as error:  # never let one submission stop the others
        outcome.notes.append(f"grader error: {type(error).__name__}: {error}")
        return outcome
    finally:
        outcome.seconds = time.monotonic() - started


def _withheld_build(out: Path) -> Path:
    spec = importlib.util.spec_from_file_location("withhold_solutions", ROOT / "scripts" / "withhold_solutions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _, kept = module.build(out)
    if kept:
        print(f"Note: {len(kept)} model answer(s) stay importable (a checker calls them): {', '.join(kept)}")
    return out


def sandbox_line(sandbox: Sandbox, limits: Limits) -> str:
    caps = (f"memory {limits.memory_mb} MB a process, {limits.processes} processes, files up to "
            f"{limits.file_mb} MB, {limits.cpu_s} CPU-s a process")
    if sandbox.kind == "bwrap":
        who = " as a user of its own" if sandbox.root else ""
        return (f"Sandbox: bubblewrap ({sandbox.bwrap}): each submission in its own PID namespace{who}, no network, "
                f"private /tmp, the course read-only; limits: {caps}.")
    return (f"No sandbox: {sandbox.reason}. The notebooks run as your user in a temporary folder, with limits "
            f"({caps}) and a sweep of leftover processes only; see docs/grading.md.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="*", type=Path, help="notebooks, a student's folder, or a class folder")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per notebook run (default 300)")
    parser.add_argument("--check-timeout", type=float, default=60, help="seconds per exercise check (default 60)")
    parser.add_argument("--csv", type=Path, default=Path("grades.csv"), help="one row per student (grades.csv)")
    parser.add_argument("--feedback", type=Path, help="a file per student (default: feedback/ next to the CSV)")
    parser.add_argument("--points", type=Path, help="a .toml or .json file of points (default: 1 per exercise)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at the same time (default 1)")
    parser.add_argument("--max-output", type=int, default=5_000_000, help="output bytes kept per notebook")
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                        help="bwrap, none, or auto (bwrap where it works; default)")
    parser.add_argument("--course", choices=("withheld", "full"), default="withheld",
                        help="grade against the build without model answers (default) or the full course")
    parser.add_argument("--seed", type=int, help="the checkers' input seed (default: a new random one per run)")
    parser.add_argument("--memory", type=int, default=Limits.memory_mb, help="MB of address space per process")
    parser.add_argument("--processes", type=int, default=Limits.processes, help="processes per submission")
    parser.add_argument("--no-run", action="store_true", help="only re-run the checkers, not the whole notebooks")
    options = parser.parse_args(argv)
    if not options.submissions:
        parser.error("name at least one notebook or folder")
    try:
        points = Points.load(options.points)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    limits = Limits(memory_mb=options.memory, processes=options.processes,
                    cpu_s=int(max(options.timeout, options.check_timeout) * 2 + 60))
    sandbox = Sandbox.detect(options.sandbox)
    print(sandbox_line(sandbox, limits), flush=True)
    submissions = find_submissions(options.submissions)
    if not submissions:
        print("No notebooks found.")
        return 1
    redact = Redactor()
    with tempfile.TemporaryDirectory(prefix="grade-course-") as temporary:
        course = ROOT if options.course == "full" else _withheld_build(Path(temporary) / "course")
        os.chmod(temporary, 0o755)
        seed = options.seed if options.seed is not None else secrets.randbelow(2 ** 31 - 1)
        context = Context(sandbox, course, course_exercises(), points, limits, options.timeout,
                          options.check_timeout, options.max_output, seed, not options.no_run)
        print(f"Grading {len(submissions)} notebook(s), at most {options.timeout:g} s each, against the "
              f"{options.course} course, checker seed {seed} ...", flush=True)
        slots = list(range(max(1, options.jobs)))
        lock = threading.Lock()

        def graded(submission: Submission) -> Outcome:
            with lock:
                slot = slots.pop()
            try:
                return grade_one(submission, context, slot)
            finally:
                with lock:
                    slots.append(slot)

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
            outcomes = list(pool.map(graded, submissions))
    order = [name for names in context.exercises.values() for name in names]
    columns, rows = marks.students(outcomes, order)
    marks.print_table(columns, rows, redact)
    marks.write_csv(options.csv, columns, rows, redact)
    feedback = options.feedback or options.csv.parent / "feedback"
    preface = (f"Graded with the checker seed {seed}; each exercise's checker ran on its answer cell alone. "
               + ("" if sandbox.kind == "bwrap" else "(No sandbox on the grading machine.)"))
    marks.write_feedback(feedback, outcomes, columns, rows, redact, preface.strip())
    passed = sum(r.verdict == PASSED for o in outcomes for r in o.results.values())
    total = sum(len(o.results) for o in outcomes)
    print(f"\n{passed} of {total} exercise results passed. CSV: {options.csv}; feedback files: {feedback}/")
    print(f"Time: {sum(o.seconds for o in outcomes):.1f} s of grading, {sum(o.cpu_seconds for o in outcomes):.1f} "
          f"CPU-s reported by the sandboxed processes.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
