"""Lesson 05's exercises: random answers are judged on their structure (zeros, survivors, mask) and statistics."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import lesson05
from helpers.masks import causal_mask


def keep_mask(w, p):
    return torch.rand_like(w) >= p


@pytest.mark.parametrize("wrong, expected_words", [
    (lambda w, p: w * keep_mask(w, p), "unchanged"),
    (lambda w, p: w * keep_mask(w, p) * (1 - p), "multiplied by (1 - p)"),
    (lambda w, p: w * (torch.rand_like(w) < p) / (1 - p) if p > 0 else w, "DROPPED, not kept"),
    (lambda w, p: w * (torch.rand(w.shape, generator=torch.Generator().manual_seed(1)) >= p) / (1 - p),
     "exactly the same weights"),
    (lambda w, p: w * (torch.rand_like(w) >= p / 2) / (1 - p), "should be close to"),
    (lambda w, p: torch.where(keep_mask(w, p), w / (1 - p), w), "kept their old value"),
    (lambda w, p: w * (torch.rand(w.shape[-1]) >= p) / (1 - p), "every row dropped the same keys"),
    (lambda w, p: w * (torch.rand(*w.shape[:-1], 1) >= p) / (1 - p), "one coin flip per query"),
    (lambda w, p: w * (torch.rand(w.shape[-2:]) >= p) / (1 - p), "every sequence of the batch got the same mask"),
    (lambda w, p: w * keep_mask(w, p) / (1 - p) + (w == 0) * 0.01, "a weight that was 0 is no longer 0"),
    (lambda w, p: keep_mask(w, p), "dtype torch.bool"),
])
def test_wrong_dropout_answers_are_named(wrong, expected_words):
    feedback = lesson05.attention_dropout.check(wrong)
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


@pytest.mark.parametrize("call", [
    lambda w, p: F.dropout(w, p),
    lambda w, p: torch.nn.Dropout(p)(w),
    lambda w, p: torch.dropout(w, p, True),
])
def test_calling_pytorchs_dropout_is_refused_by_name(call):
    feedback = lesson05.attention_dropout.check(call)
    assert feedback.status == "wrong"
    assert "the values are right" in feedback.message and "not to call" in feedback.message


@pytest.mark.parametrize("right", [
    lambda w, p: w * keep_mask(w, p) / (1 - p),
    lambda w, p: w * torch.bernoulli(torch.full_like(w, 1 - p)) / (1 - p),
    lambda w, p: torch.where(torch.rand(w.shape) < p, torch.zeros_like(w), w / (1 - p)),
    lambda w, p: w.clone().mul_(keep_mask(w, p)).div_(1 - p),
])
def test_right_dropout_answers_in_any_reasonable_form_pass(right):
    feedback = lesson05.attention_dropout.check(right)
    assert feedback.passed, feedback.message


def test_checking_dropout_does_not_move_the_learners_random_stream_more_than_their_own_calls():
    torch.manual_seed(5)
    lesson05.attention_dropout.check(lesson05.attention_dropout._solution)
    after_one = torch.rand(3)
    torch.manual_seed(5)
    lesson05.attention_dropout.check(lesson05.attention_dropout._solution)
    assert torch.equal(torch.rand(3), after_one)  # the same feedback and the same stream, every run


def _causal(s):
    return torch.softmax(s.masked_fill(causal_mask(s.shape[-1]), float("-inf")), dim=-1)


@pytest.mark.parametrize("wrong, expected_words", [
    (lesson05.buggy_weights_with_dropout, "runs before the softmax"),
    (lambda s, p: (lambda d: d / d.sum(-1, keepdim=True).clamp_min(1e-12))(F.dropout(_causal(s), p)),
     "renormalised"),
    (lambda s, p: F.dropout(torch.softmax(s, dim=-1), p), "sees a future token"),
    (lambda s, p: _causal(s) * keep_mask(s, p), "unchanged"),
    (lambda s, p: F.dropout(torch.softmax(s, -1), p).masked_fill(causal_mask(s.shape[-1]), 0.0),
     "must be exactly causal weight / (1 - p)"),
    (lambda s, p: F.dropout(_causal(s), p / 2) * (1 - p / 2) / (1 - p), "should be close to"),
])
def test_dropout_in_the_wrong_place_is_named(wrong, expected_words):
    feedback = lesson05.dropout_after_softmax.check(wrong)
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


@pytest.mark.parametrize("right", [
    lambda s, p: F.dropout(_causal(s), p),
    lambda s, p: torch.nn.Dropout(p)(_causal(s)),
    lambda s, p: (lambda w: w * (torch.rand_like(w) >= p) / (1 - p))(_causal(s)),
    lambda s, p: F.dropout(torch.softmax(s, -1).masked_fill(causal_mask(s.shape[-1]), 0.0)
                           / torch.softmax(s, -1).masked_fill(causal_mask(s.shape[-1]), 0.0).sum(-1, keepdim=True),
                           p),  # mask after the softmax, then renormalise: the same weights
])
def test_right_fixes_pass(right):
    feedback = lesson05.dropout_after_softmax.check(right)
    assert feedback.passed, feedback.message


def test_hints_are_nudges_not_answers():
    for exercise in (lesson05.rescale_survivors, lesson05.attention_dropout, lesson05.dropout_after_softmax):
        for hint in exercise._hints:
            for answer in ("/ (1 - p)", "/(1 - p)", "/(1-p)", "rand_like(attn_weights) >= p", "dim=-1",
                           "after the softmax"):
                assert answer not in hint, (exercise.title, hint)
