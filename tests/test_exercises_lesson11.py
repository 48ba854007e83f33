"""Notebook 11's exercises: right answers in any reasonable form pass, the real bugs are named."""

import torch

from helpers.exercises import lesson11


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


def test_cached_positions_rejects_calling_the_model_itself():
    def calls_model(model, prompt_ids, num_new_tokens):
        from helpers.generation import generate
        return generate(model, prompt_ids, num_new_tokens).logits
    feedback = lesson11.cached_positions.check(calls_model)
    assert feedback.status == "wrong" and "parts" in feedback.message


def test_cached_positions_names_the_forgotten_offset():
    feedback = lesson11.cached_positions.check(lesson11.cached_positions.buggy)
    assert "position 0" in feedback.message and "num_seen" in feedback.message
