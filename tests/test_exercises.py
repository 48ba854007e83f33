"""The exercise checkers: model answers pass, known mistakes and plausible wrong answers are named."""

from __future__ import annotations

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
    assert len(lessons) == 11
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


def test_solution_is_shown_only_on_request_under_the_task_name(capsys):
    lesson01.score_matrix.check(placeholder)
    assert "inputs @ inputs.T" not in capsys.readouterr().out
    lesson01.score_matrix.solution()
    out = capsys.readouterr().out
    assert "def score_matrix(inputs):" in out and "inputs @ inputs.T" in out


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
    feedback = lesson04.causal_mask.check(lambda n: torch.triu(torch.ones(n, n), diagonal=2))
    assert "dtype torch.float32" in feedback.message


def test_nan_is_explained():
    feedback = lesson01.score_matrix.check(lambda inputs: inputs @ inputs.T * float("nan"))
    assert "nan" in feedback.message and "0/0" in feedback.message


leftover = torch.ones(6, 6) / 6  # a global a learner's function might read by accident


def test_reading_a_notebook_global_is_named():
    def reads_global(x_q, x_kv, W_query, W_key, W_value):
        values = x_kv @ W_value
        return leftover @ values
    feedback = lesson03.cross_attention.check(reads_global)
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
