"""Lesson 04's exercises: right answers in any reasonable form pass, plausible wrong ones and broken rules fail."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

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


# --- 2. causal attention for a batch ---------------------------------------------------------------------
def _by_hand(queries, keys, values):
    num_tokens = queries.shape[-2]
    hidden = torch.arange(num_tokens)[None, :] > torch.arange(num_tokens)[:, None]
    scores = (queries @ keys.mT).masked_fill(hidden, -torch.inf) / math.sqrt(keys.shape[-1])
    weights = F.softmax(scores, dim=2)
    return weights @ values, weights


@pytest.mark.parametrize("answer", [lesson04.causal_attention._solution, _by_hand])
def test_causal_attention_accepts_right_answers(answer):
    feedback = lesson04.causal_attention.check(answer)
    assert feedback, feedback.message


def test_causal_attention_rejects_the_fused_functions():
    def fused(queries, keys, values):
        context_vecs = F.scaled_dot_product_attention(queries, keys, values, is_causal=True)
        return context_vecs, _by_hand(queries, keys, values)[1]

    def course(queries, keys, values):
        return helpers.scaled_dot_product_attention(queries, keys, values,
                                                    mask=helpers.causal_mask(queries.shape[-2]))
    for answer, name in ((fused, "scaled_dot_product_attention"), (course, "scaled_dot_product_attention")):
        feedback = lesson04.causal_attention.check(answer)
        assert not feedback and name in feedback.message and "values are right" in feedback.message


def test_causal_attention_rejects_a_loop_over_the_batch():
    def per_sequence(queries, keys, values):
        pairs = [_by_hand(q, k, v) for q, k, v in zip(queries, keys, values)]
        return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
    feedback = lesson04.causal_attention.check(per_sequence)
    assert not feedback and ("loop" in feedback.message or "comprehension" in feedback.message)


def test_causal_attention_list_instead_of_tuple_gets_a_precise_message():
    feedback = lesson04.causal_attention.check(lambda q, k, v: list(_by_hand(q, k, v)))
    assert not feedback and "tuple" in feedback.message


@pytest.mark.parametrize("scale_by", ["d_v", "none"])
def test_causal_attention_wrong_scale_is_named(scale_by):
    def answer(queries, keys, values):
        width = values.shape[-1] if scale_by == "d_v" else 1.0
        return _by_hand(queries * math.sqrt(keys.shape[-1]) / math.sqrt(width), keys, values)
    feedback = lesson04.causal_attention.check(answer)
    assert not feedback and "sqrt" in feedback.message


# --- 3. spot the bug: a score of 0 is not hidden -----------------------------------------------------------
def test_zero_fill_is_a_spot_the_bug_and_its_bug_is_named():
    exercise = lesson04.zero_fill
    assert isinstance(exercise, SpotTheBug)
    feedback = exercise.check(exercise.buggy)
    assert not feedback and "exp(0) = 1" in feedback.message


@pytest.mark.parametrize("answer", [
    lesson04.zero_fill._solution,
    lambda s: torch.softmax(s.masked_fill(helpers.causal_mask(s.shape[-1]), -1e9), dim=-1),
    lambda s: helpers.mask_by_renormalising(torch.softmax(s, dim=-1)),
])
def test_zero_fill_accepts_every_right_fix(answer):
    feedback = lesson04.zero_fill.check(answer)
    assert feedback, feedback.message


# --- what every lesson-04 exercise promises -------------------------------------------------------------
@pytest.mark.parametrize("name", lesson04.__all__)
def test_placeholder_is_not_done_and_hides_the_hint(name):
    feedback = getattr(lesson04, name).check(placeholder)
    assert feedback.status == "not done" and "not done yet" in feedback.message
    assert not any(hint in feedback.message for hint in getattr(lesson04, name)._hints)


@pytest.mark.parametrize("name", lesson04.__all__)
def test_hints_do_not_give_the_answer(name):
    for hint in getattr(lesson04, name)._hints:
        for answer in ("diagonal=1", "triu(", "tril(", "-inf", "float('-inf')", "transpose(1, 2)", "> positions",
                       "[None, :] >", "sqrt(d_k)"):
            assert answer not in hint, f"{name}: hint gives away {answer!r}"


def test_at_least_one_exercise_is_not_spot_the_bug():
    exercises = [getattr(lesson04, name) for name in lesson04.__all__]
    assert any(not isinstance(e, SpotTheBug) for e in exercises)
    assert any(isinstance(e, SpotTheBug) for e in exercises)
