"""Lesson 05's exercises: random answers are judged on their structure (zeros, survivors, mask) and statistics."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import lesson05
from helpers.masks import causal_mask


def keep_mask(w, p):
    return torch.rand_like(w) >= p


def in_training(dropout):
    """A learner's dropout that also handles training=False (returns the weights unchanged)."""
    return lambda w, p, training=True: dropout(w, p) if training else w


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
    feedback = lesson05.attention_dropout.check(in_training(wrong))
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


@pytest.mark.parametrize("call", [
    lambda w, p: F.dropout(w, p),
    lambda w, p: torch.nn.Dropout(p)(w),
    lambda w, p: torch.dropout(w, p, True),
])
def test_calling_pytorchs_dropout_is_refused_by_name(call):
    feedback = lesson05.attention_dropout.check(in_training(call))
    assert feedback.status == "wrong"
    assert "the values are right" in feedback.message and "not to call" in feedback.message


@pytest.mark.parametrize("right", [
    lambda w, p: w * keep_mask(w, p) / (1 - p),
    lambda w, p: w * torch.bernoulli(torch.full_like(w, 1 - p)) / (1 - p),
    lambda w, p: torch.where(torch.rand(w.shape) < p, torch.zeros_like(w), w / (1 - p)),
    lambda w, p: w.clone().mul_(keep_mask(w, p)).div_(1 - p),
])
def test_right_dropout_answers_in_any_reasonable_form_pass(right):
    feedback = lesson05.attention_dropout.check(in_training(right))
    assert feedback.passed, feedback.message


def test_dropout_that_ignores_training_false_is_named():
    feedback = lesson05.attention_dropout.check(lambda w, p, training=True: w * keep_mask(w, p) / (1 - p))
    assert feedback.status == "wrong" and "training=False" in feedback.message, feedback.message
    feedback = lesson05.attention_dropout.check(lambda w, p: w * keep_mask(w, p) / (1 - p))
    assert feedback.status == "wrong" and "training" in feedback.message, feedback.message
    right = lesson05.attention_dropout.check(lambda w, p, training=True: F.dropout(w, p, training) * 1.0)
    assert right.status == "wrong" and "not to call" in right.message  # values right, forbidden call


def test_checking_dropout_does_not_move_the_learners_random_stream_more_than_their_own_calls():
    torch.manual_seed(5)
    lesson05.attention_dropout.check(lesson05.attention_dropout._solution)
    after_one = torch.rand(3)
    torch.manual_seed(5)
    lesson05.attention_dropout.check(lesson05.attention_dropout._solution)
    assert torch.equal(torch.rand(3), after_one)  # the same feedback and the same stream, every run


# --- 1. predict a row's sum ----------------------------------------------------------------------------------
def _nonzero(w):
    return (w != 0).sum(-1)


@pytest.mark.parametrize("wrong, expected_words", [
    (lambda w, p: (w.sum(-1) * (1 - p), p ** _nonzero(w).double()), "(1 - p) times too small"),
    (lambda w, p: (torch.ones_like(w[..., 0]), p ** _nonzero(w).double()), "rows that do not sum to 1"),
    (lambda w, p: (w.sum(-1), torch.full_like(w[..., 0], p)), "ALL of its non-zero weights"),
    (lambda w, p: (w.sum(-1), torch.full_like(w[..., 0], p) ** w.shape[-1]), "Count only the non-zero weights"),
    (lambda w, p: (w.sum(-1), (1 - torch.full_like(w[..., 0], p)) ** _nonzero(w)), "SURVIVES"),
    (lambda w, p: (w.sum(-1), 1 - (1 - torch.full_like(w[..., 0], p)) ** _nonzero(w)), "at least one"),
    (lambda w, p: [w.sum(-1), p ** _nonzero(w).double()], "as a tuple"),
    (lambda w, p: w.sum(-1), "value(s), expected 2"),
])
def test_wrong_row_sum_predictions_are_named(wrong, expected_words):
    feedback = lesson05.row_sum_facts.check(wrong)
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


def test_a_simulation_is_not_an_exact_answer():
    def simulated(w, p):
        sums = torch.stack([(w * (torch.rand_like(w) >= p) / (1 - p)).sum(-1) for _ in range(500)])
        return sums.mean(0), (sums == 0).double().mean(0)
    assert lesson05.row_sum_facts.check(simulated).status == "wrong"


@pytest.mark.parametrize("right", [
    lambda w, p: (w.sum(-1), p ** _nonzero(w).double()),
    lambda w, p: (w.sum(dim=-1), torch.pow(torch.tensor(p), (w > 0).sum(-1))),
    lambda w, p: (w.sum(-1), torch.exp(_nonzero(w) * torch.log(torch.tensor(p, dtype=torch.float64)))),
])
def test_right_row_sum_predictions_pass(right):
    feedback = lesson05.row_sum_facts.check(right)
    assert feedback.passed, feedback.message


# --- 3. spot the bug: an attention map that flickers ----------------------------------------------------------
def _eval_weights(model, batch):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        weights = model(batch, return_weights=True)[1]
    model.train(was_training)
    return weights


def _left_in_eval(model, batch):
    model.eval()
    with torch.no_grad():
        return model(batch, return_weights=True)[1]


def _always_back_to_train(model, batch):
    model.eval()
    weights = model(batch, return_weights=True)[1]
    model.train()
    return weights


def _dropout_set_to_zero(model, batch):
    model.dropout.p = 0.0
    return model(batch, return_weights=True)[1]


@pytest.mark.parametrize("wrong, expected_words", [
    (lesson05.buggy_attention_map, "dropout is still on"),
    (lambda model, batch: model(batch, return_weights=True)[1], "dropout is still on"),
    (_left_in_eval, "came in training mode in eval mode"),
    (_always_back_to_train, "came in eval mode in training mode"),
    (_dropout_set_to_zero, "changed the model's dropout probability"),
    (lambda model, batch: model(batch, return_weights=True), "expected one tensor"),
])
def test_flickering_maps_are_named(wrong, expected_words):
    feedback = lesson05.attention_map.check(wrong)
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


@pytest.mark.parametrize("right", [
    _eval_weights,
    lambda model, batch: copy.deepcopy(model).eval()(batch, return_weights=True)[1],
    lambda model, batch: (lambda mode: (model.eval(), model(batch, return_weights=True)[1],
                                        model.train(mode))[1])(model.training),
])
def test_right_attention_maps_pass(right):
    feedback = lesson05.attention_map.check(right)
    assert feedback.passed, feedback.message


def test_checking_the_map_does_not_move_the_learners_random_stream():
    torch.manual_seed(5)
    expected_next = torch.rand(3)
    torch.manual_seed(5)
    lesson05.attention_map.check(_eval_weights)
    assert torch.equal(torch.rand(3), expected_next)


def test_hints_are_nudges_not_answers():
    for exercise in (lesson05.row_sum_facts, lesson05.attention_dropout, lesson05.attention_map):
        for hint in exercise._hints:
            for answer in ("/ (1 - p)", "/(1 - p)", "/(1-p)", "rand_like(attn_weights) >= p", "p **", "p^",
                           ".eval()", "train(was_training)", "model.training"):
                assert answer not in hint, (exercise.title, hint)
