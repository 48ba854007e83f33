"""Notebook 02's exercises: stated instructions are checked, hints do not give the answer, right answers in any
reasonable form pass."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import SpotTheBug, lesson02


@pytest.mark.parametrize("call", [
    lambda s: torch.softmax(s, dim=-1),
    lambda s: F.softmax(s, dim=-1),
    lambda s: s.softmax(dim=-1),
    lambda s: torch.special.softmax(s, dim=-1),
])
def test_stable_softmax_rejects_every_softmax_call(call):
    feedback = lesson02.stable_softmax.check(call)
    assert not feedback and "not to call" in feedback.message


def test_stable_softmax_accepts_other_ways_to_shift():
    def with_logsumexp(scores):
        return torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
    assert lesson02.stable_softmax.check(with_logsumexp).passed


def test_temperature_limits_is_not_a_spot_the_bug_and_forbids_softmax():
    assert not isinstance(lesson02.temperature_limits, SpotTheBug)
    feedback = lesson02.temperature_limits.check(
        lambda s: (torch.softmax(s / 1e-6, dim=-1), torch.softmax(s / 1e6, dim=-1)))
    assert not feedback and "not to call" in feedback.message


def test_temperature_limits_answers_in_a_list_get_a_precise_message():
    right = lesson02.temperature_limits._solution
    feedback = lesson02.temperature_limits.check(lambda s: list(right(s)))
    assert not feedback and "tuple" in feedback.message


def test_temperature_limits_accepts_another_right_form():
    def other(attn_scores):
        top = attn_scores.amax(dim=-1, keepdim=True)
        cold = torch.where(attn_scores == top, 1.0, 0.0)
        cold = cold / cold.sum(dim=-1, keepdim=True)
        return cold, torch.full(attn_scores.shape, 1.0) / attn_scores.shape[-1]
    assert lesson02.temperature_limits.check(other).passed


def test_scaled_attention_accepts_batched_forms():
    def with_einsum(q, k, v):
        weights = torch.einsum("...id,...jd->...ij", q, k).div(math.sqrt(k.shape[-1])).softmax(dim=-1)
        return weights @ v
    assert lesson02.scaled_attention.check(with_einsum).passed
    assert lesson02.scaled_attention.check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)).passed


def test_hints_are_nudges_not_answers(capsys):
    for name in lesson02.__all__:
        for _ in range(3):
            getattr(lesson02, name).hint()
    shown = capsys.readouterr().out
    for answer in ("max(dim=-1, keepdim=True)", "keys.transpose(-2, -1)", "attn_weights @", "weights @ inputs",
                   "1 / num_keys", "one-hot", "uniform", "sqrt(keys.shape[-1])"):
        assert answer not in shown, answer
