"""The instructor's build without model answers (scripts/withhold_solutions.py): every checker still works in it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

spec = importlib.util.spec_from_file_location("withhold_solutions", ROOT / "scripts" / "withhold_solutions.py")
withhold_solutions = importlib.util.module_from_spec(spec)
spec.loader.exec_module(withhold_solutions)

# Runs inside the build (a fresh Python whose `helpers` is the build's): every exercise is checked with the model
# answer taken from the course's own lesson module (loaded into the build's package, so it uses the build's
# canonical code), with the placeholder and with every known mistake; solution() and hint() are called.
PROBE = textwrap.dedent('''
    import contextlib, importlib.util, io, json, sys
    from pathlib import Path
    import helpers, helpers.exercises as exercises
    from helpers.exercises import core
    course = Path(sys.argv[1])
    assert Path(helpers.__file__).resolve().is_relative_to(Path.cwd().resolve()), helpers.__file__
    originals, report = {}, {"withheld_flag": core.SOLUTIONS_WITHHELD, "exercises": {}}
    def original(lesson):
        if lesson not in originals:
            name = f"helpers.exercises._course_{lesson}"
            spec = importlib.util.spec_from_file_location(name, course / "helpers" / "exercises" / f"{lesson}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            originals[lesson] = module
        return originals[lesson]
    def placeholder(*args, **kwargs):
        raise NotImplementedError
    for qualified, exercise in exercises.all_exercises().items():
        lesson = qualified.split(".")[0]
        model = getattr(original(lesson), exercise._solution.__name__)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exercise.solution()
            exercise.hint()
        stub_raises = False
        try:
            exercise._solution(*exercise.cases(__import__("torch").Generator().manual_seed(0))[0].fresh_args()[0])
        except NotImplementedError:
            stub_raises = True
        except Exception:
            pass
        named = [(m, exercise.check(m.function)) for m in exercise.mistakes[:1]]  # all of them: test_exercises.py
        report["exercises"][qualified] = {
            "solution": f"{lesson}.{exercise._solution.__name__}",
            "model": exercise.check(model).status,
            "placeholder": exercise.check(placeholder).status,
            "mistakes": [seen.status == "wrong" and m.message in seen.message for m, seen in named],
            "printed": out.getvalue(),
            "stub_raises": stub_raises,
        }
    print(json.dumps(report))
''')


def test_the_withheld_build_runs_every_checker_and_prints_no_answer(tmp_path):
    out = tmp_path / "withheld"
    emptied, kept = withhold_solutions.build(out)
    assert emptied, "the build empties the model answers"
    env = {**os.environ, "PYTHONPATH": str(out), "ATTENTION_COURSE_PROGRESS": "off"}
    env.pop("ATTENTION_COURSE_GRADE_RECORD", None)
    result = subprocess.run([sys.executable, "-c", PROBE, str(ROOT)], cwd=out, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["withheld_flag"] is True
    for name, seen in report["exercises"].items():
        assert seen["model"] == "correct", f"{name}: the model answer fails the withheld checker"
        assert seen["placeholder"] == "not done", name
        assert all(seen["mistakes"]), f"{name}: a known mistake is no longer named"
        assert "withheld the model answers" in seen["printed"] and "def " not in seen["printed"], name
        assert "Hint" in seen["printed"], name
        assert seen["stub_raises"] == (seen["solution"] in emptied), f"{name}: {seen['solution']}"
    assert {seen["solution"] for seen in report["exercises"].values()} <= set(emptied) | set(kept)


def test_withhold_empties_functions_and_classes_but_keeps_what_a_checker_calls():
    text = textwrap.dedent('''
        def _solution_a(x):
            """Docstring."""
            return x + 1  # the answer


        def _solution_b(x): return x * 2


        class _SolutionModule:
            def forward(self, x):
                return x


        def _solution_reference(x):
            return x - 1


        ex_a = FunctionExercise("a", "t", ref, cases, "h", solution=_solution_a)
        ex_b = SpotTheBug("b", "t", ref, cases, "h", _solution_b, buggy, "msg")
        ex_c = FunctionExercise("c", "t", _solution_reference, cases, "h", solution=_solution_reference)
        ex_d = FunctionExercise("d", "t", ref, cases, "h", solution=_SolutionModule)
    ''')
    new, emptied, kept = withhold_solutions.withhold(text)
    assert emptied == ["_solution_a", "_solution_b", "_SolutionModule"] and kept == ["_solution_reference"]
    assert "x + 1" not in new and "x * 2" not in new and "Docstring" not in new and "return x\n" not in new
    assert "return x - 1" in new and "def _solution_b(x):" in new and "def _solution_a(x):" in new
    namespace = {}
    exec(new.split("ex_a =")[0], namespace)
    for name in ("_solution_a", "_solution_b", "_SolutionModule"):
        try:
            namespace[name](1)
        except NotImplementedError as error:
            assert "withheld" in str(error)
        else:
            raise AssertionError(f"{name} still answers")
