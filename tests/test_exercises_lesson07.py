"""Lesson 07's exercises: the instructions they state are checked, and plausible wrong answers are named."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.efficient import iter_tile_steps
from helpers.exercises import lesson07


def test_online_update_task_uses_the_notation_card():
    assert "ℓ_i" in lesson07.online_update.task and "running_sum" in lesson07.online_update.task
    assert " s = " not in lesson07.online_update.task


def test_hints_do_not_give_the_answer():
    for exercise in (lesson07.online_update, lesson07.one_query_tiled, lesson07.causal_tiles_computed,
                     lesson07.value_width_scale):
        for hint in exercise._hints:
            assert "exp(old_max - new_max)" not in hint and "keys.shape[-1]" not in hint, hint
            assert "(n + 1)" not in hint and "ceil" not in hint, hint


def _all_at_once(query, keys, values, tile_size):
    return torch.softmax(keys @ query / math.sqrt(keys.shape[-1]), dim=-1) @ values


def _scores_first_then_tiles(query, keys, values, tile_size):
    scores = keys @ query / math.sqrt(keys.shape[-1])          # all T scores at once: not allowed
    running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    accumulator = torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        block = scores[start:start + tile_size]
        new_max = torch.maximum(running_max, block.max())
        rebase = torch.exp(running_max - new_max)
        weights = torch.exp(block - new_max)
        running_sum = running_sum * rebase + weights.sum()
        accumulator = accumulator * rebase + weights @ values[start:start + tile_size]
        running_max = new_max
    return accumulator / running_sum


def _tiles_kept_then_joined(query, keys, values, tile_size):
    scale = 1 / math.sqrt(keys.shape[-1])
    scores = torch.cat([keys[s:s + tile_size] @ query * scale for s in range(0, keys.shape[0], tile_size)])
    return torch.softmax(scores, dim=-1) @ values


@pytest.mark.parametrize("wrong", [_all_at_once, _scores_first_then_tiles, _tiles_kept_then_joined])
def test_one_query_tiled_rejects_right_values_built_all_at_once(wrong):
    feedback = lesson07.one_query_tiled.check(wrong)
    assert feedback.status == "wrong"
    assert "one tile at a time" in feedback.message and "4,096 keys" in feedback.message


def test_one_query_tiled_accepts_a_tiled_answer_written_differently():
    def logsumexp_style(query, keys, values, tile_size):
        d_k = keys.shape[-1]
        m, l, acc = -math.inf, 0.0, torch.zeros(values.shape[-1])
        for start in range(0, keys.shape[0], tile_size):
            s = keys[start:start + tile_size] @ query / d_k ** 0.5
            m_new = max(m, s.max().item())
            e = torch.exp(s - m_new)
            l = l * math.exp(m - m_new) + e.sum()
            acc = acc * math.exp(m - m_new) + e @ values[start:start + tile_size]
            m = m_new
        return acc / l
    assert lesson07.one_query_tiled.check(logsumexp_style).passed


@pytest.mark.parametrize("right", [
    lambda t, b: math.ceil(t / b) * (math.ceil(t / b) + 1) // 2,
    lambda t, b: sum(range(1, -(-t // b) + 1)),
    lambda t, b: float(math.ceil(t / b) * (math.ceil(t / b) + 1) / 2),   # a float that equals the int
])
def test_tile_count_accepts_any_right_formula(right):
    assert lesson07.causal_tiles_computed.check(right).passed


def test_tile_count_forbids_running_the_tiles():
    def count_by_running(num_tokens, tile_size):
        q = torch.zeros(num_tokens, 1)
        return len(list(iter_tile_steps(q, q, q, is_causal=True, tile_size=tile_size)))
    feedback = lesson07.causal_tiles_computed.check(count_by_running)
    assert feedback.status == "wrong" and "iter_tile_steps" in feedback.message


def test_tile_count_reference_is_what_tiled_attention_visits():
    for num_tokens, tile_size in ((8, 2), (10, 4), (37, 8), (5, 8), (1, 1)):
        n = math.ceil(num_tokens / tile_size)
        assert lesson07._reference_tile_count(num_tokens, tile_size) == n * (n + 1) // 2


@pytest.mark.parametrize("wrong, words", [
    (lambda t, b: torch.tensor(10), "expected an int"),
    (lambda t, b: (t // b) ** 2, None),
])
def test_tile_count_rejects_other_wrong_answers(wrong, words):
    feedback = lesson07.causal_tiles_computed.check(wrong)
    assert feedback.status == "wrong"
    if words:
        assert words in feedback.message


def test_spot_the_bug_is_not_one_the_lesson_fixed():
    # the lesson inverts helpers' mask for PyTorch's attn_mask in front of the learner: no exercise repeats it
    assert not hasattr(lesson07, "sdpa_mask")
    feedback = lesson07.value_width_scale.check(lesson07.value_width_scale.buggy)
    assert feedback.status == "wrong" and "1/sqrt(d_v)" in feedback.message
