"""Notebook 08's exercises: right answers in any reasonable form pass, plausible wrong ones are named, every stated
rule is checked, and no hint gives the answer away."""

import pytest
import torch

from helpers.exercises import lesson08
from helpers.toy_model import FetchTask


def _loop_rotation(num_tokens, offset):
    pattern = torch.zeros(num_tokens, num_tokens)
    for i in range(num_tokens):
        pattern[i, (i - offset) % num_tokens] = 1.0
    return pattern


@pytest.mark.parametrize("answer", [
    lambda n, k: torch.eye(n).roll(k, dims=0),
    lambda n, k: torch.eye(n).roll(-k, dims=1),
    lambda n, k: torch.nn.functional.one_hot((torch.arange(n) - k) % n, n),   # long 0/1 is fine
    lambda n, k: torch.eye(n)[(torch.arange(n) - k) % n],
])
def test_rotation_pattern_accepts_every_right_form(answer):
    assert lesson08.rotation_pattern.check(answer).passed


@pytest.mark.parametrize("wrong, words", [
    (lambda n, k: torch.eye(n).roll(k, dims=1), "rotates the other way"),
    (lambda n, k: torch.eye(n).roll(-k, dims=0), "rotates the other way"),
    (lambda n, k: torch.diag(torch.ones(n - k % n), -(k % n)), "wraps round"),
    (lambda n, k: torch.eye(n).flip(-1), "values are not"),
    (_loop_rotation, "no Python loop"),
    (lambda n, k: FetchTask.rotation(n, k).ideal_pattern(), "FetchTask.ideal_pattern"),
    (lambda n, k: [[float(j == (i - k) % n) for j in range(n)] for i in range(n)], "no Python loop"),
])
def test_rotation_pattern_rejects_wrong_answers_and_broken_rules(wrong, words):
    feedback = lesson08.rotation_pattern.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


def test_forbidden_call_is_restored_after_the_check():
    lesson08.rotation_pattern.check(lambda n, k: FetchTask.rotation(n, k).ideal_pattern())
    assert FetchTask.ideal_pattern.__name__ == "ideal_pattern"
    assert torch.equal(FetchTask.reversal(3).ideal_pattern(), torch.eye(3).flip(-1))


@pytest.mark.parametrize("answer", [
    lambda logits, targets: (logits.argmax(-1) == targets).float().mean(0),
    lambda logits, targets: (logits.argmax(-1) == targets).sum(0) / targets.shape[0],
    lambda logits, targets: (logits.max(dim=-1).indices == targets).double().mean(dim=0),
])
def test_position_accuracy_accepts_every_right_form(answer):
    assert lesson08.position_accuracy.check(answer).passed


@pytest.mark.parametrize("wrong, words", [
    (lambda logits, targets: (logits.argmax(-1) == targets).float().mean(), "shape"),
    (lambda logits, targets: (logits.argmax(-1) == targets).float().sum(0), "counted"),
    (lambda logits, targets: torch.stack([(logits[:, t].argmax(-1) == targets[:, t]).float().mean()
                                          for t in range(targets.shape[1])]), "no Python loop"),
])
def test_position_accuracy_rejects_wrong_answers(wrong, words):
    feedback = lesson08.position_accuracy.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


@pytest.mark.parametrize("answer", [
    lambda w, src: (w * torch.nn.functional.one_hot(src, w.shape[-1])).sum(-1).mean((0, 2)),
    lambda w, src: w.gather(-1, src.view(1, 1, -1, 1).expand(*w.shape[:3], 1)).mean((0, 2, 3)),
])
def test_weight_on_source_accepts_every_right_form(answer):
    assert lesson08.weight_on_source.check(answer).passed


def _looped_weight_on_source(w, src):
    total = torch.zeros(w.shape[1])
    for i in range(w.shape[-1]):
        total += w[:, :, i, src[i]].mean(0)
    return total / w.shape[-1]


@pytest.mark.parametrize("wrong, words", [
    (lambda w, src: w[..., src].mean(dim=(0, 2, 3)), "whole columns"),
    (lambda w, src: w[..., src, torch.arange(w.shape[-1])].mean(dim=(0, 2)), "swapped rows and columns"),
    (_looped_weight_on_source, "no Python loop"),
])
def test_weight_on_source_rejects_wrong_answers(wrong, words):
    feedback = lesson08.weight_on_source.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


@pytest.mark.parametrize("answer", [
    lambda ids, tokens, positions: tokens[ids] + positions[: ids.shape[1]],
    lambda ids, tokens, positions: tokens[ids] + positions[torch.arange(ids.shape[1])].unsqueeze(0),
    lambda ids, tokens, positions: torch.nn.functional.embedding(ids, tokens)
    + torch.nn.functional.embedding(torch.arange(ids.shape[1]), positions),
])
def test_position_lookup_accepts_every_right_form(answer):
    assert lesson08.position_lookup.check(answer).passed


def test_position_lookup_names_the_bug_and_the_shape_error():
    feedback = lesson08.position_lookup.check(lesson08.buggy_embed)
    assert feedback.status == "wrong" and "by the letter" in feedback.message
    # The whole table (context_length rows) does not fit T tokens: the checker reports the error, not a traceback.
    feedback = lesson08.position_lookup.check(lambda ids, tokens, positions: tokens[ids] + positions)
    assert feedback.status == "wrong" and "RuntimeError" in feedback.message


def test_the_buggy_embedding_really_loses_the_positions():
    """What the bug message claims: equal letters get equal vectors, wherever they stand."""
    ids = torch.tensor([[3, 3, 1, 3]])
    tokens, positions = torch.randn(5, 4), torch.randn(6, 4)
    buggy = lesson08.buggy_embed(ids, tokens, positions)
    assert torch.equal(buggy[0, 0], buggy[0, 1]) and torch.equal(buggy[0, 0], buggy[0, 3])
    fixed = lesson08.position_lookup._solution(ids, tokens, positions)
    assert not torch.equal(fixed[0, 0], fixed[0, 1])


@pytest.mark.parametrize("name, answer_words", [
    ("rotation_pattern", ["roll(", "% num_tokens", "i - offset) %"]),
    ("position_accuracy", ["argmax", "mean(0", "mean(dim=0"]),
    ("weight_on_source", ["torch.arange", "attn_weights[", "one_hot"]),
    ("position_lookup", ["arange", "[:", "position_table[torch"]),
])
def test_hints_are_nudges_not_answers(name, answer_words):
    hints = " ".join(getattr(lesson08, name)._hints)
    for words in answer_words:
        assert words not in hints, f"{name}: a hint gives away {words!r}"


def test_there_is_a_non_spot_the_bug_exercise_and_one_spot_the_bug():
    exercises = [getattr(lesson08, name) for name in lesson08.__all__]
    kinds = [type(e).__name__ for e in exercises]
    assert kinds.count("SpotTheBug") == 1 and kinds.count("FunctionExercise") == 3
    assert "dim=2" not in lesson08.position_lookup.task  # not another softmax-dimension bug
