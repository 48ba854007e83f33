"""Lesson 04's exercises: right answers in any reasonable form pass, plausible wrong ones and broken rules fail."""

from __future__ import annotations

import inspect

import pytest
import torch

import helpers
from helpers.exercises import SpotTheBug, lesson04


def placeholder(*args, **kwargs):
    raise NotImplementedError


# --- 1. causal mask from positions ----------------------------------------------------------------------
@pytest.mark.parametrize("answer", [
    lambda n: torch.arange(n)[None, :] > torch.arange(n)[:, None],
    lambda n: torch.arange(n).unsqueeze(0) > torch.arange(n).unsqueeze(1),
    lambda n: torch.arange(n)[:, None] < torch.arange(n),
    lambda n: (torch.arange(n).view(1, -1) - torch.arange(n).view(-1, 1)) > 0,
])
def test_causal_mask_accepts_every_comparison_of_positions(answer):
    assert lesson04.causal_mask.check(answer), lesson04.causal_mask.check(answer).message


@pytest.mark.parametrize("answer, words", [
    (lambda n: torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), "torch.triu"),
    (lambda n: ~torch.tril(torch.ones(n, n, dtype=torch.bool)), "torch.tril"),
    (lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), "torch.Tensor.triu"),
    (lambda n: helpers.causal_mask(n), "causal_mask"),
])
def test_causal_mask_rejects_triangles_by_name(answer, words):
    feedback = lesson04.causal_mask.check(answer)
    assert not feedback and words in feedback.message and "values are right" in feedback.message


def test_causal_mask_rejects_a_loop_even_when_right():
    def with_loop(n):
        mask = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            mask[i, i + 1:] = True
        return mask
    feedback = lesson04.causal_mask.check(with_loop)
    assert not feedback and "loop" in feedback.message


def test_causal_mask_float_answer_is_told_its_dtype():
    feedback = lesson04.causal_mask.check(lambda n: (torch.arange(n)[None, :] > torch.arange(n)[:, None]).float())
    assert not feedback and "dtype torch.float32" in feedback.message


def test_causal_mask_swapped_axes_are_named():
    feedback = lesson04.causal_mask.check(lambda n: torch.arange(n)[:, None] > torch.arange(n)[None, :])
    assert "swapped" in feedback.message


# --- 2. who influences whom: causality from the outputs alone -----------------------------------------------
def _by_perturbation(attention, inputs, compare="exact", disturb=lambda token: token * 2.0 + 1.0):
    num_tokens = inputs.shape[1]
    before = attention(inputs)
    columns = []
    for j in range(num_tokens):
        changed = inputs.clone()
        changed[:, j] = disturb(changed[:, j])
        after = attention(changed)
        moved = (after != before) if compare == "exact" else ~torch.isclose(after, before, atol=1e-6)
        columns.append(moved.any(dim=2).any(dim=0))        # (T,)
    return torch.stack(columns, dim=1)                     # (T, T): column j = the outputs that token j moves


def _by_jacobian(attention, inputs):
    jacobian = torch.autograd.functional.jacobian(attention, inputs)   # (B, T, d_out, B, T, d_in)
    return (jacobian != 0).any(dim=5).any(dim=3).any(dim=2).any(dim=0)


def _by_prefixes_and_suffixes(attention, inputs):
    """Another right answer: replace token j by a random vector, compare with a tolerance, batch element 0 only."""
    generator = torch.Generator().manual_seed(1)
    return _by_perturbation(attention, inputs[:1], compare="close",
                            disturb=lambda token: torch.randn(token.shape, generator=generator))


@pytest.mark.parametrize("answer", [lesson04.influence._solution, _by_perturbation, _by_jacobian,
                                    _by_prefixes_and_suffixes])
def test_influence_accepts_every_right_experiment(answer):
    feedback = lesson04.influence.check(answer)
    assert feedback, feedback.message


def test_influence_cases_cover_a_causal_layer_and_three_kinds_of_leak():
    cases = lesson04.influence.cases(torch.Generator().manual_seed(0))
    patterns = [lesson04.influence.reference(*case.args) for case in cases]
    future = [p & helpers.causal_mask(p.shape[0]) for p in patterns]
    assert not future[0].any() and not future[-1].any()                      # the causal layer
    assert sum(bool(f.any()) for f in future) == 3                            # three layers that leak
    assert patterns[-1].shape == (1, 1)                                       # and a single token


def test_influence_reference_is_what_the_layers_do():
    """The known patterns agree with an experiment on every case (so the reference is not just asserted)."""
    for case in lesson04.influence.cases(torch.Generator().manual_seed(0)):
        torch.testing.assert_close(_by_jacobian(*case.args), lesson04.influence.reference(*case.args))


def test_influence_checking_does_not_move_the_learners_random_stream():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    lesson04.influence.check(lesson04.influence._solution)
    torch.testing.assert_close(torch.rand(3), expected)


@pytest.mark.parametrize("wrong, words", [
    (lambda attention, inputs: _by_perturbation(attention, inputs).T, "swapped"),
    (lambda attention, inputs: _by_perturbation(attention, inputs) & helpers.causal_mask(inputs.shape[1]),
     "whole matrix"),
    (lambda attention, inputs: torch.ones(inputs.shape[1], inputs.shape[1], dtype=torch.bool), "values are not"),
    (lambda attention, inputs: ~helpers.causal_mask(inputs.shape[1]), "values are not"),   # assumes causality
    (lambda attention, inputs: _by_perturbation(attention, inputs).int(), "dtype"),
    (lambda attention, inputs: list(_by_perturbation(attention, inputs)), "tensor"),
])
def test_influence_rejects_plausible_wrong_answers(wrong, words):
    feedback = lesson04.influence.check(wrong)
    assert not feedback and words in feedback.message, feedback.message


# --- 3. spot the bug: a score of 0 is not hidden -----------------------------------------------------------
def test_hidden_yet_weighted_is_a_spot_the_bug_and_its_bug_is_named():
    exercise = lesson04.hidden_yet_weighted
    assert isinstance(exercise, SpotTheBug)
    feedback = exercise.check(exercise.buggy)
    assert not feedback and "exp(0) = 1" in feedback.message


def test_hidden_yet_weighted_buggy_code_builds_its_mask_where_the_scores_are():
    source = inspect.getsource(lesson04.hidden_yet_weighted.buggy)
    assert "device=scaled_scores.device" in source
    scores = torch.randn(4, 4, device="meta")
    assert lesson04.hidden_yet_weighted.buggy(scores).device.type == "meta"   # no CPU-only tensor inside


@pytest.mark.parametrize("answer", [
    lesson04.hidden_yet_weighted._solution,
    lambda s: torch.softmax(s.masked_fill(helpers.causal_mask(s.shape[-1]), -1e9), dim=-1),
    lambda s: helpers.mask_by_renormalising(torch.softmax(s, dim=-1)),
])
def test_hidden_yet_weighted_accepts_every_right_fix(answer):
    feedback = lesson04.hidden_yet_weighted.check(answer)
    assert feedback, feedback.message


def test_hidden_yet_weighted_says_its_scores_are_already_scaled():
    exercise = lesson04.hidden_yet_weighted
    assert "already divided by sqrt(d_k)" in exercise.task
    assert "scaled_scores" in inspect.getsource(exercise.buggy)
    scaled_again = lambda s: torch.softmax(   # noqa: E731 - a learner who "fixes" the scaling too
        s.masked_fill(helpers.causal_mask(s.shape[-1]), float("-inf")) / s.shape[-1] ** 0.5, dim=-1)
    feedback = exercise.check(scaled_again)
    assert not feedback and "already divided by sqrt(d_k)" in feedback.message, feedback.message


# --- what every lesson-04 exercise promises -------------------------------------------------------------
@pytest.mark.parametrize("name", lesson04.__all__)
def test_placeholder_is_not_done_and_hides_the_hint(name):
    feedback = getattr(lesson04, name).check(placeholder)
    assert feedback.status == "not done" and "not done yet" in feedback.message
    assert not any(hint in feedback.message for hint in getattr(lesson04, name)._hints)


@pytest.mark.parametrize("name", lesson04.__all__)
def test_hints_do_not_give_the_answer(name):
    for hint in getattr(lesson04, name)._hints:
        for answer in ("diagonal=1", "triu(", "tril(", "-inf", "float('-inf')", "> positions", "[None, :] >",
                       "clone()", "+= ", "[:, j]", "jacobian"):
            assert answer not in hint, f"{name}: hint gives away {answer!r}"


def test_at_least_one_exercise_is_not_spot_the_bug():
    exercises = [getattr(lesson04, name) for name in lesson04.__all__]
    assert any(not isinstance(e, SpotTheBug) for e in exercises)
    assert any(isinstance(e, SpotTheBug) for e in exercises)
