"""Notebook 06's exercises: stated instructions are checked, hints do not give the answer, right answers in any
reasonable form pass and plausible wrong ones are named."""

from __future__ import annotations

import math

import torch

from helpers.exercises import lesson06
from helpers.heads import layer_cost
from helpers.modules import MultiHeadAttention, MultiHeadAttentionWrapper


def _hints(exercise) -> str:
    return " ".join(exercise._hints)


def test_model_answers_pass():
    for exercise in (lesson06.layer_sizes, lesson06.multi_head_bug):
        assert exercise.check(exercise._solution).passed, exercise.title


def test_the_notebook_offers_a_counting_exercise_and_a_spot_the_bug():
    assert lesson06.__all__ == ["layer_sizes", "multi_head_bug"]
    assert not isinstance(lesson06.layer_sizes, type(lesson06.multi_head_bug))


def test_layer_sizes_reference_is_the_measured_layer():
    assert lesson06.layer_sizes.reference("split", 768, 768, 12, True) == (64, 768, 2_362_368)
    assert lesson06.layer_sizes.reference("split", 768, 768, 12, False) == (64, 768, 2_360_064)
    assert lesson06.layer_sizes.reference("wrapper", 3, 2, 2, False) == (2, 4, 36)


def test_layer_sizes_accepts_other_right_forms():
    def with_floats_and_if(kind, d_in, d_out, num_heads, qkv_bias):
        per_linear = d_in * d_out + d_out * int(qkv_bias)
        if kind == "split":
            if not (d_out / num_heads).is_integer():
                return None
            return d_out / num_heads, d_out, 3 * per_linear + d_out * (d_out + 1)
        return d_out, d_out * num_heads, 3 * num_heads * per_linear

    assert lesson06.layer_sizes.check(with_floats_and_if).passed


def test_layer_sizes_forbids_building_the_layer():
    def builds(kind, d_in, d_out, num_heads, qkv_bias):
        cls = MultiHeadAttentionWrapper if kind == "wrapper" else MultiHeadAttention
        layer = cls(d_in, d_out, 1, 0.0, num_heads, qkv_bias=qkv_bias)
        head_dim = layer.heads[0].d_out if kind == "wrapper" else layer.head_dim
        width = num_heads * d_out if kind == "wrapper" else d_out
        return head_dim, width, sum(p.numel() for p in layer.parameters())

    feedback = lesson06.layer_sizes.check(builds)
    assert not feedback and "torch.nn.Linear" in feedback.message

    def uses_the_cost_helper(kind, d_in, d_out, num_heads, qkv_bias):
        if kind == "wrapper":
            return d_out, num_heads * d_out, num_heads * 3 * (d_in * d_out + d_out * qkv_bias)
        cost = layer_cost(d_in, num_heads, d_out // num_heads, 1, d_out=d_out, qkv_bias=qkv_bias)
        return d_out // num_heads, d_out, cost.parameters

    feedback = lesson06.layer_sizes.check(uses_the_cost_helper)
    assert not feedback and "layer_cost" in feedback.message
    # the rule is lifted afterwards: the real nn.Linear is back
    assert torch.nn.Linear.__name__ == "Linear" and isinstance(torch.nn.Linear(2, 2), torch.nn.Module)


def test_layer_sizes_says_which_number_is_off_without_giving_it():
    def off_by_one(kind, d_in, d_out, num_heads, qkv_bias):
        head_dim, width, count = lesson06.layer_sizes._solution(kind, d_in, d_out, num_heads, qkv_bias)
        return head_dim, width, count + 1

    message = lesson06.layer_sizes.check(off_by_one).message
    assert "parameter count is too high" in message and "36" not in message and "37" not in message


def test_layer_sizes_names_the_two_readings_of_d_out():
    def both_like_split(kind, d_in, d_out, num_heads, qkv_bias):
        return lesson06.layer_sizes._solution("split", d_in, d_out, num_heads, qkv_bias)[:2] + (0,)

    assert "d_out is the width of each head" in lesson06.layer_sizes.check(both_like_split).message


def _split(x, num_heads):
    b, t, d = x.shape
    return x.view(b, t, num_heads, d // num_heads).transpose(1, 2)  # (B, H, T, D)


def test_multi_head_bug_is_named_and_accepts_an_sdpa_fix():
    assert "land in the wrong features" in lesson06.multi_head_bug.check(lesson06.multi_head_bug.buggy).message

    def with_sdpa(queries, keys, values, num_heads):
        b, t, d = queries.shape
        q, k, v = (_split(x, num_heads) for x in (queries, keys, values))
        context = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return context.transpose(1, 2).reshape(b, t, d)

    assert lesson06.multi_head_bug.check(with_sdpa).passed

    def with_cat(queries, keys, values, num_heads):                     # the wrapper's way of merging
        b, t, d = queries.shape
        q, k, v = (_split(x, num_heads) for x in (queries, keys, values))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        weights = torch.softmax((q @ k.transpose(2, 3) / math.sqrt(d // num_heads)).masked_fill(mask, -math.inf), -1)
        context = weights @ v
        return torch.cat([context[:, h] for h in range(num_heads)], dim=-1)

    assert lesson06.multi_head_bug.check(with_cat).passed


def test_multi_head_bug_rejects_plausible_wrong_fixes():
    def scale_by_num_heads(queries, keys, values, num_heads):
        b, t, d = queries.shape
        q, k, v = (_split(x, num_heads) for x in (queries, keys, values))
        scores = (q @ k.transpose(2, 3)).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        weights = torch.softmax(scores / num_heads**0.5, dim=-1)
        return (weights @ v).transpose(1, 2).reshape(b, t, d)

    assert not lesson06.multi_head_bug.check(scale_by_num_heads)

    def merge_without_transpose(queries, keys, values, num_heads):
        b, t, d = queries.shape
        q, k, v = (_split(x, num_heads) for x in (queries, keys, values))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        weights = torch.softmax((q @ k.transpose(2, 3) / math.sqrt(d // num_heads)).masked_fill(mask, -math.inf), -1)
        return (weights @ v).contiguous().view(b, t, d)

    feedback = lesson06.multi_head_bug.check(merge_without_transpose)
    assert not feedback and "mixes several tokens" in feedback.message

    def interleaved_everywhere(queries, keys, values, num_heads):
        b, t, d = queries.shape
        q, k, v = (x.view(b, t, d // num_heads, num_heads).permute(0, 3, 1, 2) for x in (queries, keys, values))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        weights = torch.softmax((q @ k.transpose(2, 3) / math.sqrt(d // num_heads)).masked_fill(mask, -math.inf), -1)
        return (weights @ v).permute(0, 2, 3, 1).reshape(b, t, d)

    feedback = lesson06.multi_head_bug.check(interleaved_everywhere)
    assert not feedback and "(D, H) order" in feedback.message


def test_multi_head_bug_is_right_with_one_head_and_each_head_is_right():
    """The bug is in where the heads land, not in the attention: with one head it is right, and each head's
    context vectors are all there, only in the wrong features. It also runs on the inputs' device."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 5, 8, generator=g) for _ in range(3))
    buggy, reference = lesson06.buggy_multi_head, lesson06.multi_head_bug.reference
    torch.testing.assert_close(buggy(q[..., :4], k[..., :4], v[..., :4], 1), reference(q[..., :4], k[..., :4], v[..., :4], 1))
    wrong, right = buggy(q, k, v, 2), reference(q, k, v, 2)
    assert not torch.allclose(wrong, right)
    torch.testing.assert_close(wrong.sort(dim=-1).values, right.sort(dim=-1).values)  # same numbers, wrong places
    assert "device" in lesson06.buggy_multi_head.__code__.co_names


def test_the_spot_the_bug_is_not_a_bug_the_lesson_fixed():
    """The lesson fixes one view straight to (B, H, T, D), a view after transpose, the scale and the SDPA mask's
    meaning in front of the learner; the buggy code gets all of those right."""
    import inspect

    source = inspect.getsource(lesson06.buggy_multi_head)
    assert source.count(".view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)") == 3
    assert "math.sqrt(head_dim)" in source and "scaled_dot_product_attention" not in source
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 4, 6, generator=g) for _ in range(3))
    out = lesson06.buggy_multi_head(q, k, v, 3)
    changed = lesson06.buggy_multi_head(q, k, torch.cat([v[:, :3], 100 + v[:, 3:]], dim=1), 3)
    torch.testing.assert_close(out[:, :3], changed[:, :3])  # causal: later values do not reach earlier tokens


def test_hints_are_nudges_not_answers():
    sizes, bug = _hints(lesson06.layer_sizes), _hints(lesson06.multi_head_bug)
    for answer in ("d_out // num_heads", "num_heads * d_out", "d_out * d_out", "3 *", "% num_heads"):
        assert answer not in sizes
    import inspect

    buggy_comments = " ".join(line.split("#", 1)[1] for line in inspect.getsource(lesson06.buggy_multi_head)
                              .splitlines() if "#" in line)
    exercise = lesson06.multi_head_bug
    for giveaway in ("permute", "transpose", "order", "interleav", "(D, H)", "(B, T, D, H)"):
        for text in (bug, exercise.title, exercise.task, buggy_comments):
            assert giveaway.lower() not in text.lower(), f"{giveaway!r} gives the bug away"


def test_placeholder_says_not_done_without_the_hint():
    def placeholder(*args):
        raise NotImplementedError

    for exercise in (lesson06.layer_sizes, lesson06.multi_head_bug):
        feedback = exercise.check(placeholder)
        assert feedback.status == "not done" and _hints(exercise)[:30] not in feedback.message


def test_layer_sizes_asks_for_none_only_where_the_class_refuses_its_arguments():
    assert lesson06.layer_sizes.reference("split", 10, 10, 3, False) is None
    assert lesson06.layer_sizes.reference("wrapper", 10, 10, 3, False) == (10, 30, 900)
    assert "None" in lesson06.layer_sizes.task

    def never_none(kind, d_in, d_out, num_heads, qkv_bias):
        if kind == "wrapper":
            return d_out, num_heads * d_out, num_heads * 3 * (d_in * d_out + d_out * qkv_bias)
        return d_out // num_heads, d_out, 3 * (d_in * d_out + d_out * qkv_bias) + d_out * d_out + d_out

    feedback = lesson06.layer_sizes.check(never_none)
    assert not feedback and "cannot be built" in feedback.message

    def none_for_both(kind, d_in, d_out, num_heads, qkv_bias):
        return None if d_out % num_heads else never_none(kind, d_in, d_out, num_heads, qkv_bias)

    feedback = lesson06.layer_sizes.check(none_for_both)
    assert not feedback and "can be built" in feedback.message
