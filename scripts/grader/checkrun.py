"""The check runner: re-runs each exercise's checker on the student's answer cell alone, inside a fresh sandbox.

    python checkrun.py --result-fd 3 < job.json

Started by the grader (never by hand). The job (read from stdin, which is then closed) names the lesson, a seed for
the checkers' inputs and, per exercise, the source of its answer cell without the check call and the expression
handed to the check. This process:

1. imports the checkers (the course's package that the grader put on ``PYTHONPATH``: the withheld build by default)
   and the lesson's own imports, before any student code; makes itself non-dumpable;
2. for each exercise, forks a child; the child closes the channel to the grader, runs the answer cell in a fresh
   namespace (its prints discarded), evaluates the answer and calls the checker's original ``check`` on it,
   with the exercise's inputs drawn from the job's seed; then the same case by case for partial credit;
3. reads the child's one report from a pipe of its own (with a time limit) and passes it on to the grader.

The child also compares, before and after the student's code, the checker's classes, modules and exercise objects
(and ``torch``'s, ``math``'s and the builtins) with what they were: a change is reported as tampering, not graded.
What stays possible, honestly: the student's function runs in the child, the same process as the checker, so it
can still lie (e.g. find the pipe and write a report of its own); see docs/grading.md.
"""

from __future__ import annotations

import argparse
import ctypes
import io
import json
import os
import select
import signal
import sys
import time
import types

MISSING = object()
# _answer_name: an exercise remembers the name of the function it last checked (its .solution() prints under it)
IGNORED_KEYS = {"__warningregistry__", "__loader__", "__spec__", "_answer_name"}
STATUSES = {"correct", "wrong", "not done", "error", "time limit", "tampered"}


def not_dumpable() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def watched_objects(lesson_module) -> list[object]:
    """What the student's code must leave alone: the checker's modules, their classes, the exercises, torch."""
    import builtins
    import math

    import torch
    found: list[object] = [builtins, math, torch, torch.Tensor, torch.Generator, torch.random, torch.testing]
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "helpers.exercises" or name.startswith("helpers.exercises.")):
            continue
        found.append(module)
        for value in list(vars(module).values()):
            if isinstance(value, type) and getattr(value, "__module__", "") == name:
                found.append(value)
            elif hasattr(value, "check") and hasattr(value, "__dict__") and not isinstance(value, type):
                found.append(value)  # an exercise object
    return found


def snapshot(objects: list[object]) -> list[tuple[object, dict]]:
    return [(obj, dict(vars(obj))) for obj in objects]


def changes(saved: list[tuple[object, dict]]) -> list[str]:
    """Names changed since ``saved`` (values compared by identity; a module's new submodules are not changes)."""
    changed = []
    for obj, before in saved:
        now = vars(obj)
        label = getattr(obj, "__name__", None) or type(obj).__name__
        for key in set(before) | set(now):
            if key in IGNORED_KEYS:
                continue
            old, new = before.get(key, MISSING), now.get(key, MISSING)
            if old is new:
                continue
            if old is MISSING and isinstance(obj, types.ModuleType) and isinstance(new, types.ModuleType):
                continue  # a lazily imported submodule
            if _dynamo_wrapper(old, new):
                continue  # torch wraps some of its own functions the first time torch._dynamo is imported
            if old is MISSING and isinstance(obj, type) and any(
                    vars(base).get(key, MISSING) is new for base in obj.__mro__[1:]):
                continue  # an inherited attribute put back on the class itself (the checkers' call-watching does)
            changed.append(f"{label}.{key}")
    return sorted(changed)


def _dynamo_wrapper(old, new) -> bool:
    """True if ``new`` is torch's own ``_disable_dynamo`` wrapper around ``old`` (it behaves as ``old``)."""
    code = getattr(new, "__code__", None)
    return (old is not MISSING and getattr(new, "__wrapped__", None) is old and code is not None
            and code.co_filename.replace("\\", "/").endswith("torch/_compile.py"))


def run_exercise(exercise, original_check, base: dict, item: dict, seed: int | None, watched) -> dict:
    """In the child: the answer cell, then the checker. Returns the report."""
    from helpers.exercises.core import FunctionExercise

    saved = snapshot(watched)
    namespace = dict(base)
    namespace["__name__"] = "__main__"
    sink = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = sink
    try:
        try:
            exec(compile(item["code"], f"<answer cell of {item['name']}>", "exec"), namespace)
            answer = eval(compile(item["answer"], f"<answer of {item['name']}>", "eval"), namespace)
        except Exception as error:
            return {"status": "error", "message": f"the answer cell raised {type(error).__name__}: "
                                                  f"{str(error)[:300]}"}
        touched = changes(saved)
        if touched:
            return {"status": "tampered", "message": "the answer cell changed the checker or the library it "
                                                     f"relies on ({', '.join(touched[:5])})"}
        if seed is not None:
            exercise.seed = seed
        saved = snapshot(watched)
        feedback = original_check(exercise, answer)
        touched = changes(saved)
        if touched:
            return {"status": "tampered", "message": "the answer changed the checker or the library it relies on "
                                                     f"while it was checked ({', '.join(touched[:5])})"}
        report = {"status": str(feedback.status), "message": str(feedback.message), "parts": None}
        if type(exercise)._check is FunctionExercise._check:  # checked case by case: partial credit is defined
            import torch
            cases_of = exercise.cases
            cases = cases_of(torch.Generator().manual_seed(exercise.seed))
            if feedback.status == "correct":
                report["parts"] = [len(cases), len(cases)]
            elif feedback.status == "wrong" and item.get("partial", True):
                right = 0
                try:
                    for case in cases:
                        exercise.cases = lambda generator, case=case: [case]
                        right += original_check(exercise, answer).status == "correct"
                finally:
                    exercise.cases = cases_of
                saved_touched = changes(saved)
                report["parts"] = [right, len(cases)] if not saved_touched else [0, len(cases)]
            else:
                report["parts"] = [0, len(cases)]
        return report
    except Exception as error:  # the checker itself tripped over something
        return {"status": "error", "message": f"the checker could not run: {type(error).__name__}: {error}"[:400]}
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def read_report(fd: int, deadline: float, pid: int) -> bytes | None:
    """What the child writes to ``fd`` until it exits (processes it forked may hold the pipe open: not waited
    for), or None past the deadline."""
    chunks, size, ended = [], 0, False
    os.set_blocking(fd, False)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], min(left, 0.1))
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                return b"".join(chunks)
            if chunk:
                size += len(chunk)
                if size <= 1 << 20:
                    chunks.append(chunk)
                continue
        if ended:
            return b"".join(chunks)
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            ended = True  # one more round to drain what it wrote


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--result-fd", type=int, required=True)
    options = parser.parse_args()
    out = options.result_fd
    os.set_inheritable(out, False)
    not_dumpable()
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    os.close(0)

    import importlib

    import torch  # noqa: F401  (before any student code)
    from helpers.exercises.core import FunctionExercise

    lesson = importlib.import_module(f"helpers.exercises.{job['lesson']}")
    original_check = FunctionExercise.check
    base: dict = {"__builtins__": __builtins__}
    preamble_problem = None
    for statement in job["preamble"]:  # the course's own imports and definitions, one by one
        try:
            exec(compile(statement, "<the lesson's notebook>", "exec"), base)
        except Exception as error:  # reported; the checks still run
            preamble_problem = f"{type(error).__name__}: {error}"
    watched = watched_objects(lesson)
    os.write(out, (json.dumps({"ready": True, "preamble_problem": preamble_problem}) + "\n").encode())
    for item in job["exercises"]:
        exercise = getattr(lesson, item["name"].split(".", 1)[1], None)
        if exercise is None:
            report = {"status": "error", "message": "no such exercise in the grader's course"}
        else:
            reader, writer = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: nothing of the grader's channel, then the student's code
                code = 1
                try:
                    os.close(out)
                    os.close(reader)
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    result = run_exercise(exercise, original_check, base, item, job.get("seed"), watched)
                    os.write(writer, json.dumps(result).encode())
                    code = 0
                finally:
                    os._exit(code)
            os.close(writer)
            data = read_report(reader, time.monotonic() + float(job["timeout"]), pid)
            os.close(reader)
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:  # already reaped by read_report
                pass
            if data is None:
                report = {"status": "time limit", "message": f"time limit reached ({job['timeout']:g} s)"}
            else:
                try:
                    report = json.loads(data)
                    if not isinstance(report, dict) or report.get("status") not in STATUSES:
                        raise ValueError("not a report")
                except ValueError:
                    report = {"status": "error", "message": "the check's report was unreadable (the process "
                                                            "died or something else wrote to its channel)"}
        report["name"] = item["name"]
        report["title"] = str(getattr(exercise, "title", ""))
        os.write(out, (json.dumps(report) + "\n").encode())
    import resource
    cpu = sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for field in ("ru_utime", "ru_stime"))
    os.write(out, (json.dumps({"cpu": cpu}) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
