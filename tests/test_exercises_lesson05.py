"""Lesson 05's exercises: exact predictions, and random answers judged on their structure and statistics."""

from __future__ import annotations

import copy
import re

import pytest
import torch
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
    (lambda w, v, p: (_prob(w, p), p / (1 - p) * w.pow(2) @ v), "the value v_jc"),
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


def _assumes_causal(w, v, p):
    """Right on causal weights only: row i is taken to hold i + 1 non-zero weights."""
    rows = torch.arange(1, w.shape[-2] + 1)
    return torch.full_like(w[..., 0], p) ** rows, _variance(w, v, p)


def _variance_of_the_lower_triangle(w, v, p):
    """Right on causal weights only: the weights above the diagonal are ignored."""
    return _prob(w, p), p / (1 - p) * w.tril().pow(2) @ v.pow(2)


@pytest.mark.parametrize("wrong, expected_words", [
    (_assumes_causal, "as in a causal row"),
    (_variance_of_the_lower_triangle, "4x4 weights with no zeros (not causal)"),
])
def test_answers_that_only_hold_for_causal_weights_fail(wrong, expected_words):
    feedback = lesson05.dropout_spread.check(wrong)
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


def test_spread_cases_are_irregular():
    cases = lesson05.dropout_spread.cases(torch.Generator().manual_seed(0))
    not_causal = [c for c in cases if c.args[0].shape[-1] != c.args[0].shape[-2]
                  or (c.args[0] * causal_mask(c.args[0].shape[-1])).any()]
    assert any(c.args[2] > 0 for c in not_causal), "a case with weights that are not causal, at p > 0"
    assert any(c.args[0].shape[-1] != c.args[0].shape[-2] for c in cases), "T_q != T_k"
    assert any((c.args[0].sum(-1) == 0).any() for c in cases), "a row with no weight at all"
    assert len({c.args[2] for c in cases}) >= 4


@pytest.mark.parametrize("spoil", [float("inf"), float("-inf"), float("nan")])
def test_spread_answers_with_infinities_or_nan_are_explained(spoil):
    feedback = lesson05.dropout_spread.check(lambda w, v, p: (_prob(w, p), _variance(w, v, p) * 0 + spoil))
    assert feedback.status == "wrong" and "returned value 1 (counting from 0)" in feedback.message, feedback.message


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


# --- 2. spot the bug: a picture that leaves the model as it found it ----------------------------------------------------------
def _eval_weights(model, batch):
    modes = {module: module.training for module in model.modules()}
    model.eval()
    with torch.no_grad():
        weights = model(batch, return_weights=True)[1]
    for module, was_training in modes.items():
        module.training = was_training
    return weights


def _restores_the_modes_with_train(model, batch):
    """model.modules() lists a module before its parts: train(mode) in that order leaves each part in its own."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    weights = model(batch, return_weights=True)[1]
    for module, was_training in modes:
        module.train(was_training)
    return weights


def _restores_only_the_models_own_mode(model, batch):
    """Right for one layer; a frozen layer inside a model in training is switched to training mode."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        weights = model(batch, return_weights=True)[1]
    model.train(was_training)
    return weights


def _one_fixed_draw(model, batch):
    """The same picture at every call, the global stream untouched: but still a dropout draw."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        with torch.no_grad():
            return model(batch, return_weights=True)[1]


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
    (_restores_only_the_models_own_mode, "part `layers.0`, which came in eval mode, in training mode"),
    (_one_fixed_draw, "it is one fixed dropout draw"),
    (lambda model, batch: model(batch, return_weights=True), "expected one tensor"),
])
def test_flickering_maps_are_named(wrong, expected_words):
    feedback = lesson05.attention_map.check(wrong)
    assert feedback.status == "wrong" and expected_words in feedback.message, feedback.message


@pytest.mark.parametrize("right", [
    _eval_weights,
    lambda model, batch: copy.deepcopy(model).eval()(batch, return_weights=True)[1],
    _restores_the_modes_with_train,
])
def test_right_attention_maps_pass(right):
    feedback = lesson05.attention_map.check(right)
    assert feedback.passed, feedback.message


def _reseeds_then_evaluates(model, batch):
    torch.manual_seed(0)                          # "so that the picture is always the same"
    return _eval_weights(model, batch)


def _restores_state_by_hand_but_draws(model, batch):
    weights = _eval_weights(model, batch)
    torch.rand(1)                                 # any draw moves the stream too
    return weights


def _sets_the_state(model, batch):
    torch.set_rng_state(torch.manual_seed(7).get_state())
    return _eval_weights(model, batch)


@pytest.mark.parametrize("wrong", [_reseeds_then_evaluates, _restores_state_by_hand_but_draws, _sets_the_state])
def test_a_fix_that_moves_the_global_random_stream_is_refused(wrong):
    feedback = lesson05.attention_map.check(wrong)
    assert feedback.status == "wrong" and "the values are right" in feedback.message
    assert "global random stream" in feedback.message, feedback.message


def test_the_map_task_states_every_rule_its_checker_enforces():
    task = lesson05.attention_map.task
    assert "trains on exactly as it would have without the picture" in task  # same mode, same dropout p
    assert "a finished model keeps giving the same weights" in task            # eval mode kept
    assert "neither reseeded nor drawn from" in task                           # the global random stream
    assert "every part of the model ends in the mode it came in" in task and "frozen layer" in task
    assert "once training is over, none dropped" in task                       # what the picture shows


def test_the_map_cases_hold_a_frozen_layer_inside_a_model_in_training():
    cases = lesson05.attention_map.cases(torch.Generator().manual_seed(lesson05.attention_map.seed))
    mixed = [model for model, _ in (c.args for c in cases) if len({m.training for m in model.modules()}) > 1]
    assert len(mixed) == 1 and mixed[0].training


def test_the_spread_task_states_what_to_return_and_the_empty_row():
    task = lesson05.dropout_spread.task
    assert "a tuple (probability, variance)" in task and "1 for a row with no non-zero weight" in task
    assert "a_ij**2 * p / (1 - p)" in task  # one weight's variance is given, the rest is the exercise


def test_a_fix_that_forks_the_stream_itself_passes():
    def forked(model, batch):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return _eval_weights(model, batch)
    assert lesson05.attention_map.check(forked).passed


def test_checking_the_map_does_not_move_the_learners_random_stream():
    torch.manual_seed(5)
    expected_next = torch.rand(3)
    torch.manual_seed(5)
    lesson05.attention_map.check(_eval_weights)
    assert torch.equal(torch.rand(3), expected_next)


def test_hints_are_nudges_not_answers():
    for exercise in (lesson05.dropout_spread, lesson05.attention_map):
        for hint in exercise._hints:
            for answer in ("/ (1 - p)", "/(1 - p)", "/(1-p)", "rand_like(attn_weights) >= p", "p **", "p^",
                           ".eval()", "train(was_training)", "model.training", "p / (1 - p)", "**2 @",
                           "masked_fill", "softmax(", "@ values"):
                assert answer not in hint, (exercise.title, hint)


def test_the_spot_the_bug_task_describes_the_symptom_not_the_fix():
    task = lesson05.attention_map.task
    # It states the rule the checker holds it to (the model ends in the mode it came in), not how to get there.
    assert "mode it came in" in task
    for fix in (r"eval", r"training=False", r"no_grad", r"dropout", r"\.train\("):
        assert not re.search(fix, task), fix


def test_the_spread_task_says_which_shapes_the_checker_uses():
    """The task must not tell the learner T_q = T_k when a case holds fewer queries than keys: it names the case."""
    task = lesson05.dropout_spread.task
    cases = lesson05.dropout_spread.cases(torch.Generator().manual_seed(lesson05.dropout_spread.seed))
    assert any(tuple(c.args[0].shape[-2:]) == (3, 5) for c in cases)
    assert "3 queries against 5 keys" in task and "T_q = T_k = T here" not in task
