"""Notebook 11's exercises: right answers in any reasonable form pass, the real bugs are named."""

import torch

from helpers.exercises import lesson11
from helpers.generation import decode_mask
from helpers.masks import sliding_window_mask


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


def test_grouped_heads_names_is_causal_on_a_chunk_after_a_cache():
    feedback = lesson11.grouped_heads.check(lesson11.grouped_heads.buggy)
    assert feedback.status == "wrong" and "is_causal=True" in feedback.message and "top-left" in feedback.message


def test_grouped_heads_names_repeat_instead_of_repeat_interleave():
    def tiled(queries, keys, values):
        group = queries.shape[1] // keys.shape[1]
        keys, values = keys.repeat(1, group, 1, 1), values.repeat(1, group, 1, 1)
        num_queries, num_keys = queries.shape[2], keys.shape[2]
        mask = torch.ones(num_queries, num_keys, dtype=torch.bool).triu(num_keys - num_queries + 1)
        scores = (queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ values
    feedback = lesson11.grouped_heads.check(tiled)
    assert feedback.status == "wrong" and "repeat_interleave" in feedback.message


def test_grouped_heads_names_the_top_left_mask():
    def top_left(queries, keys, values):
        group = queries.shape[1] // keys.shape[1]
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
        mask = torch.ones(queries.shape[2], keys.shape[2], dtype=torch.bool).triu(1)
        scores = (queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ values
    feedback = lesson11.grouped_heads.check(top_left)
    assert feedback.status == "wrong" and "top-left" in feedback.message


def test_grouped_heads_accepts_an_index_form_and_torchs_attention_but_not_the_course_helper():
    def by_index(queries, keys, values):
        group = queries.shape[1] // keys.shape[1]
        index = torch.arange(queries.shape[1]) // group                      # query head h -> h // G
        keys, values = keys[:, index], values[:, index]
        num_queries, num_keys = queries.shape[2], keys.shape[2]
        mask = torch.ones(num_queries, num_keys, dtype=torch.bool).triu(num_keys - num_queries + 1)
        scores = (queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ values
    assert lesson11.grouped_heads.check(by_index).passed

    def via_torch(queries, keys, values):   # PyTorch's attention with the bottom-right mask is a right answer
        group = queries.shape[1] // keys.shape[1]
        mask = torch.ones(queries.shape[2], keys.shape[2], dtype=torch.bool).triu(
            keys.shape[2] - queries.shape[2] + 1)
        return torch.nn.functional.scaled_dot_product_attention(
            queries, keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1), attn_mask=~mask)
    assert lesson11.grouped_heads.check(via_torch).passed

    def via_course_helper(queries, keys, values):
        from helpers.gqa import expand_kv_heads
        mask = torch.ones(queries.shape[2], keys.shape[2], dtype=torch.bool).triu(
            keys.shape[2] - queries.shape[2] + 1)
        return torch.nn.functional.scaled_dot_product_attention(
            queries, expand_kv_heads(keys, queries.shape[1]), expand_kv_heads(values, queries.shape[1]),
            attn_mask=~mask)
    feedback = lesson11.grouped_heads.check(via_course_helper)
    assert feedback.status == "wrong" and "not to call" in feedback.message
