"""The grading command (scripts/grade.py) on a class of hostile submissions of lesson 01, in its sandbox and without.

One class is graded once (module fixture, bubblewrap sandbox); each test reads what happened to one attack:
a leftover process writing into the next submission, reading the grader's environment through /proc, writing the
grade record, patching the checker class, handing in the model answer, a 3 GB allocation, a fork of many
processes; and the ordinary cases: right answers, partial credit with a points file, placeholders, a loop past the
time limit, a kernel that exits, a file that is not a notebook. A second, smaller run forces the no-sandbox path.
Each attack's test fails against the grader before the sandbox (see docs/grading.md).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("grade", ROOT / "scripts" / "grade.py")
grade = importlib.util.module_from_spec(spec)
sys.modules["grade"] = grade  # its dataclasses look their module up
spec.loader.exec_module(grade)

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

COSINE, MIXED = "lesson01.cosine_scores", "lesson01.mixed_scores"
SECRET = "the-instructor's-token-8d1f"
LEFTOVER_MARK = "grader-test-leftover-7c2e"
IMPORTS = "from helpers.exercises import lesson01"
RIGHT_COSINE = ("def my_cosine_scores(inputs):\n    unit = inputs / inputs.norm(dim=1, keepdim=True)\n"
                "    return unit @ unit.T\n\n\nlesson01.cosine_scores.check(my_cosine_scores)")
RIGHT_MIXED = ("def fixed_mixed_scores(attn_scores, attn_weights):\n"
               "    return attn_weights @ attn_scores @ attn_weights.T\n\n\n"
               "lesson01.mixed_scores.check(fixed_mixed_scores)")
PLACEHOLDER_COSINE = ("def my_cosine_scores(inputs):\n    raise NotImplementedError\n\n\n"
                      "lesson01.cosine_scores.check(my_cosine_scores)")
PLACEHOLDER_MIXED = ("def fixed_mixed_scores(attn_scores, attn_weights):\n    raise NotImplementedError\n\n\n"
                     "lesson01.mixed_scores.check(fixed_mixed_scores)")

# A process that outlives its notebook and, for a minute and a half, marks every other grading folder it can find
# under /tmp as passed (the record file of the grader before the sandbox), then this test's victim's folder.
LEFTOVER = f'''import subprocess, sys
script = """
import glob, json, os, time
mine, end = os.getcwd(), time.time() + 90
while time.time() < end:
    for folder in glob.glob("/tmp/grade-*") + glob.glob("/tmp/grade-*/*"):
        if os.path.isdir(folder) and not mine.startswith(folder):
            try:
                with open(os.path.join(folder, "checks.jsonl"), "a") as handle:
                    for name in ("{COSINE}", "{MIXED}"):
                        line = {{"exercise": name, "status": "correct", "message": "forged"}}
                        handle.write(json.dumps(line) + "\\\\n")
            except OSError:
                pass
    time.sleep(0.1)
"""
subprocess.Popen([sys.executable, "-c", script, "{LEFTOVER_MARK}"], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)'''

SPY = '''import os
found = "nothing"
for pid in os.listdir("/proc"):
    try:
        data = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        continue
    for item in data.split(b"\\0"):
        if item.startswith(b"GRADER_TEST_SECRET="):
            found = item.split(b"=", 1)[1].decode()


def my_cosine_scores(inputs):
    raise RuntimeError("LEAK:" + found)


lesson01.cosine_scores.check(my_cosine_scores)'''

FORGE_RECORD = f'''import json, os


def my_cosine_scores(inputs):
    raise NotImplementedError


lesson01.cosine_scores.check(my_cosine_scores)
record = os.environ.get("ATTENTION_COURSE_GRADE_RECORD")
if record:  # after the check: the last verdict recorded counts
    with open(record, "a") as handle:
        handle.write(json.dumps({{"exercise": "{COSINE}", "status": "correct", "message": "forged"}}) + "\\n")'''

MODEL_ANSWER = "lesson01.mixed_scores.check(lesson01._solution_mixed_scores)"

# The check runner's channel to the grader, reached through /proc from the child that runs this cell.
GRAB_THE_PIPE = f'''import json, os
forged = "".join(json.dumps({{"name": name, "status": "correct", "message": "forged"}}) + "\\n"
                 for name in ("{COSINE}", "{MIXED}"))
for fd in range(3, 40):  # the parent's: in the notebook run the runner, in the check the check runner
    try:
        handle = os.open(f"/proc/{{os.getppid()}}/fd/{{fd}}", os.O_WRONLY | os.O_NONBLOCK)
        os.write(handle, forged.encode())
    except OSError:
        pass


def fixed_mixed_scores(attn_scores, attn_weights):
    raise NotImplementedError


lesson01.mixed_scores.check(fixed_mixed_scores)'''

PATCH = '''from helpers.exercises.core import Feedback, FunctionExercise
FunctionExercise._check = lambda self, function: Feedback("correct", "✅ forged")


def my_cosine_scores(inputs):
    raise NotImplementedError


lesson01.cosine_scores.check(my_cosine_scores)'''

ALLOCATE = '''big = bytearray(3 * 2 ** 30)


def my_cosine_scores(inputs):
    return len(big)


lesson01.cosine_scores.check(my_cosine_scores)'''

FORK = '''import os, time
forked = 0
try:
    for _ in range(400):
        if os.fork() == 0:
            time.sleep(15)
            os._exit(0)
        forked += 1
except OSError:
    pass


def fixed_mixed_scores(attn_scores, attn_weights):
    raise RuntimeError(f"FORKED:{forked}")


lesson01.mixed_scores.check(fixed_mixed_scores)'''

SLEEPS = ("import time\n\n\ndef my_cosine_scores(inputs):\n    time.sleep(10 ** 6)\n\n\n"
          "lesson01.cosine_scores.check(my_cosine_scores)")
PARTLY = ("def my_cosine_scores(inputs):\n    unit = inputs / inputs.norm(dim=1, keepdim=True)\n"
          "    return unit @ unit.T if inputs.shape[0] != 3 else unit @ inputs.T\n\n\n"
          "lesson01.cosine_scores.check(my_cosine_scores)")
BUGGY = ("def fixed_mixed_scores(attn_scores, attn_weights):\n    return attn_weights @ attn_scores\n\n\n"
         "lesson01.mixed_scores.check(fixed_mixed_scores)")


def _notebook(path: Path, *cells: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"cell{i}", "metadata": {},
                           "outputs": [], "source": source} for i, source in enumerate(cells)],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(notebook), encoding="utf-8")
    return path


def _read(csv_path: Path) -> dict[str, dict[str, str]]:
    with open(csv_path, newline="", encoding="utf-8") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def _sandbox_or_skip() -> None:
    """bubblewrap, installed with apt-get where we are root and it is missing; a skip (a failure under CI=true when bwrap is missing)."""
    if grade.Sandbox.detect().kind == "bwrap":
        return
    if os.environ.get(grade.sandbox_module.BWRAP_VARIABLE) is None and not shutil.which("bwrap") \
            and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap",
                       shell=True, capture_output=True, timeout=600)
    sandbox = grade.Sandbox.detect()
    if sandbox.kind == "bwrap":
        return
    message = f"the sandbox tests need bubblewrap (apt-get install bubblewrap): {sandbox.reason}"
    # A missing bwrap fails under CI=true; one that cannot sandbox this checkout (for example a course whose venv
    # lives under /tmp, which the sandbox's private /tmp hides: the grader then says "No sandbox") is a skip.
    if os.environ.get("CI") == "true" and not shutil.which("bwrap"):
        pytest.fail(message + " (CI=true)")
    pytest.skip(message)


def _leftovers() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if LEFTOVER_MARK.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def build_class(tmp: Path) -> tuple[Path, Path]:
    """The class of this test in ``tmp/class`` and its points file (also for grading it by hand, old grader or new)."""
    classroom = tmp / "class"
    lesson = "01_dot_product_scores.ipynb"
    _notebook(classroom / "a_leftover" / lesson, LEFTOVER, PLACEHOLDER_COSINE, PLACEHOLDER_MIXED,
              "import os\nos._exit(3)")
    _notebook(classroom / "b_victim" / lesson, PLACEHOLDER_COSINE, PLACEHOLDER_MIXED)
    _notebook(classroom / "c_spy" / lesson, IMPORTS, SPY, PLACEHOLDER_MIXED)
    _notebook(classroom / "d_forger" / lesson, IMPORTS, FORGE_RECORD, MODEL_ANSWER)
    _notebook(classroom / "e_patcher" / lesson, IMPORTS, PATCH, GRAB_THE_PIPE)
    _notebook(classroom / "f_greedy" / lesson, IMPORTS, ALLOCATE, FORK)
    _notebook(classroom / "g_sleeper" / lesson, SLEEPS, "import time\ntime.sleep(10 ** 6)", PLACEHOLDER_MIXED)
    _notebook(classroom / "alice" / lesson, IMPORTS, "print('x' * 300_000)", RIGHT_COSINE, RIGHT_MIXED)
    _notebook(classroom / "bob" / lesson, PARTLY, BUGGY)
    (classroom / "dave").mkdir()
    (classroom / "dave" / lesson).write_text("{ not a notebook")
    points = tmp / "points.toml"
    points.write_text(f'default = 1\n\n[exercises]\n"{COSINE}" = 3\n')
    return classroom, points


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class, graded once in the sandbox: (rows of the CSV, printed output, feedback folder)."""
    _sandbox_or_skip()
    tmp = tmp_path_factory.mktemp("grading")
    classroom, points = build_class(tmp)
    table = tmp / "out" / "grades.csv"
    env = {**os.environ, "GRADER_TEST_SECRET": SECRET}
    env.pop(grade.sandbox_module.BWRAP_VARIABLE, None)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), str(classroom), "--csv", str(table),
                           "--points", str(points), "--timeout", "60", "--check-timeout", "15", "--jobs", "2",
                           "--max-output", "100000"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return _read(table), done.stdout, tmp / "out" / "feedback"


def _feedback(folder: Path, student: str) -> str:
    return (folder / f"{student}.md").read_text(encoding="utf-8")


def test_the_first_line_names_the_sandbox(graded):
    _, out, _ = graded
    assert out.splitlines()[0].startswith("Sandbox: bubblewrap"), out.splitlines()[0]


def test_right_answers_pass_and_points_come_from_the_points_file(graded):
    rows, out, feedback = graded
    alice = rows["alice"]
    assert (alice[COSINE], alice[MIXED], alice["total"], alice["max"]) == ("3", "1", "4", "4"), alice
    assert "bytes of output dropped" in alice["notes"]
    text = _feedback(feedback, "alice")
    assert f"### {COSINE}: passed, 3 of 3 point(s)" in text and "correct on all 3 test inputs" in text
    assert "alice" in out and "4/4" in out


def test_partial_credit_is_the_share_of_test_inputs_right(graded):
    rows, _, feedback = graded
    assert rows["bob"][COSINE] == "2" and rows["bob"][MIXED] == "0" and rows["bob"]["total"] == "2", rows["bob"]
    text = _feedback(feedback, "bob")
    assert f"### {COSINE}: partly passed, 2 of 3 point(s) (2 of 3 test inputs right)" in text, text
    assert "only one side of each product" in text  # the checker's own message
    assert f"### {MIXED}: failed, 0 of 1 point(s)" in text and "blends the queries" in text


def test_a_leftover_process_cannot_write_into_the_next_submission(graded):
    rows, _, feedback = graded
    assert rows["b_victim"]["total"] == "0", rows["b_victim"]
    assert f"### {COSINE}: not attempted" in _feedback(feedback, "b_victim")
    assert not _leftovers(), "the leftover process survived its submission"
    assert "the kernel died" in rows["a_leftover"]["notes"]  # its last cell exits Python


def test_the_graders_environment_cannot_be_read_through_proc(graded):
    rows, out, feedback = graded
    text = _feedback(feedback, "c_spy")
    assert "LEAK:nothing" in text, text  # the sandbox has no parent process to read
    everything = out + json.dumps(rows) + "".join(p.read_text() for p in feedback.iterdir())
    assert SECRET not in everything


def test_writing_the_grade_record_forges_nothing(graded):
    rows, _, feedback = graded
    assert rows["d_forger"][COSINE] == "0", rows["d_forger"]
    assert f"### {COSINE}: not attempted" in _feedback(feedback, "d_forger")


def test_the_model_answer_is_not_importable(graded):
    rows, _, feedback = graded
    assert rows["d_forger"][MIXED] == "0", rows["d_forger"]
    assert "withheld" in _feedback(feedback, "d_forger") or "not attempted" in _feedback(feedback, "d_forger")


def test_patching_the_checker_class_is_caught(graded):
    rows, _, feedback = graded
    assert rows["e_patcher"]["total"] == "0", rows["e_patcher"]
    text = _feedback(feedback, "e_patcher")
    assert f"### {COSINE}: tampered" in text and "FunctionExercise._check" in text, text
    assert "Worth a look by hand" in text
    assert f"### {MIXED}: not attempted" in text  # the patch lives in another cell: this answer is graded alone


def test_the_checks_channel_to_the_grader_is_out_of_reach(graded):
    rows, _, feedback = graded  # e_patcher's second answer writes forged reports to every pipe it can open
    assert rows["e_patcher"][MIXED] == "0" and "forged" not in _feedback(feedback, "e_patcher")


def test_a_3_gb_allocation_fails(graded):
    rows, _, feedback = graded
    text = _feedback(feedback, "f_greedy")
    assert rows["f_greedy"][COSINE] == "0"
    assert f"### {COSINE}: error" in text and "MemoryError" in text, text


def test_a_fork_of_many_processes_is_bounded(graded):
    rows, _, feedback = graded
    text = _feedback(feedback, "f_greedy")
    forked = int(text.split("FORKED:", 1)[1].split()[0].rstrip(".`"))
    assert 0 <= forked <= grade.Limits.processes, forked


def test_time_limits_are_named_as_such(graded):
    rows, _, feedback = graded
    text = _feedback(feedback, "g_sleeper")
    assert f"### {COSINE}: time limit reached" in text, text
    assert "time limit reached (60 s) in cell 1" in rows["g_sleeper"]["notes"], rows["g_sleeper"]["notes"]
    assert "KeyboardInterrupt" not in text


def test_an_unreadable_notebook_is_reported(graded):
    rows, _, feedback = graded
    assert rows["dave"]["total"] == "0" and "unreadable notebook" in rows["dave"]["notes"]
    assert set(rows) == {"a_leftover", "b_victim", "c_spy", "d_forger", "e_patcher", "f_greedy", "g_sleeper",
                         "alice", "bob", "dave"}


def test_without_a_sandbox_it_says_so_and_still_grades(tmp_path):
    student = _notebook(tmp_path / "class" / "carol" / "01_dot_product_scores.ipynb", IMPORTS, SPY, RIGHT_MIXED)
    table = tmp_path / "grades.csv"
    env = {**os.environ, "GRADER_TEST_SECRET": SECRET, grade.sandbox_module.BWRAP_VARIABLE: "/nonexistent/bwrap"}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), str(student), "--csv", str(table),
                           "--timeout", "60"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("No sandbox: no bubblewrap at /nonexistent/bwrap"), done.stdout
    rows = _read(table)
    assert rows["01_dot_product_scores"][MIXED] == "1" and rows["01_dot_product_scores"][COSINE] == "0", rows
    text = (tmp_path / "feedback" / "01_dot_product_scores.md").read_text()
    assert "LEAK:[hidden]" in text, text  # the environment was readable, but never reaches what the grader writes
    assert SECRET not in done.stdout + table.read_text() + text


# --- the parts, without running anything ------------------------------------------------------------------
def test_submissions_are_found_as_files_student_folders_and_class_folders(tmp_path):
    one = _notebook(tmp_path / "erin.ipynb", "1")
    _notebook(tmp_path / "frank" / "01_a.ipynb", "1")
    _notebook(tmp_path / "frank" / "04_b.ipynb", "1")
    _notebook(tmp_path / "class" / "gina" / "02_c.ipynb", "1")
    found = grade.find_submissions([one, tmp_path / "frank", tmp_path / "class"])
    assert [(s.student, s.path.name) for s in found] == [("erin", "erin.ipynb"), ("frank", "01_a.ipynb"),
                                                         ("frank", "04_b.ipynb"), ("gina", "02_c.ipynb")]
    assert grade.lesson_of(Path("04_causal_attention.ipynb"), {"cells": []}) == "lesson04"
    cells = {"cells": [{"cell_type": "code", "source": "lesson07.merge_states.check(f)"}]}
    assert grade.lesson_of(Path("renamed.ipynb"), cells) == "lesson07"


def test_the_answer_cell_is_the_last_one_calling_the_check_without_the_calls():
    notebook = {"cells": [
        {"cell_type": "code", "source": "def f(x):\n    return 1\nlesson01.cosine_scores.check(f)"},
        {"cell_type": "code", "source": "%time\nlesson01.cosine_scores.hint()\ndef g(x):\n    return x\n"
                                        "result = lesson01.cosine_scores.check(g)\nprint(result)"}]}
    item = grade.answers.answer_cell(notebook, COSINE)
    assert item["answer"] == "g" and item["cell"] == 1
    assert "check" not in item["code"] and "hint" not in item["code"] and "def g(x)" in item["code"]
    assert grade.answers.answer_cell(notebook, MIXED) == {"problem": "no cell calls its check"}
    broken = {"cells": [{"cell_type": "code", "source": "def f(:\nlesson01.mixed_scores.check(f)"}]}
    assert "not valid Python" in grade.answers.answer_cell(broken, MIXED)["problem"]


def test_the_points_file_is_read_and_checked(tmp_path):
    good = tmp_path / "points.json"
    good.write_text(json.dumps({"default": 2, "partial_credit": False,
                                "exercises": {COSINE: 5, MIXED: {"points": 1, "partial_credit": True}}}))
    points = grade.Points.load(good)
    assert points.of(COSINE) == (5.0, False) and points.of(MIXED) == (1.0, True)
    assert points.of("lesson02.x") == (2, False)
    for bad, words in (({"defualt": 1}, "unknown key"), ({"default": -1}, "default"),
                       ({"exercises": {"cosine": 1}}, "not a name"), ({"exercises": {COSINE: "two"}}, COSINE),
                       ({"partial_credit": "yes"}, "partial_credit")):
        with pytest.raises(ValueError, match=words):
            grade.Points.from_dict(bad)
    with pytest.raises(ValueError, match=r"\.toml or \.json"):
        grade.Points.load(tmp_path / "points.yaml")


def test_the_csv_runs_no_formula(tmp_path):
    table = tmp_path / "grades.csv"
    grade.marks.write_csv(table, [], [{"student": "=HYPERLINK(1)", "total": 0, "max": 0, "results": {},
                                       "notebooks": [], "notes": []}], grade.Redactor({}))
    assert _read(table)["'=HYPERLINK(1)"]["total"] == "0"


def test_scores_and_the_secret_filter():
    assert grade.marks.score({"status": "wrong", "parts": [1, 4]}, 2, True) == ("partly passed", 0.5, (1, 4))
    assert grade.marks.score({"status": "wrong", "parts": [1, 4]}, 2, False) == ("failed", 0.0, (1, 4))
    assert grade.marks.score({"status": "correct", "parts": None}, 2, True) == ("passed", 2, None)
    assert grade.marks.score({"status": "time limit"}, 2, True)[0] == "time limit reached"
    redact = grade.Redactor({"API_TOKEN": "s3cr3t-value", "HOME": "/root", "FLAG": "1"})
    assert redact("error: s3cr3t-value at /root") == "error: [hidden] at /root"


def test_the_sweep_kills_what_carries_the_token():
    token = "sweep-test-token"
    child = subprocess.Popen([sys.executable, "-c", "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                              "    time.sleep(60)\ntime.sleep(60)"],
                             env={**os.environ, grade.TOKEN_VARIABLE: token}, start_new_session=True)
    import time
    time.sleep(0.5)
    assert grade.sweep(token) >= 2
    child.wait(timeout=5)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = [pid for pid in filter(str.isdigit, os.listdir("/proc"))
                 if token.encode() in _environ(int(pid))]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive


def _environ(pid: int) -> bytes:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return b"" if stat[0] == "Z" else Path(f"/proc/{pid}/environ").read_bytes()
    except (OSError, IndexError):
        return b""


def test_a_worker_past_the_limit_is_stopped_with_its_process_group():
    import time
    worker = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"],
                              start_new_session=True)
    started = time.monotonic()
    grade._stop(worker)
    assert worker.poll() is not None and time.monotonic() - started < 12


def test_a_missing_or_unusable_bwrap_falls_back_with_the_reason(monkeypatch):
    monkeypatch.setenv(grade.sandbox_module.BWRAP_VARIABLE, "none")
    assert grade.Sandbox.detect().kind == "none"
    monkeypatch.setenv(grade.sandbox_module.BWRAP_VARIABLE, "/nonexistent/bwrap")
    missing = grade.Sandbox.detect()
    assert missing.kind == "none" and "no bubblewrap at /nonexistent/bwrap" in missing.reason
    monkeypatch.setenv(grade.sandbox_module.BWRAP_VARIABLE, shutil.which("false") or "/bin/false")
    broken = grade.Sandbox.detect()
    assert broken.kind == "none" and "cannot create its namespaces" in broken.reason, broken.reason
    assert grade.sandbox_line(broken, grade.Limits()).startswith("No sandbox: bubblewrap cannot create")
    with pytest.raises(SystemExit, match="--sandbox bwrap"):
        grade.Sandbox.detect("bwrap")


def test_the_course_model_answers_pass_the_check_runner(tmp_path):
    """No false alarm: the checkers' own call-watching, torch's lazy wrappers and the lessons' own classes
    (SelfAttention_v2 in lesson 03) are not tampering or missing names (every lesson: benchmarks/grading.py)."""
    _sandbox_or_skip()
    bench = importlib.util.spec_from_file_location("grading_benchmark", ROOT / "benchmarks" / "grading.py")
    module = importlib.util.module_from_spec(bench)
    bench.loader.exec_module(module)
    copies = [module.answered_copy(next((ROOT / "notebooks").glob(f"{n}_*.ipynb")), tmp_path) for n in ("02", "03")]
    table = tmp_path / "grades.csv"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), *map(str, copies), "--no-run",
                           "--csv", str(table)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _read(table)
    assert all(row["total"] == "2" for row in rows.values()), (rows, done.stdout)
