"""The exercise checkers: model answers pass, known mistakes and plausible wrong answers are named."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

import helpers.exercises as exercises
from helpers.exercises import FunctionExercise, SpotTheBug, lesson01, lesson03, lesson04, lesson06

ALL = exercises.all_exercises()
MISTAKES = [(name, index) for name, exercise in ALL.items() for index in range(len(exercise.mistakes))]


def placeholder(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("name", ALL)
def test_model_answer_passes(name):
    feedback = ALL[name].check(ALL[name]._solution)
    assert feedback.passed, feedback.message
    assert bool(feedback) and feedback.message.startswith("✅")


@pytest.mark.parametrize("name, index", MISTAKES)
def test_every_known_mistake_is_rejected_by_name(name, index):
    exercise = ALL[name]
    mistake = exercise.mistakes[index]
    feedback = exercise.check(mistake.function)
    assert not feedback
    assert feedback.status == "wrong"
    assert mistake.message in feedback.message


@pytest.mark.parametrize("name", ALL)
def test_placeholder_is_not_done_yet_and_points_to_the_hint_without_giving_it(name):
    exercise = ALL[name]
    feedback = exercise.check(placeholder)
    assert feedback.status == "not done" and not feedback
    assert "not done yet" in feedback.message and f"`{name}.hint()`" in feedback.message
    for hint in exercise._hints:
        assert hint not in feedback.message, "hints are shown only when asked for"


@pytest.mark.parametrize("name", ALL)
def test_feedback_is_the_same_every_run(name):
    exercise = ALL[name]
    wrong = exercise.mistakes[0].function if exercise.mistakes else placeholder
    assert repr(exercise.check(wrong)) == repr(exercise.check(wrong))


def test_every_lesson_has_two_to_four_exercises_and_a_spot_the_bug():
    lessons = {}
    for name, exercise in ALL.items():
        lessons.setdefault(name.split(".")[0], []).append(exercise)
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    assert set(lessons) == {f"lesson{path.name[:2]}" for path in notebooks.glob("[0-9][0-9]_*.ipynb")}
    for lesson, items in lessons.items():
        plain = [e for e in items if not isinstance(e, SpotTheBug)]
        assert 2 <= len(plain) <= 4 or (len(plain) >= 1 and len(items) <= 4), lesson
        assert any(isinstance(e, SpotTheBug) for e in items), f"{lesson} has no spot-the-bug exercise"


@pytest.mark.parametrize("name", [n for n, e in ALL.items() if isinstance(e, SpotTheBug)])
def test_buggy_code_runs_and_is_named(name, capsys):
    exercise = ALL[name]
    feedback = exercise.check(exercise.buggy)
    assert feedback.status == "wrong"
    assert exercise.mistakes[0].message in feedback.message
    exercise.show()
    assert "def buggy_" in capsys.readouterr().out


def test_solution_is_shown_only_on_request_under_the_task_name(capsys, monkeypatch):
    monkeypatch.setattr(lesson01.score_matrix, "_answer_name", "")      # no check has seen a learner's function
    lesson01.score_matrix.solution()
    out = capsys.readouterr().out
    assert "def score_matrix(inputs):" in out and "inputs @ inputs.T" in out
    lesson01.score_matrix.check(placeholder)
    assert "inputs @ inputs.T" not in capsys.readouterr().out


@pytest.mark.parametrize("name", ALL)
def test_a_pasted_model_answer_replaces_the_learners_cell_and_passes(name, capsys, monkeypatch):
    """solution() prints the answer under the name of the learner's function (or class) that the cell checks, so
    that pasting it over the cell defines what the cell's check call uses; the answer then passes."""
    exercise = ALL[name]
    monkeypatch.setattr(exercise, "_answer_name", "")

    def learner_answer(*args, **kwargs):
        raise NotImplementedError

    exercise.check(learner_answer)
    exercise.check(exercise._solution)              # the model answer's own (private) name is never taken
    capsys.readouterr()
    exercise.solution()
    printed = capsys.readouterr().out.split(":\n\n", 1)[1]
    assert printed.lstrip().startswith(("def learner_answer(", "class learner_answer(")), printed[:80]
    namespace = dict(vars(importlib.import_module(exercise._solution.__module__)))   # the lesson's own names
    exec(printed, namespace)
    feedback = exercise.check(namespace["learner_answer"])
    assert feedback.passed, feedback.message


def test_shape_is_reported_before_values():
    feedback = lesson01.score_matrix.check(lambda inputs: (inputs @ inputs.T)[:2])
    assert "shape (2, 6)" in feedback.message and "(6, 6)" in feedback.message


def test_first_differing_position_is_named():
    def off_by_one_cell(inputs):
        scores = inputs @ inputs.T
        scores[2, 3] += 1.0
        return scores
    feedback = lesson01.score_matrix.check(off_by_one_cell)
    assert "row 2, column 3" in feedback.message


def test_errors_are_reported_without_a_traceback():
    feedback = lesson01.score_matrix.check(lambda inputs: inputs @ torch.ones(5))
    assert feedback.status == "wrong" and "RuntimeError" in feedback.message
    assert "expected a function" in lesson01.score_matrix.check(3).message


def test_wrong_kind_of_result_and_wrong_dtype():
    assert "got an int" in lesson01.score_matrix.check(lambda inputs: 3).message
    # influence must be a bool matrix; a float 0/1 matrix of the right pattern is the wrong dtype
    feedback = lesson04.influence.check(lambda attention, inputs: torch.tril(torch.ones(inputs.shape[1],
                                                                                      inputs.shape[1])))
    assert "dtype torch.float32" in feedback.message and "torch.bool" in feedback.message


def test_nan_is_explained():
    feedback = lesson01.score_matrix.check(lambda inputs: inputs @ inputs.T * float("nan"))
    assert "nan" in feedback.message and "0/0" in feedback.message


leftover = torch.ones(6, 6) / 6  # a global a learner's function might read by accident


def test_reading_a_notebook_global_is_named():
    def reads_global(W_query, W_key):
        d_in = W_query.shape[0]
        return leftover[:d_in, :d_in] + W_query @ W_key.T
    feedback = lesson03.query_key_matrix.check(reads_global)
    assert "`leftover`" in feedback.message and "global" in feedback.message


def test_same_output_for_different_inputs_is_named():
    frozen = torch.zeros(6, 6)
    feedback = lesson01.score_matrix.check(lambda inputs: frozen[: inputs.shape[0], : inputs.shape[0]] + 1.0)
    assert "differ" in feedback.message or "values are not" in feedback.message
    constant = FunctionExercise("constant", "t", reference=lambda x: x * 2,
                                cases=lambda g: [exercises.Case("a", (torch.ones(2),)),
                                                 exercises.Case("b", (torch.full((2,), 3.0),))],
                                hint="h", solution=lambda x: x * 2)
    feedback = constant.check(lambda x: torch.full((2,), 2.0))
    assert "returned exactly what it returned for a" in feedback.message


@pytest.mark.parametrize("name", ALL)
def test_checking_keeps_the_global_random_stream(name):
    """A learner's next random draw is the same whether or not they checked an exercise in between."""
    torch.manual_seed(5)
    expected_next = torch.rand(3)
    torch.manual_seed(5)
    ALL[name].check(ALL[name]._solution)
    assert torch.equal(torch.rand(3), expected_next)


def test_inputs_changed_in_place_do_not_spoil_the_reference():
    def in_place(inputs):
        result = inputs @ inputs.T
        inputs.zero_()
        return result
    assert lesson01.score_matrix.check(in_place).passed


def test_bad_construction():
    with pytest.raises(TypeError, match="reference must be callable"):
        FunctionExercise("t", "t", reference=3, cases=lambda g: [], hint="h", solution=lambda: 0)


# --- answers with inf, -inf and nan, and answers of the wrong kind: every checker explains, none raises ----------
def _corrupt(value, how):
    """``value`` (a model answer's result) spoiled in one way; non-tensors become a float or another type."""
    if isinstance(value, tuple):
        return tuple(_corrupt(v, how) for v in value)
    if not isinstance(value, torch.Tensor):
        return {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan"), "finite": 0.5,
                "first-inf": float("inf"), "first-nan": float("nan"), "mixed": float("nan")}[how]
    spoiled = value.detach().clone().to(torch.float32) if value.dtype == torch.bool or not value.is_floating_point() \
        else value.detach().clone()
    flat = spoiled.view(-1) if spoiled.dim() else spoiled.view(1)
    if how in ("inf", "-inf", "nan"):
        flat.fill_(float(how))
    elif how == "finite":  # a finite number wherever the answer is -inf or inf (the merge_states crash)
        flat.copy_(torch.nan_to_num(flat, nan=0.0, posinf=0.0, neginf=0.0))
    elif how == "first-inf" and flat.numel():
        flat[0] = float("inf") if flat[0] != float("inf") else float("-inf")
    elif how == "first-nan" and flat.numel():
        flat[0] = float("nan")
    elif how == "mixed" and flat.numel():
        flat[:: 3] = float("-inf")
        flat[1:: 3] = float("nan")
        flat[2:: 3] = float("inf")
    return spoiled


def _same(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)  # a dtype change alone spoils nothing
        return a.shape == b.shape and bool(torch.equal(a.nan_to_num(), b.nan_to_num())) \
            and bool(torch.equal(a.isnan(), b.isnan()))
    return type(a) is type(b) and a == b


class _RaisingEq:
    def __eq__(self, other):
        raise RuntimeError("== is not defined here")

    __hash__ = None


def _wrong_kinds(value):
    """Answers of the wrong type or shape built from the model answer's result."""
    import numpy as np
    first = value[0] if isinstance(value, tuple) else value
    yield "None", None
    yield "a string", "attention"
    yield "an object whose == raises", _RaisingEq()
    yield "a dict", {"answer": first}
    yield "a numpy array", np.zeros((2, 2))
    yield "an empty tuple", ()
    yield "a complex tensor", torch.zeros(3, dtype=torch.complex64)
    yield "a 0-d tensor", torch.tensor(float("nan"))
    if isinstance(first, torch.Tensor):
        yield "the transpose-like reshape", first.detach().reshape(-1)
        yield "an extra dimension", first.detach().unsqueeze(0)
        yield "a bool tensor", torch.ones_like(first, dtype=torch.bool)
        yield "an int tensor", torch.ones_like(first, dtype=torch.int64)
    if isinstance(value, tuple):
        yield "one output too few", value[:-1]
        yield "a list for a tuple", list(value)
        yield "one output too many", (*value, torch.zeros(1))


HOW = ("inf", "-inf", "nan", "finite", "first-inf", "first-nan", "mixed")


def _hostile_answers(exercise):
    """(description, function) pairs: each calls the model answer, then spoils its result."""
    solution = exercise._solution

    def spoiled(how):
        def answer(*args, **kwargs):
            return _corrupt(solution(*args, **kwargs), how)
        return answer

    for how in HOW:
        yield f"values set to {how}", spoiled(how), how
    case = exercise.cases(torch.Generator().manual_seed(exercise.seed))[0]
    args, kwargs = case.fresh_args()
    result = solution(*args, **kwargs)
    for description, wrong in _wrong_kinds(result):
        yield description, (lambda *a, __wrong=wrong, **k: __wrong), None


@pytest.mark.parametrize("name", ALL)
def test_every_checker_explains_inf_nan_and_wrong_kinds_without_raising(name):
    """Issue 20: a checker must never crash on an answer, whatever it returns (inf, -inf, nan on either side)."""
    exercise = ALL[name]
    case = exercise.cases(torch.Generator().manual_seed(exercise.seed))[0]
    args, kwargs = case.fresh_args()
    model = exercise._solution(*args, **kwargs)
    for description, answer, how in _hostile_answers(exercise):
        feedback = exercise.check(answer)  # must not raise
        assert isinstance(feedback, exercises.Feedback), description
        assert isinstance(feedback.message, str) and feedback.message.strip(), description
        if how is not None:
            args, kwargs = case.fresh_args()
            if _same(_corrupt(model, how), model):
                continue  # this spoiling changed nothing on the first case (e.g. an answer that is all nan)
        assert not feedback, f"{name}: {description} passed: {feedback.message}"
        assert feedback.status == "wrong", (description, feedback.message)
        assert "could not be compared" not in feedback.message or how is None, (description, feedback.message)


def test_a_finite_value_where_minus_inf_is_expected_is_named_by_position():
    """The merge_states crash: |a - (-inf)| > atol + rtol * inf is False, so the old report found no position."""
    exercise = FunctionExercise("masked scores", "t", reference=lambda x: x.masked_fill(x > 0, float("-inf")),
                                cases=lambda g: [exercises.Case("a row", (torch.tensor([-1.0, 2.0, -3.0]),))],
                                hint="h", solution=lambda x: x)
    feedback = exercise.check(lambda x: x.masked_fill(x > 0, -1e9))
    assert not feedback and "position 1" in feedback.message and "-inf" in feedback.message
    feedback = exercise.check(lambda x: x.masked_fill(x > 0, float("inf")))
    assert not feedback and "position 1" in feedback.message and "inf" in feedback.message
    assert exercise.check(lambda x: x.masked_fill(x > 0, float("-inf")))


def test_numbers_compare_with_a_tolerance_and_nan_safely():
    exercise = FunctionExercise("a number", "t", reference=lambda x: 0.1 + 0.2,
                                cases=lambda g: [exercises.Case("once", (1,))], hint="h", solution=lambda x: 0.3)
    assert exercise.check(lambda x: 0.3)
    feedback = exercise.check(lambda x: float("nan"))
    assert not feedback and "nan" in feedback.message
    assert not exercise.check(lambda x: float("inf"))


def test_a_reseeding_rule_catches_the_global_generator_but_not_an_own_generator():
    import helpers.device

    def reference(n):
        return torch.rand(n, generator=torch.Generator().manual_seed(0))

    exercise = FunctionExercise("draws", "t", reference=reference, cases=lambda g: [exercises.Case("n=3", (3,))],
                                hint="h", solution=reference,
                                rules=[exercises.no_reseeding(why="Hand the function a torch.Generator instead.")])
    assert exercise.check(reference)

    def reseeds(n):
        torch.manual_seed(0)
        return reference(n)

    def seeds_everything(n):
        helpers.device.seed_everything(0)
        return reference(n)

    for function, called in ((reseeds, "torch.manual_seed"), (seeds_everything, "helpers.device.seed_everything")):
        feedback = exercise.check(function)
        assert not feedback and "reseed the global random generator" in feedback.message, feedback.message
        assert f"`{called}`" in feedback.message and "torch.Generator instead" in feedback.message
    assert torch.manual_seed is not None and "recorder" not in repr(torch.manual_seed)


def test_solution_prints_one_sentence_when_withheld(capsys, monkeypatch):
    from helpers.exercises import core
    monkeypatch.setattr(core, "SOLUTIONS_WITHHELD", True)
    lesson01.cosine_scores.solution()
    out = capsys.readouterr().out
    assert out.strip() == core.WITHHELD_MESSAGE and "def " not in out


def test_progress_is_kept_only_for_passes_in_a_kernel_and_never_while_grading(tmp_path, monkeypatch, capsys):
    import json
    from helpers.exercises import records
    record = tmp_path / "progress.json"
    monkeypatch.setenv("ATTENTION_COURSE_PROGRESS", str(record))
    monkeypatch.delenv("ATTENTION_COURSE_GRADE_RECORD", raising=False)
    exercise = ALL["lesson01.cosine_scores"]
    exercise.check(exercise._solution)
    assert not record.exists(), "outside a kernel (scripts, unit tests) nothing is written"
    monkeypatch.setattr(records, "_in_a_kernel", lambda: True)  # pretend to be in a Jupyter kernel
    exercise.check(placeholder)
    assert not record.exists(), "only passes are written"
    feedback = exercise.check(exercise._solution)
    assert feedback and str(record) in feedback.message
    assert "lesson01.cosine_scores" in json.loads(record.read_text())["passed"]
    assert str(record) not in exercise.check(exercise._solution).message, "the note comes once, with the new file"
    exercises.progress()
    out = capsys.readouterr().out
    assert "✅ cosine_scores" in out and str(record) in out and f"of {len(ALL)}" in out
    record.unlink()
    grade_file = tmp_path / "grade.jsonl"
    monkeypatch.setenv("ATTENTION_COURSE_GRADE_RECORD", str(grade_file))
    exercise.check(exercise._solution)
    exercise.check(placeholder)
    assert not record.exists(), "grading turns progress off"
    lines = [json.loads(line) for line in grade_file.read_text().splitlines()]
    assert [line["status"] for line in lines] == ["correct", "not done"]
    assert lines[0]["exercise"] == "lesson01.cosine_scores"
    monkeypatch.delenv("ATTENTION_COURSE_GRADE_RECORD")
    monkeypatch.setenv("ATTENTION_COURSE_PROGRESS", "off")
    exercise.check(exercise._solution)
    assert not record.exists() and records.progress_path() is None
