"""Notebook 12's exercises: right answers in any reasonable form pass, the real mistakes are named."""

import torch

from helpers.exercises import lesson12
from helpers.induction import prefix_matching_score


def test_prefix_score_accepts_a_loop_and_a_broadcast_answer():
    def with_loops(attn_weights, token_ids):
        num_heads, num_tokens, _ = attn_weights.shape
        totals, counted = torch.zeros(num_heads), 0
        for i in range(num_tokens):
            matches = [j for j in range(1, i + 1) if token_ids[j - 1] == token_ids[i]]
            if matches:
                totals += attn_weights[:, i, matches].sum(dim=-1)
                counted += 1
        return totals / counted
    assert lesson12.prefix_score.check(with_loops).passed

    def with_roll(attn_weights, token_ids):
        previous = torch.roll(token_ids, 1)
        previous[0] = -1
        match = (previous[None, :] == token_ids[:, None]).tril()
        has = match.any(dim=-1)
        return (attn_weights * match).sum(-1)[:, has].mean(-1)
    assert lesson12.prefix_score.check(with_roll).passed


def test_prefix_score_names_the_occurrence_itself_and_the_all_queries_mean():
    def occurrence(attn_weights, token_ids):
        same = (token_ids[None, :] == token_ids[:, None]).tril(-1)
        return (attn_weights * same).sum(-1)[:, same.any(-1)].mean(-1)
    feedback = lesson12.prefix_score.check(occurrence)
    assert feedback.status == "wrong" and "earlier occurrence of ids_i itself" in feedback.message

    def all_queries(attn_weights, token_ids):
        previous = torch.cat([torch.tensor([-1]), token_ids[:-1]])
        return (attn_weights * (previous[None, :] == token_ids[:, None]).tril()).sum(-1).mean(-1)
    feedback = lesson12.prefix_score.check(all_queries)
    assert feedback.status == "wrong" and "every query" in feedback.message


def test_prefix_score_rejects_the_course_function_and_survives_nan():
    def via_course(attn_weights, token_ids):
        return prefix_matching_score(attn_weights[None], token_ids[None])
    feedback = lesson12.prefix_score.check(via_course)
    assert feedback.status == "wrong" and "not to call" in feedback.message

    def nan_answer(attn_weights, token_ids):
        return torch.full((attn_weights.shape[0],), float("nan"))
    feedback = lesson12.prefix_score.check(nan_answer)
    assert feedback.status == "wrong" and "nan" in feedback.message

    def inf_answer(attn_weights, token_ids):
        return torch.full((attn_weights.shape[0],), float("inf"))
    assert lesson12.prefix_score.check(inf_answer).status == "wrong"


def test_knock_out_names_the_view_without_transpose_and_the_tokens_axis():
    feedback = lesson12.knock_out.check(lesson12.knock_out.buggy)
    assert feedback.status == "wrong" and "view(B, H, T, D)" in feedback.message

    def tokens_axis(context_vecs, head, num_heads):
        head_dim = context_vecs.shape[-1] // num_heads
        out = context_vecs.clone()
        out[:, head * head_dim:(head + 1) * head_dim] = 0
        return out
    feedback = lesson12.knock_out.check(tokens_axis)
    assert feedback.status == "wrong" and "axis 1, the tokens" in feedback.message


def test_knock_out_accepts_a_slice_a_mask_and_a_view_with_transpose():
    def by_slice(context_vecs, head, num_heads):
        head_dim = context_vecs.shape[-1] // num_heads
        out = context_vecs.clone()
        out[..., head * head_dim:(head + 1) * head_dim] = 0
        return out

    def by_mask(context_vecs, head, num_heads):
        keep = torch.ones(num_heads)
        keep[head] = 0
        return context_vecs * keep.repeat_interleave(context_vecs.shape[-1] // num_heads)

    def by_transpose(context_vecs, head, num_heads):
        batch_size, num_tokens, d_out = context_vecs.shape
        per_head = context_vecs.view(batch_size, num_tokens, num_heads, -1).transpose(1, 2).clone()  # (B, H, T, D)
        per_head[:, head] = 0
        return per_head.transpose(1, 2).reshape(batch_size, num_tokens, d_out)

    for answer in (by_slice, by_mask, by_transpose):
        assert lesson12.knock_out.check(answer).passed, answer.__name__


def test_messages_point_to_the_lesson12_names():
    def placeholder(*args):
        raise NotImplementedError
    assert "`lesson12.prefix_score.hint()`" in lesson12.prefix_score.check(placeholder).message
    assert "`lesson12.knock_out.hint()`" in lesson12.knock_out.check(placeholder).message


def test_knock_out_survives_inf_and_nan_answers():
    def inf_answer(context_vecs, head, num_heads):
        return torch.full_like(context_vecs, float("inf"))

    def nan_answer(context_vecs, head, num_heads):
        return torch.full_like(context_vecs, float("nan"))
    for answer in (inf_answer, nan_answer):
        feedback = lesson12.knock_out.check(answer)
        assert feedback.status == "wrong", answer.__name__
