"""Lesson 05's exercises: exact predictions, and random answers judged on their structure and statistics."""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F

import helpers
from helpers.exercises import lesson05
from helpers.masks import causal_mask


# --- 1. how far a context vector strays ------------------------------------------------------------------------
def _nonzero(w):
    return (w != 0).sum(-1)


def _variance(w, v, p):
    return p / (1 - p) * w.pow(2) @ v.pow(2)


def _prob(w, p):
    return p ** _nonzero(w).double()


@pytest.mark.parametrize("wrong, expected_words", [
    (lambda w, v, p: (_prob(w, p), p * (1 - p) * w.pow(2) @ v.pow(2)), "variance of the coin flip alone"),
    (lambda w, v, p: (_prob(w, p), w.pow(2) @ v.pow(2) / (1 - p)), "mean of the squares"),
    (lambda w, v, p: (_prob(w, p), p / (1 - p) * (w @ v).pow(2)), "squared the whole sum"),
    (lambda w, v, p: (_prob(w, p), p / (1 - p) * w.pow(2) @ v), "the value v_jd"),
    (lambda w, v, p: (_prob(w, p), p / (1 - p) * w @ v.pow(2)), "the weight a_ij"),
    (lambda w, v, p: (_prob(w, p), _variance(w, v, p).sqrt()), "standard deviation"),
    (lambda w, v, p: (torch.full_like(w[..., 0], p), _variance(w, v, p)), "ALL of the row's non-zero weights"),
    (lambda w, v, p: (torch.full_like(w[..., 0], p) ** w.shape[-1], _variance(w, v, p)), "Count only the non-zero"),
    (lambda w, v, p: ((1 - torch.full_like(w[..., 0], p)) ** _nonzero(w), _variance(w, v, p)), "SURVIVES"),
    (lambda w, v, p: (1 - (1 - torch.full_like(w[..., 0], p)) ** _nonzero(w), _variance(w, v, p)), "at least one"),
    (lambda w, v, p: [_prob(w, p), _variance(w, v, p)], "as a tuple"),
    (lambda w, v, p: _variance(w, v, p), "value(s), expected 2"),
    (lambda w, v, p: (_variance(w, v, p), _prob(w, p)), "shape"),
])
def test_wrong_spread_predictions_are_named(wrong, expected_words):
    feedback = lesson05.dropout_spread.check(wrong)
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


def test_a_simulation_is_not_an_exact_answer():
    def simulated(w, v, p):
        draws = torch.stack([w * (torch.rand_like(w) >= p) / (1 - p) for _ in range(500)])  # (N, ..., T, T)
        context = draws @ v
        return (draws.sum(-1) == 0).double().mean(0), context.var(0)
    assert lesson05.dropout_spread.check(simulated).status == "wrong"


@pytest.mark.parametrize("right", [
    lambda w, v, p: (_prob(w, p), _variance(w, v, p)),
    lambda w, v, p: (torch.pow(torch.tensor(p), (w > 0).sum(-1)), (w**2 @ v**2) * p / (1 - p)),
    lambda w, v, p: (torch.exp(_nonzero(w) * torch.log(torch.tensor(p, dtype=torch.float64))),
                     torch.einsum("...ij,...jd->...id", w**2 * p / (1 - p), v**2)),
])
def test_right_spread_predictions_pass(right):
    feedback = lesson05.dropout_spread.check(right)
    assert feedback.passed, feedback.message


# --- 2. causal attention with dropout ----------------------------------------------------------------------------
def attention_with(dropout, scale=True, mask_first=True):
    """A learner's causal attention whose dropout step is ``dropout(attn_weights, p)``."""
    def learner(queries, keys, values, p, training=True):
        attn_scores = queries @ keys.transpose(-2, -1)
        if scale:
            attn_scores = attn_scores / keys.shape[-1] ** 0.5
        attn_scores = attn_scores.masked_fill(causal_mask(attn_scores.shape[-1]), float("-inf"))
        attn_weights = torch.softmax(attn_scores, dim=-1)
        if training:
            attn_weights = dropout(attn_weights, p)
        return attn_weights @ values, attn_weights
    return learner


def keep_mask(w, p):
    return torch.rand_like(w) >= p


def _context_from_undropped(queries, keys, values, p, training=True):
    _, clean = attention_with(lambda w, p: w)(queries, keys, values, p)
    dropped = clean * keep_mask(clean, p) / (1 - p) if training else clean
    return clean @ values, dropped


def _dropout_on_the_scores(queries, keys, values, p, training=True):
    attn_scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5
    if training:
        attn_scores = attn_scores * keep_mask(attn_scores, p) / (1 - p)
    attn_scores = attn_scores.masked_fill(causal_mask(attn_scores.shape[-1]), float("-inf"))
    attn_weights = torch.softmax(attn_scores, dim=-1)
    return attn_weights @ values, attn_weights


@pytest.mark.parametrize("wrong, expected_words", [
    (attention_with(lambda w, p: w * keep_mask(w, p)), "unchanged"),
    (attention_with(lambda w, p: w * keep_mask(w, p) * (1 - p)), "yours are about a x 0.500"),
    (attention_with(lambda w, p: w * (torch.rand_like(w) < p) / (1 - p) if p > 0 else w), "DROPPED, not kept"),
    (attention_with(lambda w, p: w * (torch.rand(w.shape, generator=torch.Generator().manual_seed(1)) >= p)
                    / (1 - p)), "exactly the same weights"),
    (attention_with(lambda w, p: w * (torch.rand_like(w) >= p / 2) / (1 - p)), "should be close to"),
    (attention_with(lambda w, p: torch.where(keep_mask(w, p), w / (1 - p), w)), "a x"),
    (attention_with(lambda w, p: w * (torch.rand(w.shape[-1]) >= p) / (1 - p)), "one coin flip per key"),
    (attention_with(lambda w, p: w * (torch.rand(*w.shape[:-1], 1) >= p) / (1 - p)), "one coin flip per query"),
    (attention_with(lambda w, p: w * (torch.rand(w.shape[-2:]) >= p) / (1 - p)), "every sequence of the batch"),
    (attention_with(lambda w, p: w * keep_mask(w, p) / (1 - p), scale=False), "sqrt(d_k)"),
    (_context_from_undropped, "weights before dropout"),
    (_dropout_on_the_scores, "before the softmax"),
    (attention_with(lambda w, p: w * keep_mask(w, p) / (1 - p) + torch.triu(torch.ones_like(w), 1) * 0.01),
     "above the diagonal"),
    (lambda q, k, v, p, training=True: list(attention_with(lambda w, p: w)(q, k, v, p)), "as a tuple"),
])
def test_wrong_attention_with_dropout_is_named(wrong, expected_words):
    feedback = lesson05.dropout_attention.check(wrong)
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


@pytest.mark.parametrize("call", [
    lambda w, p: F.dropout(w, p),
    lambda w, p: torch.nn.Dropout(p)(w),
    lambda w, p: torch.dropout(w, p, True),
])
def test_calling_pytorchs_dropout_is_refused_by_name(call):
    feedback = lesson05.dropout_attention.check(attention_with(call))
    assert feedback.status == "wrong"
    assert "the values are right" in feedback.message and "not to call" in feedback.message


def test_the_course_helper_with_dropout_is_refused_too():
    def via_helpers(queries, keys, values, p, training=True):
        return helpers.scaled_dot_product_attention(queries, keys, values, mask=causal_mask(queries.shape[-2]),
                                                    dropout_p=p, training=training)
    assert "not to call" in lesson05.dropout_attention.check(via_helpers).message


@pytest.mark.parametrize("right", [
    attention_with(lambda w, p: w * keep_mask(w, p) / (1 - p)),
    attention_with(lambda w, p: w * torch.bernoulli(torch.full_like(w, 1 - p)) / (1 - p)),
    attention_with(lambda w, p: torch.where(torch.rand(w.shape) < p, torch.zeros_like(w), w / (1 - p))),
    attention_with(lambda w, p: w.clone().mul_(keep_mask(w, p)).div_(1 - p)),
    lesson05.dropout_attention._solution,
])
def test_right_attention_with_dropout_in_any_reasonable_form_passes(right):
    feedback = lesson05.dropout_attention.check(right)
    assert feedback.passed, feedback.message


def test_attention_that_ignores_training_false_is_named():
    always = attention_with(lambda w, p: w * keep_mask(w, p) / (1 - p))
    feedback = lesson05.dropout_attention.check(lambda q, k, v, p, training=True: always(q, k, v, p))
    assert feedback.status == "wrong" and "training=False" in feedback.message, feedback.message
    feedback = lesson05.dropout_attention.check(lambda q, k, v, p: always(q, k, v, p))
    assert feedback.status == "wrong" and "training" in feedback.message, feedback.message


def test_checking_dropout_does_not_move_the_learners_random_stream():
    torch.manual_seed(5)
    expected_next = torch.rand(3)
    torch.manual_seed(5)
    lesson05.dropout_attention.check(lesson05.dropout_attention._solution)
    assert torch.equal(torch.rand(3), expected_next)


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
    for exercise in (lesson05.dropout_spread, lesson05.dropout_attention, lesson05.attention_map):
        for hint in exercise._hints:
            for answer in ("/ (1 - p)", "/(1 - p)", "/(1-p)", "rand_like(attn_weights) >= p", "p **", "p^",
                           ".eval()", "train(was_training)", "model.training", "p / (1 - p)", "**2 @",
                           "masked_fill", "softmax(", "@ values"):
                assert answer not in hint, (exercise.title, hint)


def test_the_spot_the_bug_task_describes_the_symptom_not_the_fix():
    task = lesson05.attention_map.task
    for fix in (r"eval", r"\bmode\b", r"training=False", r"no_grad", r"dropout"):
        assert not re.search(fix, task), fix
