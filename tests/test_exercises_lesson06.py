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
    for exercise in (lesson06.layer_sizes, lesson06.head_scale):
        assert exercise.check(exercise._solution).passed, exercise.title


def test_the_notebook_offers_a_prediction_and_a_spot_the_bug():
    assert lesson06.__all__ == ["layer_sizes", "head_scale"]
    assert not isinstance(lesson06.layer_sizes, type(lesson06.head_scale))


def test_layer_sizes_reference_is_the_measured_layer():
    assert lesson06.layer_sizes.reference("split", 768, 768, 12, True) == (64, 768, 2_362_368)
    assert lesson06.layer_sizes.reference("split", 768, 768, 12, False) == (64, 768, 2_360_064)
    assert lesson06.layer_sizes.reference("wrapper", 3, 2, 2, False) == (2, 4, 36)


def test_layer_sizes_accepts_other_right_forms():
    def with_floats_and_if(kind, d_in, d_out, num_heads, qkv_bias):
        per_linear = d_in * d_out + d_out * int(qkv_bias)
        if kind == "split":
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


def test_head_scale_names_the_bug_and_accepts_an_sdpa_fix():
    assert "BEFORE the split" in lesson06.head_scale.check(lesson06.head_scale.buggy).message

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


def test_head_scale_buggy_code_is_right_with_one_head_and_runs_on_the_inputs_device():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 5, 4, generator=g) for _ in range(3))
    torch.testing.assert_close(lesson06.buggy_multi_head(q, k, v, 1), lesson06.head_scale.reference(q, k, v, 1))
    source = " ".join(lesson06.buggy_multi_head.__code__.co_names)
    assert "device" in source, "the buggy code builds its mask on the inputs' device"
    assert math.isclose(lesson06.buggy_multi_head(q, k, v, 2).sum().item(),
                        lesson06.buggy_multi_head(q, k, v, 2).sum().item())


def test_hints_are_nudges_not_answers():
    sizes, scale = _hints(lesson06.layer_sizes), _hints(lesson06.head_scale)
    for answer in ("d_out // num_heads", "num_heads * d_out", "d_out * d_out", "3 *"):
        assert answer not in sizes
    for answer in ("head_dim", "sqrt", "shape[-1]", "before the split"):
        assert answer not in scale
    assert "scal" not in lesson06.head_scale.title.lower(), "the title must not name the bug"


def test_placeholder_says_not_done_without_the_hint():
    def placeholder(*args):
        raise NotImplementedError

    for exercise in (lesson06.layer_sizes, lesson06.head_scale):
        feedback = exercise.check(placeholder)
        assert feedback.status == "not done" and _hints(exercise)[:30] not in feedback.message
