"""Notebook 11's exercises: right answers in any reasonable form pass, the real bugs are named."""

import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import lesson11
from helpers.generation import decode_mask
from helpers.masks import sliding_window_mask
from helpers.positions import apply_rope


def test_window_mask_accepts_other_right_forms():
    def via_tril(num_queries, num_keys, window_size):
        ones = torch.ones(num_keys, num_keys, dtype=torch.bool)
        seen = torch.tril(ones) & ~torch.tril(ones, diagonal=-window_size)
        return ~seen[num_keys - num_queries:]
    assert lesson11.window_mask.check(via_tril).passed


def test_window_mask_names_the_top_left_alignment_of_is_causal():
    def top_left(num_queries, num_keys, window_size):
        i, j = torch.arange(num_queries)[:, None], torch.arange(num_keys)[None, :]
        return (j > i) | (j <= i - window_size)
    feedback = lesson11.window_mask.check(top_left)
    assert feedback.status == "wrong" and "top-left" in feedback.message


def test_window_mask_rejects_calling_the_course_masks():   # as a notebook imports them: module-level names
    def via_decode_mask(num_queries, num_keys, window_size):
        return decode_mask(num_queries, num_keys, window_size)

    def via_sliding_window(num_queries, num_keys, window_size):
        return sliding_window_mask(num_keys, window_size)[num_keys - num_queries:]

    for answer in (via_decode_mask, via_sliding_window):
        feedback = lesson11.window_mask.check(answer)
        assert feedback.status == "wrong" and "not to call" in feedback.message


def test_window_mask_states_the_rule_it_enforces():
    assert "decode_mask" in lesson11.window_mask.task and "sliding_window_mask" in lesson11.window_mask.task


def test_window_mask_names_one_key_too_many_and_the_missing_causal_part():
    def one_too_many(num_queries, num_keys, window_size):
        p, j = torch.arange(num_keys - num_queries, num_keys)[:, None], torch.arange(num_keys)[None, :]
        return (j > p) | (j < p - window_size)

    def window_only(num_queries, num_keys, window_size):
        p, j = torch.arange(num_keys - num_queries, num_keys)[:, None], torch.arange(num_keys)[None, :]
        return j <= p - window_size
    assert "window_size + 1" in lesson11.window_mask.check(one_too_many).message
    assert "causal" in lesson11.window_mask.check(window_only).message


@pytest.mark.parametrize("hide, words", [
    (lambda p, j, w: (j > p) | (j <= p - w + 1), "only window_size - 1 keys"),   # the window's edge, one key short
    (lambda p, j, w: (j >= p) | (j <= p - w), "its own key (j = p)"),            # the causal edge: hides itself
    (lambda p, j, w: (j > p + 1) | (j <= p - w), "just after it"),                 # the causal edge: one key ahead
    (lambda p, j, w: ~((j > p) | (j <= p - w)), "True = hide"),                    # PyTorch's keep convention
])
def test_window_mask_names_a_mistake_on_each_threshold(hide, words):
    # Both thresholds of p - w < j <= p sit in every case; each off-by-one, on either side, gets its own message.
    def answer(num_queries, num_keys, window_size):
        p, j = torch.arange(num_keys - num_queries, num_keys)[:, None], torch.arange(num_keys)[None, :]
        return hide(p, j, window_size)
    feedback = lesson11.window_mask.check(answer)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


# --- exercise 2: RoPE after a cache ---------------------------------------------------------------------------
def _attend(queries, keys, values):
    """Plain causal attention of the last T_q positions, written out (bottom-right mask, stable softmax)."""
    num_new, num_keys = queries.shape[1], keys.shape[1]
    hide = torch.ones(num_new, num_keys, dtype=torch.bool).triu(num_keys - num_new + 1)
    scores = (queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).masked_fill(hide, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values


def test_rope_cache_names_the_missing_position_offset():
    feedback = lesson11.rope_cache.check(lesson11.rope_cache.buggy)
    assert feedback.status == "wrong" and "positions num_cached" in feedback.message


def test_rope_cache_accepts_right_answers_in_several_styles():
    def offset_by_cache(queries, keys, values, cached_keys, cached_values):
        start = cached_keys.shape[1]
        positions = start + torch.arange(queries.shape[1])
        keys = torch.cat([cached_keys, apply_rope(keys, positions)], dim=1)
        return _attend(apply_rope(queries, positions), keys, torch.cat([cached_values, values], dim=1))

    def via_torch(queries, keys, values, cached_keys, cached_values):   # PyTorch's attention, a boolean keep-mask
        num_cached, num_new = cached_keys.shape[1], queries.shape[1]
        positions = torch.arange(num_cached, num_cached + num_new)
        keep = torch.ones(num_new, num_cached + num_new, dtype=torch.bool).tril(num_cached)
        return F.scaled_dot_product_attention(
            apply_rope(queries, positions), torch.cat([cached_keys, apply_rope(keys, positions)], dim=1),
            torch.cat([cached_values, values], dim=1), attn_mask=keep)

    def rotate_all_at_their_positions(queries, keys, values, cached_keys, cached_values):
        num_cached, num_new = cached_keys.shape[1], queries.shape[1]
        # rotate the whole sequence, then keep the last T_q rows: the same angles
        positions = torch.arange(num_cached + num_new)
        padded_q = torch.cat([torch.zeros_like(cached_keys), queries], dim=1)
        padded_k = torch.cat([torch.zeros_like(cached_keys), keys], dim=1)
        queries, new_keys = apply_rope(padded_q, positions)[:, num_cached:], apply_rope(padded_k, positions)[:, num_cached:]
        return _attend(queries, torch.cat([cached_keys, new_keys], dim=1), torch.cat([cached_values, values], dim=1))

    for answer in (offset_by_cache, via_torch, rotate_all_at_their_positions):
        assert lesson11.rope_cache.check(answer).passed, answer.__name__


def test_rope_cache_names_keys_rotated_twice_unrotated_queries_and_the_top_left_mask():
    def rotated_twice(queries, keys, values, cached_keys, cached_values):
        num_cached, num_new = cached_keys.shape[1], queries.shape[1]
        keys = apply_rope(torch.cat([cached_keys, keys], dim=1))             # cache read back and turned again
        return _attend(apply_rope(queries, torch.arange(num_cached, num_cached + num_new)), keys,
                       torch.cat([cached_values, values], dim=1))

    def queries_not_rotated(queries, keys, values, cached_keys, cached_values):
        num_cached, num_new = cached_keys.shape[1], queries.shape[1]
        keys = torch.cat([cached_keys, apply_rope(keys, torch.arange(num_cached, num_cached + num_new))], dim=1)
        return _attend(queries, keys, torch.cat([cached_values, values], dim=1))

    def is_causal(queries, keys, values, cached_keys, cached_values):
        num_cached, num_new = cached_keys.shape[1], queries.shape[1]
        positions = torch.arange(num_cached, num_cached + num_new)
        return F.scaled_dot_product_attention(
            apply_rope(queries, positions), torch.cat([cached_keys, apply_rope(keys, positions)], dim=1),
            torch.cat([cached_values, values], dim=1), is_causal=True)

    for answer, words in ((rotated_twice, "again"), (queries_not_rotated, "queries are not rotated"),
                          (is_causal, "top-left")):
        feedback = lesson11.rope_cache.check(answer)
        assert feedback.status == "wrong" and words in feedback.message, (answer.__name__, feedback.message)


def test_rope_cache_catches_a_softmax_without_the_maximum_on_large_scores():
    def naive_softmax(queries, keys, values, cached_keys, cached_values):
        num_cached, num_new = cached_keys.shape[1], queries.shape[1]
        positions = torch.arange(num_cached, num_cached + num_new)
        queries = apply_rope(queries, positions)
        keys = torch.cat([cached_keys, apply_rope(keys, positions)], dim=1)
        hide = torch.ones(num_new, keys.shape[1], dtype=torch.bool).triu(num_cached + 1)
        scores = (queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).masked_fill(hide, float("-inf"))
        weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)       # overflows once scores pass ~88
        return weights @ torch.cat([cached_values, values], dim=1)
    feedback = lesson11.rope_cache.check(naive_softmax)
    assert feedback.status == "wrong" and "nan" in feedback.message and "times" in feedback.message


def test_every_checker_survives_inf_and_nan_answers():
    for value in (float("nan"), float("inf"), float("-inf")):
        def flat_mask(num_queries, num_keys, window_size, value=value):
            return torch.full((num_queries, num_keys), value)

        def flat_context(queries, keys, values, cached_keys, cached_values, value=value):
            return torch.full_like(queries, value)
        assert lesson11.window_mask.check(flat_mask).status == "wrong"
        assert lesson11.rope_cache.check(flat_context).status == "wrong"


def test_rope_cache_names_the_course_mask_given_to_torch_sdpa():
    # The course's masks say True = hide, PyTorch's boolean attn_mask True = take part: the message says so.
    def answer(queries, keys, values, cached_keys, cached_values):
        num_cached, num_new = cached_keys.shape[1], queries.shape[1]
        positions = torch.arange(num_cached, num_cached + num_new)
        all_keys = torch.cat([cached_keys, apply_rope(keys, positions)], dim=1)
        mask = decode_mask(num_new, num_cached + num_new)
        return torch.nn.functional.scaled_dot_product_attention(
            apply_rope(queries, positions), all_keys, torch.cat([cached_values, values], dim=1), attn_mask=mask)
    feedback = lesson11.rope_cache.check(answer)
    assert feedback.status == "wrong" and "True = take part" in feedback.message, feedback.message
    assert "True = hide" in lesson11.rope_cache.task


def test_rope_cache_task_states_the_tools_signature_without_giving_the_positions_away():
    task = lesson11.rope_cache.task
    assert "apply_rope(x, positions=None)" in task and "0 cached" in task
    assert "by default 0" not in task  # the signature is enough; hint 1 points at the positions
    assert "0 .. num_cached - 1" not in task and "positions num_cached" not in task


def test_the_buggy_rope_step_is_right_with_an_empty_cache_and_wrong_after_three_cached_tokens():
    # The notebook's comparison: 4 tokens with 0 cached, then the last one after 3 cached; only the fix agrees.
    generator = torch.Generator().manual_seed(5)
    queries, keys, values = torch.randn(3, 1, 4, 8, generator=generator)
    empty = keys[:, :0]
    full = _attend(apply_rope(queries), apply_rope(keys), values)[:, -1]    # every token rotated at 0..3
    split = (queries[:, 3:], keys[:, 3:], values[:, 3:], apply_rope(keys[:, :3]), values[:, :3])
    buggy = lesson11.rope_cache.buggy
    torch.testing.assert_close(buggy(queries, keys, values, empty, empty)[:, -1], full)
    assert not torch.allclose(buggy(*split)[:, -1], full, atol=1e-3)
    torch.testing.assert_close(lesson11.rope_cache.reference(*split)[:, -1], full)
