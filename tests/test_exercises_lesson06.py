"""Notebook 06's exercises: stated instructions are checked, hints do not give the answer, right answers in any
reasonable form pass and plausible wrong ones are named."""

from __future__ import annotations

import torch

from helpers.exercises import lesson06


def _hints(exercise) -> str:
    return " ".join(exercise._hints)


def test_model_answers_pass():
    for exercise in (lesson06.split_heads, lesson06.merge_heads, lesson06.head_scale):
        assert exercise.check(exercise._solution).passed, exercise.title


def test_split_heads_accepts_other_right_forms():
    def with_permute(x, num_heads):
        b, t, d = x.shape
        return x.reshape(b, t, num_heads, d // num_heads).permute(0, 2, 1, 3)

    def with_unflatten(x, num_heads):
        return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)

    def with_einops_like_movedim(x, num_heads):
        return x.view(*x.shape[:2], num_heads, -1).movedim(2, 1)

    for function in (with_permute, with_unflatten, with_einops_like_movedim):
        assert lesson06.split_heads.check(function).passed, function.__name__


def test_split_heads_rejects_a_loop_even_when_its_values_are_right():
    def sliced(x, num_heads):
        head_dim = x.shape[-1] // num_heads
        return torch.stack([x[..., h * head_dim:(h + 1) * head_dim] for h in range(num_heads)], dim=1)

    feedback = lesson06.split_heads.check(sliced)
    assert not feedback and "no Python loop" in feedback.message


def test_split_heads_names_the_one_view_shortcut_and_the_swapped_split():
    def one_view(x, num_heads):
        b, t, d = x.shape
        return x.view(b, num_heads, t, d // num_heads)

    def swapped(x, num_heads):
        b, t, d = x.shape
        return x.view(b, t, d // num_heads, num_heads).permute(0, 3, 1, 2)

    assert "memory order" in lesson06.split_heads.check(one_view).message
    assert "every num_heads-th feature" in lesson06.split_heads.check(swapped).message


def test_merge_heads_accepts_reshape_and_rejects_a_missing_transpose_and_loops():
    assert lesson06.merge_heads.check(lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)).passed
    assert lesson06.merge_heads.check(lambda x: x.permute(0, 2, 1, 3).flatten(2)).passed
    no_transpose = lesson06.merge_heads.check(lambda x: x.reshape(x.shape[0], x.shape[2], -1))
    assert not no_transpose and "without transposing back" in no_transpose.message
    with_cat = lesson06.merge_heads.check(lambda x: torch.cat([x[:, h] for h in range(x.shape[1])], dim=-1))
    assert not with_cat and "no Python loop" in with_cat.message


def test_head_scale_names_the_bug_and_accepts_an_sdpa_fix():
    assert "sqrt(d_out)" in lesson06.head_scale.check(lesson06.head_scale.buggy).message

    def with_sdpa(queries, keys, values, num_heads):
        b, t, d = queries.shape
        q, k, v = (x.view(b, t, num_heads, d // num_heads).transpose(1, 2) for x in (queries, keys, values))
        context = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return context.transpose(1, 2).reshape(b, t, d)

    assert lesson06.head_scale.check(with_sdpa).passed


def test_head_scale_rejects_a_scale_that_is_right_only_by_accident():
    def scale_by_num_heads(queries, keys, values, num_heads):
        b, t, d = queries.shape
        q, k, v = (x.view(b, t, num_heads, d // num_heads).transpose(1, 2) for x in (queries, keys, values))
        scores = (q @ k.transpose(2, 3)).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        weights = torch.softmax(scores / num_heads**0.5, dim=-1)
        return (weights @ v).transpose(1, 2).reshape(b, t, d)

    assert not lesson06.head_scale.check(scale_by_num_heads)


def test_hints_are_nudges_not_answers():
    split_hints, merge_hints = _hints(lesson06.split_heads), _hints(lesson06.merge_heads)
    for answer in ("transpose(1, 2)", "swap dimensions 1 and 2", ".view(", "permute"):
        assert answer not in split_hints
    for answer in (".contiguous()", "transpose(1, 2)", "reshape("):
        assert answer not in merge_hints
    assert "head_dim" not in _hints(lesson06.head_scale)


def test_placeholder_says_not_done_without_the_hint():
    def placeholder(*args):
        raise NotImplementedError

    feedback = lesson06.split_heads.check(placeholder)
    assert feedback.status == "not done" and _hints(lesson06.split_heads)[:30] not in feedback.message
