"""Notebook 01's exercises: stated instructions are checked, hints do not give the answer, right answers in any
reasonable form pass, and the plausible wrong ones are named."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from helpers.exercises import FunctionExercise, SpotTheBug, lesson01


def test_the_notebook_offers_a_write_exercise_and_a_spot_the_bug():
    assert lesson01.__all__ == ["cosine_scores", "mixed_scores"]
    assert isinstance(lesson01.cosine_scores, FunctionExercise)
    assert not isinstance(lesson01.cosine_scores, SpotTheBug)
    assert isinstance(lesson01.mixed_scores, SpotTheBug)


def test_cosine_scores_rejects_a_loop_even_when_its_values_are_right():
    def with_loop(inputs):
        unit = torch.empty_like(inputs)
        for i in range(inputs.shape[0]):
            unit[i] = inputs[i] / inputs[i].norm()
        return unit @ unit.T

    def with_comprehension(inputs):
        return torch.stack([F.cosine_similarity(inputs, row[None, :], dim=1) for row in inputs])

    for function in (with_loop, with_comprehension):
        feedback = lesson01.cosine_scores.check(function)
        assert not feedback and "no Python loop" in feedback.message


def test_cosine_scores_accepts_other_right_forms():
    def divide_the_scores(inputs):
        lengths = inputs.norm(dim=-1)
        return (inputs @ inputs.T) / torch.outer(lengths, lengths)

    def library(inputs):
        return F.cosine_similarity(inputs[:, None, :], inputs[None, :, :], dim=-1)

    def normalize(inputs):
        unit = F.normalize(inputs, dim=1)
        return unit @ unit.T

    for function in (divide_the_scores, library, normalize):
        assert lesson01.cosine_scores.check(function).passed, function.__name__


def test_cosine_scores_rejects_the_raw_scores_and_a_wrong_normalisation():
    def norm_not_squared_rooted(inputs):  # divides by the sum of the components instead of the length
        unit = inputs / inputs.sum(dim=1, keepdim=True)
        return unit @ unit.T

    for wrong in (lambda x: x @ x.T, norm_not_squared_rooted, lambda x: x @ x.T / x.norm() ** 2):
        assert lesson01.cosine_scores.check(wrong).status == "wrong"


def test_mixed_scores_accepts_other_right_forms():
    assert lesson01.mixed_scores.check(lambda s, a: a @ (a @ s).T).passed  # S is symmetric: (A S)ᵀ = S Aᵀ
    assert lesson01.mixed_scores.check(lambda s, a: torch.einsum("ik,kl,jl->ij", a, s, a)).passed


def test_mixed_scores_names_the_plausible_wrong_answers():
    for wrong in (lambda s, a: a @ s, lambda s, a: s @ a.T, lambda s, a: a @ s @ a, lambda s, a: a.T @ s @ a,
                  lambda s, a: a @ a.T, lambda s, a: s):
        assert lesson01.mixed_scores.check(wrong).status == "wrong"


def test_mixed_scores_names_the_symmetrised_bug():
    """Comparing with Z Zᵀ shows the buggy answer is not symmetric; averaging it with its transpose is still wrong."""
    for wrong in (lambda s, a: (a @ s + (a @ s).T) / 2, lambda s, a: (a @ s + s @ a.T) / 2):
        feedback = lesson01.mixed_scores.check(wrong)
        assert feedback.status == "wrong" and "averaged" in feedback.message


def test_the_comparison_the_lesson_suggests_exposes_the_bug():
    """The lesson runs the buggy code on section 2's example and compares it with Z Zᵀ: they must differ, and
    only where a token blends nothing but itself ("Hello", column 0) may they agree."""
    import helpers

    _, hello_inputs = helpers.hello_shiny_sun()
    attn_weights = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])  # section 2's A
    context_vecs = attn_weights @ hello_inputs
    buggy = lesson01.buggy_mixed_scores(hello_inputs @ hello_inputs.T, attn_weights)
    agree = torch.isclose(buggy, context_vecs @ context_vecs.T)
    assert agree[:, 0].all() and not agree[:, 1:].any()
    assert not torch.allclose(buggy, buggy.T)


def test_the_statements_do_not_give_the_answers_away():
    task = lesson01.mixed_scores.task
    for answer in ("wrong matrix", "Aᵀ", "A S A", "attn_weights.T", "transpose"):
        assert answer not in task, answer


def test_hints_are_nudges_not_answers(capsys):
    for exercise in (lesson01.cosine_scores, lesson01.mixed_scores):
        for _ in range(3):
            exercise.hint()
    shown = capsys.readouterr().out
    for answer in ("dim=1", "dim=-1", "norm(dim=1", "@ unit.T", "A S Aᵀ", "attn_weights.T", "A X Xᵀ Aᵀ",
                   "@ attn_weights"):
        assert answer not in shown, answer


def test_checking_does_not_change_the_learners_inputs_for_the_next_case():
    def in_place(attn_scores, attn_weights):
        attn_scores.copy_(attn_weights @ attn_scores @ attn_weights.T)
        return attn_scores

    assert lesson01.mixed_scores.check(in_place).passed


def test_the_score_matrix_example_of_the_exercise_core_still_works():
    # Not offered by the notebook (it computes X Xᵀ in front of the learner); tests/test_exercises.py uses it.
    assert "score_matrix" not in lesson01.__all__
    assert lesson01.score_matrix.check(lambda x: x @ x.T).passed


def test_the_cosine_hints_explain_keepdim_which_the_lesson_does_not_show(capsys):
    """Notebook 01 divides nothing by a row's own number (notebook 02 does): the second hint explains keepdim."""
    exercise = lesson01.cosine_scores
    exercise._hints_shown = 0
    exercise.hint()
    exercise.hint()
    assert "keepdim=True" in capsys.readouterr().out


def test_the_notebook_pre_fills_the_spot_the_bug_with_its_own_buggy_code():
    import inspect
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "01_dot_product_scores.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    cell = next("".join(c["source"]) for c in cells
                if c["cell_type"] == "code" and "lesson01.mixed_scores.check(" in "".join(c["source"]))
    body = [line for line in cell.splitlines()[2:] if line.strip() and "check(" not in line]
    buggy = inspect.getsource(lesson01.buggy_mixed_scores).splitlines()[1:]
    assert body == buggy
