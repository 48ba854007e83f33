"""Notebook 01's exercises: stated instructions are checked, hints do not give the answer, right answers in any
reasonable form pass."""

from __future__ import annotations

import torch

from helpers.exercises import SpotTheBug, lesson01


def test_score_matrix_rejects_a_loop_even_when_its_values_are_right():
    def with_loop(inputs):
        scores = torch.empty(inputs.shape[0], inputs.shape[0])
        for i in range(inputs.shape[0]):
            scores[i] = inputs @ inputs[i]
        return scores

    def with_comprehension(inputs):
        return torch.stack([inputs @ row for row in inputs])

    for function in (with_loop, with_comprehension):
        feedback = lesson01.score_matrix.check(function)
        assert not feedback and "no Python loop" in feedback.message


def test_score_matrix_accepts_other_ways_to_write_the_product():
    assert lesson01.score_matrix.check(lambda x: torch.matmul(x, x.transpose(0, 1))).passed
    assert lesson01.score_matrix.check(lambda x: torch.einsum("id,jd->ij", x, x)).passed


def test_hints_are_nudges_not_answers(capsys):
    for exercise in (lesson01.score_matrix, lesson01.stretched_scores, lesson01.mixed_scores):
        for _ in range(3):
            exercise.hint()
    shown = capsys.readouterr().out
    for answer in ("inputs @ inputs.T", "inputs.T", "X Xᵀ", "transposed", "mixed @ mixed", "factor ** 2",
                   "factor squared", "[token_index, :]"):
        assert answer not in shown, answer


def test_stretched_scores_is_a_prediction_exercise_not_a_spot_the_bug():
    assert not isinstance(lesson01.stretched_scores, SpotTheBug)


def test_stretched_scores_accepts_an_outer_product_form():
    def outer(attn_scores, token_index, factor):
        scale = torch.ones(attn_scores.shape[0])
        scale[token_index] = factor
        return torch.outer(scale, scale) * attn_scores

    assert lesson01.stretched_scores.check(outer).passed


def test_stretched_scores_names_the_plausible_wrong_predictions():
    def only_column(s, i, c):
        out = s.clone()
        out[:, i] *= c
        return out

    def only_diagonal_squared(s, i, c):
        out = s.clone()
        out[i, i] *= c * c
        return out

    for wrong in (only_column, only_diagonal_squared):
        feedback = lesson01.stretched_scores.check(wrong)
        assert feedback.status == "wrong", wrong.__name__


def test_stretched_scores_does_not_change_its_input_for_the_next_case():
    def in_place(attn_scores, token_index, factor):
        attn_scores[token_index, :] *= factor
        attn_scores[:, token_index] *= factor
        return attn_scores

    assert lesson01.stretched_scores.check(in_place).passed
